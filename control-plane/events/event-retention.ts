// Bounded event log: at most `maxEvents` events and none older than `maxAgeDays`. The active
// cluster manager runs the trim every `intervalMs` (the lead starts it on winning leadership
// and stops it on losing it); between runs the log may exceed maxEvents by what is recorded
// in one interval.
//
// Cost. The oldest events are the END of the key range (ids sort newest first), so each limit
// is ONE ranged delete from a boundary key to the end of the prefix. By age the boundary is the
// cutoff time's key. By count it is the time before which exactly `total - maxEvents` events
// lie, found with count-only ranges that start at the old end: each counts only keys older
// than a probe time, so while the excess is small every probe is small. Trimming twice (two
// control planes after a failover) is harmless, so the deletes are not fenced.
import type { Logger } from '../../lib/logger.js';
import { MAX_EVENT_NS, nowNs } from './event-id.js';
import type { EventPosition, EventStore } from './event-store.js';

export const DEFAULT_MAX_EVENTS = 100_000;
export const DEFAULT_MAX_AGE_DAYS = 30;
export const DEFAULT_RETENTION_INTERVAL_MS = 60_000;
const NS_PER_MS = 1_000_000n;

export interface RetentionOptions {
  readonly maxEvents?: number;
  readonly maxAgeDays?: number;
  readonly intervalMs?: number;
  /** Epoch nanoseconds of "now" (tests). */
  readonly clock?: () => bigint;
}

export interface TrimResult {
  readonly deletedByAge: number;
  readonly deletedByCount: number;
}

/** One trim: by age, then by count. */
export async function trimEvents(store: EventStore, options: RetentionOptions = {}): Promise<TrimResult> {
  const maxEvents = options.maxEvents ?? DEFAULT_MAX_EVENTS;
  const maxAgeDays = options.maxAgeDays ?? DEFAULT_MAX_AGE_DAYS;
  const now = (options.clock ?? nowNs)();

  const cutoff = now - BigInt(Math.round(maxAgeDays * 86_400_000)) * NS_PER_MS;
  const deletedByAge = await store.deleteOlderThan(cutoff);

  const total = await store.countAll();
  if (total <= maxEvents) return { deletedByAge, deletedByCount: 0 };
  const boundary = await oldestToDelete(store, total - maxEvents, cutoff);
  const deletedByCount = boundary === undefined ? 0 : await store.deleteFrom(boundary);
  return { deletedByAge, deletedByCount };
}

/** Keys read at most to place the count boundary exactly (keys-only, but etcd 3.4 still reads values). */
const BOUNDARY_READ_SLACK = 2000;
const FIRST_STEP_NS = 60n * 1_000_000_000n;

/**
 * The position from which the `excess` oldest events run to the end of the log. Count-only
 * ranges from the old end narrow a time t with at least `excess` events older than it (gallop
 * upward from `floor` in doubling steps, then bisect) until at most BOUNDARY_READ_SLACK more
 * than needed are older; the boundary is then read exactly: the k-th key older than t, where
 * k = count(older than t) - excess.
 */
async function oldestToDelete(store: EventStore, excess: number, floor: bigint): Promise<EventPosition | undefined> {
  const olderThan = (t: bigint) => store.countOlderThan(t);
  let lo = floor > 0n ? floor : 0n;
  if ((await olderThan(lo)) >= excess) lo = 0n; // events older than the age cutoff (clock skew)
  let step = FIRST_STEP_NS;
  let hi = lo + step;
  let older = await olderThan(hi);
  while (older < excess && hi < MAX_EVENT_NS) {
    lo = hi;
    step *= 2n;
    hi = lo + step > MAX_EVENT_NS ? MAX_EVENT_NS : lo + step;
    older = await olderThan(hi);
  }
  // Invariant: olderThan(lo) < excess <= older = olderThan(hi).
  while (older - excess > BOUNDARY_READ_SLACK && hi - lo > 1n) {
    const mid = (lo + hi) / 2n;
    const n = await olderThan(mid);
    if (n >= excess) [hi, older] = [mid, n];
    else lo = mid;
  }
  if (older < excess) return undefined; // fewer events than counted: another trimmer got there first
  return store.positionOlderThan(hi, older - excess);
}

export interface EventRetention {
  stop(): Promise<void>;
}

/** Trims now and every `intervalMs` until stopped. Failures are logged and retried next time. */
export function startEventRetention(store: EventStore, logger: Logger, options: RetentionOptions = {}): EventRetention {
  const intervalMs = options.intervalMs ?? DEFAULT_RETENTION_INTERVAL_MS;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();

  const run = async () => {
    try {
      const result = await trimEvents(store, options);
      if (result.deletedByAge + result.deletedByCount > 0) logger.info(result, 'event log trimmed');
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'event log trim failed; will retry');
    }
  };
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = run().finally(schedule);
    }, intervalMs);
    timer.unref();
  };
  running = run().finally(schedule);

  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}
