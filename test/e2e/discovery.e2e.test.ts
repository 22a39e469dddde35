// The NVMe/TCP discovery controller on the real kernel (QEMU guest, nvme-cli): the scenarios are
// in test/e2e/scenarios/.
import './scenarios/discovery.e2e.js';
