// The node storage pool on the real kernel (QEMU guest + the real control plane): created,
// measured, grown by POST /api/v2/nvmeDevices, resumed after a crash mid-grow.
import './scenarios/pool.e2e.js';
