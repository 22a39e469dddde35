// The event log's keys in etcd: one immutable key per event, keys.event(id), whose order is
// newest first (event-id.ts says why). What reads and trims the log goes through here: listing
// reads limited ranges of a span of the log, retention counts and deletes from a boundary to the
// old end of the prefix. Writes are the event log's (etcd-event-log.ts: an event is committed in
// its caller's transaction).
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type BoundedRange, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import { prefixEnd } from '../../lib/etcd/transaction.js';
import { olderThanIdBound } from './event-id.js';
import type { EventWire } from './event-wire.js';

/** A place in the log (a key), opaque outside this store: where a range or a trim starts. */
export type EventPosition = string;

/** The events from `start` (inclusive) to `end` (exclusive), newest first. */
export interface EventSpan {
  readonly start: EventPosition;
  readonly end: EventPosition;
}

export interface EventChunk {
  /** The events read, newest first; unreadable ones are skipped. */
  readonly events: EventWire[];
  /** The span holds more events than were read. */
  readonly more: boolean;
  /** What of the span is left after the events read; undefined when nothing is. */
  readonly rest: EventSpan | undefined;
  /** Bytes of the keys and values read (the caller sizes its next read by them). */
  readonly bytes: number;
}

export class EventStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  /**
   * The events at or after `since` and before `until` (epoch ns; either open), and only those
   * older than the event `after` when it is given (a page cursor).
   */
  span(bounds: { readonly since?: bigint; readonly until?: bigint; readonly after?: string }): EventSpan {
    const end = bounds.since !== undefined ? timeBoundKey(bounds.since) : eventsRangeEnd();
    let start = bounds.until !== undefined ? timeBoundKey(bounds.until) : eventsRangeStart();
    if (bounds.after !== undefined) {
      const afterKey = `${keys.event(bounds.after)}\0`;
      if (afterKey > start) start = afterKey;
    }
    return { start, end };
  }

  /** Up to `limit` events of `span`, in key order (newest first). */
  async range(span: EventSpan, limit: number): Promise<EventChunk> {
    const { start, end } = span;
    if (start >= end) return { events: [], more: false, rest: undefined, bytes: 0 };
    let res: BoundedRange;
    for (let n = limit; ; n = Math.ceil(n / 2)) {
      try {
        res = await this.kv.rangeIn({ start, end }, n);
        break;
      } catch (err) {
        // etcd3 spells it GRPCResourceExhastedError: a response over the client's message limit.
        if (n === 1 || !/ResourceExh/i.test((err as Error).constructor.name)) throw err;
      }
    }
    const events: EventWire[] = [];
    let bytes = 0;
    for (const kv of res.kvs) {
      bytes += Buffer.byteLength(kv.key) + kv.value.length;
      try {
        events.push(JSON.parse(kv.value.toString('utf8')) as EventWire);
      } catch {
        // A corrupt event must not make the log unreadable; it is skipped.
      }
    }
    const lastKey = res.kvs.at(-1)?.key;
    return { events, more: res.more, rest: res.more && lastKey !== undefined ? { start: `${lastKey}\0`, end } : undefined, bytes };
  }

  /** How many events the log holds. */
  countAll(): Promise<number> {
    return countRange(this.kv, eventsRangeStart(), eventsRangeEnd());
  }

  /** How many events are older than `ns` (epoch ns). */
  countOlderThan(ns: bigint): Promise<number> {
    return countRange(this.kv, timeBoundKey(ns), eventsRangeEnd());
  }

  /** Where the (k+1)-th event older than `ns` is, in key order (newest first); undefined when there are not that many. */
  async positionOlderThan(ns: bigint, k: number): Promise<EventPosition | undefined> {
    const found = await this.kv.keysIn({ start: timeBoundKey(ns), end: eventsRangeEnd() }, k + 1);
    return found[k];
  }

  /** Deletes the events older than `ns` (epoch ns); how many went. */
  deleteOlderThan(ns: bigint): Promise<number> {
    return this.deleteFrom(timeBoundKey(ns));
  }

  /** Deletes the event at `position` and every older one; how many went. */
  async deleteFrom(position: EventPosition): Promise<number> {
    const end = eventsRangeEnd();
    if (position >= end) return 0;
    return this.kv.deleteIn({ start: position, end });
  }
}

async function countRange(kv: Kv, start: string, end: string): Promise<number> {
  if (start >= end) return 0;
  return kv.countIn({ start, end });
}

/**
 * Event key bounds by time. Keys of events at or after `ns` (newer) sort before `timeBoundKey(ns)`;
 * keys of events before `ns` (older) sort at or after it. So [prefix, bound(since)) holds the
 * events at or after `since`, and [bound(until), end) the events before `until`.
 */
export function timeBoundKey(ns: bigint): string {
  const bound = olderThanIdBound(ns);
  return bound === undefined ? eventsRangeEnd() : `${keys.eventsPrefix()}${bound}`;
}

function eventsRangeStart(): string {
  return keys.eventsPrefix();
}

function eventsRangeEnd(): string {
  return prefixEnd(keys.eventsPrefix()).toString('latin1');
}
