// --wait: poll until an operation finishes, with progress on stderr and a deadline. The API has
// no push for object states (spec §6), so clients poll GET (wire-conventions §8).
import { setTimeout as sleep } from 'node:timers/promises';
import { OperationError } from './errors.js';
import { formatDurationMs } from './units.js';

export type Probe<T> = { readonly done: true; readonly value: T } | { readonly done: false; readonly state: string };

export interface WaitOptions<T> {
  /** "volume default/vol1 (…) to become Available": completes "waiting for …" and "timed out … waiting for …". */
  readonly what: string;
  readonly timeoutMs: number;
  readonly intervalMs?: number;
  /** Throws to stop waiting (e.g. the volume went Failed). */
  readonly probe: () => Promise<Probe<T>>;
  readonly progress: (line: string) => void;
}

const DEFAULT_INTERVAL_MS = 1000;
/** A still-waiting line this often, so a long wait visibly lives. */
const PROGRESS_EVERY_MS = 10_000;

export async function waitFor<T>(options: WaitOptions<T>): Promise<T> {
  const started = Date.now();
  const interval = options.intervalMs ?? DEFAULT_INTERVAL_MS;
  let lastState: string | undefined;
  let lastProgressAt = 0;
  for (;;) {
    const result = await options.probe();
    if (result.done) return result.value;
    const elapsed = Date.now() - started;
    if (result.state !== lastState || elapsed - lastProgressAt >= PROGRESS_EVERY_MS) {
      options.progress(`waiting for ${options.what}: ${result.state} (${formatDurationMs(elapsed)})`);
      lastState = result.state;
      lastProgressAt = elapsed;
    }
    const remaining = options.timeoutMs - elapsed;
    if (remaining <= 0) {
      throw new OperationError(`timed out after ${formatDurationMs(options.timeoutMs)} waiting for ${options.what}; it is still ${result.state}`);
    }
    await sleep(Math.min(interval, remaining));
  }
}
