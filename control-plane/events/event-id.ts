// Event ids, their etcd keys and times. An id is `<20 digits>-<12 hex>`: the digits are
// 99999999999999999999 minus the event's epoch time in nanoseconds, zero-padded, so etcd's
// ascending key order is NEWEST FIRST. That order matters because etcd 3.4 serves a plain
// ascending range with a limit cheaply, while any sorted (descending) range reads every value
// in it first (~250 ms at 100 000 events): listing newest-first is then one limited range, and
// the oldest events (retention) sit at the end of the prefix, removable with one ranged delete.
// The random suffix makes ids unique across control planes recording in the same nanosecond.
// The keys themselves are the event store's (event-store.ts).
import { randomBytes } from 'node:crypto';

/** The largest time an id can hold (year 5138); later times are clamped. */
export const MAX_EVENT_NS = 99_999_999_999_999_999_999n;
const TIME_DIGITS = 20;
export const EVENT_ID_PATTERN = /^\d{20}-[0-9a-f]{12}$/;

let lastNs = 0n;

/**
 * Now, as epoch nanoseconds, strictly increasing within this process (so events one process
 * records keep their order). Millisecond-accurate: the sub-millisecond digits come from the
 * monotonic clock, which only orders events inside one millisecond.
 */
export function nowNs(): bigint {
  const ns = BigInt(Date.now()) * 1_000_000n + (process.hrtime.bigint() % 1_000_000n);
  lastNs = ns > lastNs ? ns : lastNs + 1n;
  return lastNs;
}

function clamp(ns: bigint): bigint {
  return ns < 0n ? 0n : ns > MAX_EVENT_NS ? MAX_EVENT_NS : ns;
}

/** The 20 key digits of a time: smaller digits are newer. */
function timeDigits(ns: bigint): string {
  return (MAX_EVENT_NS - clamp(ns)).toString().padStart(TIME_DIGITS, '0');
}

export function newEventId(ns: bigint): string {
  return `${timeDigits(ns)}-${randomBytes(6).toString('hex')}`;
}

/** The time an id encodes (for retention and tests). */
export function nsOfEventId(id: string): bigint {
  return MAX_EVENT_NS - BigInt(id.slice(0, TIME_DIGITS));
}

export function isEventId(value: string): boolean {
  return EVENT_ID_PATTERN.test(value);
}

/** RFC 3339 UTC with nine fractional digits, e.g. 2024-05-01T12:00:00.123456789Z. */
export function rfc3339Nano(ns: bigint): string {
  const seconds = ns / 1_000_000_000n;
  const fraction = (ns % 1_000_000_000n).toString().padStart(9, '0');
  return `${new Date(Number(seconds) * 1000).toISOString().slice(0, 19)}.${fraction}Z`;
}

/**
 * The id digits at and above which every event older than `ns` sorts (and no event at or after
 * it); undefined when no event can be older (`ns` at or before the epoch). The event store makes
 * its key bounds by time from it (event-store.ts timeBoundKey).
 */
export function olderThanIdBound(ns: bigint): string | undefined {
  const c = clamp(ns);
  // Events older than `c` have digits > MAX - c, i.e. >= MAX - c + 1. At c = 0 nothing is older.
  if (c === 0n) return undefined;
  return (MAX_EVENT_NS - c + 1n).toString().padStart(TIME_DIGITS, '0');
}
