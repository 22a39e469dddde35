// Capped exponential backoff with jitter, shared by the retry loops of the agent (membership
// re-registration, control-plane reconnects). Jitter keeps a fleet of agents that lost the same
// dependency at the same moment from coming back in lockstep.

export interface BackoffOptions {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Fraction of the delay randomised away (0..1); 0.5 gives delays in [d/2, d]. */
  readonly jitter?: number;
}

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
