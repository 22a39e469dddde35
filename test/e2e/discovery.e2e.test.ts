// The NVMe/TCP discovery controller on the real kernel (QEMU guest, nvme-cli): the scenarios live
// beside the agent's discovery controller.
import '../../agent/discovery/discovery.e2e.js';
