// The data path on the real kernel (QEMU guest): the scenarios are in test/e2e/scenarios/.
import './scenarios/kernel.e2e.js';
