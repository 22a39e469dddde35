// The one retry policy of both daemons and the CLI: cockatiel's retry policy decides which
// failures are retried and how often; the wait between attempts is a capped exponential backoff
// (with jitter where a fleet could otherwise come back in lockstep) that ends at once when the
// caller stops. Loops that cannot be written as "retry this until it works" (a session that
// reconnects forever) use Backoff and sleep directly.
import { handleWhen, retry as retryPolicy } from 'cockatiel';

export interface BackoffOptions {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Fraction of the delay randomised away (0..1); 0.5 gives delays in [d/2, d]. */
  readonly jitter?: number;
}

/** Capped exponential backoff: initialMs, 2·initialMs, … up to maxMs, less the jitter. */
export class Backoff {
  private attempt = 0;

  constructor(private readonly options: BackoffOptions) {}

  /** The delay before the next attempt; grows until reset(). */
  next(): number {
    const exp = Math.min(this.options.maxMs, this.options.initialMs * 2 ** Math.min(this.attempt, 30));
    this.attempt += 1;
    const jitter = this.options.jitter ?? 0.5;
    return Math.round(exp * (1 - jitter * Math.random()));
  }

  reset(): void {
    this.attempt = 0;
  }
}

/** Resolves after ms, or early (without throwing) when the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** What withDeadline() rejects with when the work did not settle in time. */
export class DeadlineExceeded extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DeadlineExceeded';
  }
}

/**
 * The work's outcome, or DeadlineExceeded(message) once `ms` passed first. The work itself is not
 * stopped (a write the kernel holds cannot be); its late outcome is ignored. The timer does not
 * keep the process alive.
 */
export function withDeadline<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineExceeded(message)), ms);
    timer.unref();
  });
  work.catch(() => undefined); // a late failure is nobody's unhandled rejection
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

/** What retry() rejects with when its signal aborted before an attempt succeeded. */
export class RetryAborted extends Error {
  constructor() {
    super('stopped before the operation succeeded');
    this.name = 'RetryAborted';
  }
}

export interface RetryOptions {
  /** The wait between attempts (ignored where `delayMs` answers). */
  readonly backoff?: BackoffOptions;
  /** The wait after this failure, when the failure itself says (e.g. an HTTP Retry-After). */
  readonly delayMs?: (err: Error) => number | undefined;
  /** Which failures are worth another attempt (default: every one); the others are thrown at once. */
  readonly retryIf?: (err: Error) => boolean;
  /** Retries after the first attempt (default: no limit). */
  readonly maxRetries?: number;
  /** Stops retrying: the wait ends at once, no attempt starts, retry() rejects with RetryAborted. */
  readonly signal?: AbortSignal;
  /** Called before each wait with the failure, the wait and the retry's number (1, 2, …). */
  readonly onRetry?: (err: Error, delayMs: number, retry: number) => void;
}

const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 200, maxMs: 5000, jitter: 0 };

/**
 * Runs `work` until it succeeds, retrying the failures `retryIf` accepts. Rejects with the first
 * failure retryIf declines, the last one once maxRetries ran out, or RetryAborted once the signal
 * aborted (a failure while aborting is not retried either).
 */
export async function retry<T>(work: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const { signal } = options;
  const backoff = new Backoff(options.backoff ?? DEFAULT_BACKOFF);
  let waitMs = 0;
  const policy = retryPolicy(handleWhen((err) => !signal?.aborted && (options.retryIf?.(err) ?? true)), {
    maxAttempts: options.maxRetries ?? Number.POSITIVE_INFINITY,
  });
  policy.onRetry((event) => {
    const err = 'error' in event ? event.error : new Error('retried');
    waitMs = options.delayMs?.(err) ?? backoff.next();
    options.onRetry?.(err, waitMs, event.attempt);
  });
  // cockatiel's own wait between attempts cannot be cut short, so the policy retries at once and
  // each retry first waits here, where aborting ends the wait.
  return policy.execute(async ({ attempt }) => {
    if (attempt > 0) await sleep(waitMs, signal);
    if (signal?.aborted) throw new RetryAborted();
    return work();
  }, signal);
}

/** What an optimistic attempt answers when another writer won the race (its guard failed). */
export const LOST_RACE: unique symbol = Symbol('lost race');
export type LostRace = typeof LOST_RACE;

class LostRaceSignal extends Error {}

/**
 * Optimistic concurrency: read, decide, commit guarded; when the guard fails (`attempt` answers
 * LOST_RACE) read and decide again, at once — the winner's write is already visible, so waiting
 * gains nothing. After `attempts` lost races, rejects with `exhausted()` (a busy record: the
 * caller's 409/503). Anything `attempt` throws is thrown as it is, never retried.
 */
export async function retryLostRaces<T>(attempts: number, attempt: (n: number) => Promise<T | LostRace>, exhausted: () => Error): Promise<T> {
  const policy = retryPolicy(handleWhen((err) => err instanceof LostRaceSignal), { maxAttempts: Math.max(0, attempts - 1) });
  try {
    return await policy.execute(async ({ attempt: n }) => {
      const result = await attempt(n);
      if (result === LOST_RACE) throw new LostRaceSignal();
      return result;
    });
  } catch (err) {
    if (err instanceof LostRaceSignal) throw exhausted();
    throw err;
  }
}
