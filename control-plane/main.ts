#!/usr/bin/env node
// strata-control-plane: process entry. Loads the one frozen config, logs JSON to stdout,
// tells systemd when it is ready, and stops gracefully on SIGTERM/SIGINT.
import { runDaemon } from '../lib/daemon.js';
import { createLogger } from '../lib/logger.js';
import { loadControlPlaneConfig } from './config.js';
import { startControlPlane } from './control-plane.js';

const config = loadControlPlaneConfig();
const logger = createLogger('strata-control-plane', config.logLevel);

await runDaemon({
  name: 'strata-control-plane',
  logger,
  stopTimeoutMs: 10_000,
  start: () => startControlPlane(config, logger),
});
