#!/usr/bin/env node
// strata-control-plane: process entry. Loads the one frozen config, logs JSON to stdout,
// tells systemd when it is ready, and stops gracefully on SIGTERM/SIGINT.
import { createLogger } from '../lib/logger.js';
import { notifyReady, notifyStopping, startWatchdog } from '../lib/systemd.js';
import { loadControlPlaneConfig } from './config.js';
import { startControlPlane } from './control-plane.js';

const config = loadControlPlaneConfig();
const logger = createLogger('strata-control-plane', config.logLevel);

process.on('uncaughtException', (err) => {
  logger.fatal({ err }, 'uncaught exception');
  process.exit(1);
});
process.on('unhandledRejection', (err) => {
  logger.fatal({ err }, 'unhandled rejection');
  process.exit(1);
});

const running = await startControlPlane(config, logger);
notifyReady();
const stopWatchdog = startWatchdog();

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'stopping');
  notifyStopping();
  stopWatchdog();
  const forced = setTimeout(() => {
    logger.error('graceful stop took over 10 s; exiting');
    process.exit(1);
  }, 10_000);
  forced.unref();
  await running.stop();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
