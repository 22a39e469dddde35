// Leader task: a server whose agent published its box key after the last in-band authentication
// change (a new server, or an agent that lost its state directory) gets the current host keys
// sealed to it within `intervalMs`. Until then its agent fails closed while in-band
// authentication is enabled (agent/datapath/host-auth.ts).
import type { Logger } from '../../lib/logger.js';
import type { InBandAuthService } from './in-band-auth-service.js';

export function startResealTask(inBandAuth: InBandAuthService, logger: Logger, intervalMs = 2000): { stop(): Promise<void> } {
  let stopped = false;
  let running: Promise<void> = Promise.resolve();
  const run = async () => {
    try {
      const sealed = await inBandAuth.resealStale();
      if (sealed > 0) logger.info({ servers: sealed }, 'in-band authentication host keys sealed to new server keys');
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
