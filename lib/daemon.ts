// The process lifecycle both daemons share: fatal handlers, SIGTERM/SIGINT installed before
// start (a stop requested while still waiting for etcd must work too), systemd readiness and
// watchdog once started, and a bounded graceful stop that exits 0.
import type { Logger } from './logger.js';
import { notifyReady, notifyStopping, startWatchdog } from './systemd.js';

export interface Stoppable {
  stop(): Promise<void>;
}

export interface DaemonOptions<T extends Stoppable> {
  readonly name: string;
  readonly logger: Logger;
  /**
   * Starts the service; resolves once it is ready to serve. A service that can be stopped
   * before it is ready hands itself to `attach` early, so a signal meanwhile stops it.
   */
  readonly start: (attach: (service: T) => void) => Promise<T>;
  /** How long a graceful stop may take before the process exits 1. */
  readonly stopTimeoutMs: number;
}

export async function runDaemon<T extends Stoppable>(options: DaemonOptions<T>): Promise<void> {
  const { logger } = options;
  process.on('uncaughtException', (err) => {
    logger.fatal({ err }, 'uncaught exception');
    process.exit(1);
  });
  process.on('unhandledRejection', (err) => {
    logger.fatal({ err }, 'unhandled rejection');
    process.exit(1);
  });

  let service: T | undefined;
  let stopping = false;
  let stopWatchdog = (): void => {};
  const shutdown = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping');
    notifyStopping((err) => logger.warn({ err }, 'systemd STOPPING notification failed'));
    stopWatchdog();
    const forced = setTimeout(() => {
      logger.error(`graceful stop took over ${options.stopTimeoutMs / 1000} s; exiting`);
      process.exit(1);
    }, options.stopTimeoutMs);
    forced.unref();
    try {
      await service?.stop();
    } catch (err) {
      logger.error({ err }, `stopping ${options.name} failed`);
    }
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));

  try {
    service = await options.start((early) => {
      service = early;
    });
  } catch (err) {
    if (stopping) return;
    logger.fatal({ err }, `${options.name} failed to start`);
    await service?.stop().catch(() => undefined);
    process.exit(1);
  }
  if (stopping) {
    await service.stop();
    return;
  }
  notifyReady((err) => logger.warn({ err }, 'systemd READY notification failed'));
  stopWatchdog = startWatchdog((err) => logger.warn({ err }, 'systemd watchdog notification failed'));
}
