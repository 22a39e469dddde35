// Leader task: a server whose agent published its box key after the last change of in-band
// authentication or TLS on NVMe/TCP (a new server, or an agent that lost its state directory)
// gets the current host keys sealed to it within `intervalMs`. Until then its agent fails closed
// while the feature is on (agent/datapath/kernel/host-auth.ts).
import type { Logger } from '../../lib/logger.js';

export function startResealTask(feature: { resealStale(): Promise<number> }, logger: Logger, what: string, intervalMs = 2000): { stop(): Promise<void> } {
  let stopped = false;
  let running: Promise<void> = Promise.resolve();
  const run = async () => {
    try {
      const sealed = await feature.resealStale();
      if (sealed > 0) logger.info({ servers: sealed }, `${what} host keys sealed to new server keys`);
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'sealing host keys to new server keys failed; will retry');
    }
  };
  const timer = setInterval(() => {
    if (!stopped) running = running.then(run);
  }, intervalMs);
  running = running.then(run);
  return {
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
