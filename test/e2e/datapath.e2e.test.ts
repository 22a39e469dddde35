// The data path on the real kernel (QEMU guest): the scenarios live beside the agent's data path.
import '../../agent/datapath/kernel.e2e.js';
