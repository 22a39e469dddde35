export { freePort } from '../../lib/ports.js';
