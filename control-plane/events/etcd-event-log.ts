// The event log over etcd: one immutable key per event at keys.event(id) (event-id.ts tells
// why ids sort newest first). Any control plane records (API events happen where the request
// lands); the random id suffix keeps them from colliding. Recording is honoured only while
// the `event-log` feature flag is enabled (absent flag = enabled), read at most every
// `flagCacheMs`. record() never throws: a lost event must not fail the caller.
import type { Etcd3 } from 'etcd3';
import { unconditionalTxn } from '../../lib/etcd/client.js';
import type { IOperation } from 'etcd3/lib/builder.js';
import { keys } from '../../lib/etcd/keys.js';
import type { Logger } from '../../lib/logger.js';
import { isCatalogued } from './event-catalogue.js';
import { newEventId, nowNs } from './event-id.js';
import type { EventRecorder } from './event-recorder.js';
import { toEventWire, type EventWire, type RecordableEvent } from './event-wire.js';

export const EVENT_LOG_FLAG = 'event-log';
const DEFAULT_FLAG_CACHE_MS = 2000;

export interface PreparedEvent {
  readonly id: string;
  readonly wire: EventWire;
  /** Commit these (alone or in a caller's transaction) to append the event. */
  readonly ops: IOperation[];
}

/** What a writer that commits an event together with its own state needs (membership-events). */
export interface EventPreparer {
  /** The ops that append the event; null while the event log is disabled. Throws on etcd failure. */
  prepare(event: RecordableEvent): Promise<PreparedEvent | null>;
}

export interface EtcdEventLogOptions {
  /** How long a read of the event-log flag is trusted; 0 reads it for every event. */
  readonly flagCacheMs?: number;
  /** Epoch nanoseconds of "now" (tests record events in the past). */
  readonly clock?: () => bigint;
}

export class EtcdEventLog implements EventRecorder, EventPreparer {
  private flag: { enabled: boolean; readAt: number } | undefined;
  private flagRead: Promise<boolean> | undefined;
  private readonly warnedNames = new Set<string>();
  private readonly flagCacheMs: number;
  private readonly clock: () => bigint;

  constructor(
    private readonly etcd: Etcd3,
    private readonly logger: Logger,
    options: EtcdEventLogOptions = {},
  ) {
    this.flagCacheMs = options.flagCacheMs ?? DEFAULT_FLAG_CACHE_MS;
    this.clock = options.clock ?? nowNs;
  }

  async record(event: RecordableEvent): Promise<void> {
    try {
      const prepared = await this.prepare(event);
      if (!prepared) return;
      await commitOps(this.etcd, prepared.ops);
    } catch (err) {
      this.logger.warn({ err: (err as Error).message, eventName: event.eventName }, 'event dropped: cannot write the event log');
    }
  }

  async prepare(event: RecordableEvent): Promise<PreparedEvent | null> {
    if (!(await this.isEnabled())) return null;
    if (!isCatalogued(event.eventName) && !this.warnedNames.has(event.eventName)) {
      this.warnedNames.add(event.eventName);
      this.logger.warn({ eventName: event.eventName }, 'event name missing from the event catalogue: recorded with EventCode 0');
    }
    const ns = this.clock();
    const id = newEventId(ns);
    const wire = toEventWire(event, id, ns);
    return { id, wire, ops: [this.etcd.put(keys.event(id)).value(JSON.stringify(wire))] };
  }

  /** The event-log flag: `{name, enabled}` at keys.featureFlag('event-log'); absent = enabled. */
  async isEnabled(): Promise<boolean> {
    const cached = this.flag;
    if (cached && Date.now() - cached.readAt < this.flagCacheMs) return cached.enabled;
    // Concurrent recorders share one read.
    this.flagRead ??= this.readFlag().finally(() => {
      this.flagRead = undefined;
    });
    return this.flagRead;
  }

  private async readFlag(): Promise<boolean> {
    const raw = await this.etcd.get(keys.featureFlag(EVENT_LOG_FLAG)).string();
    let enabled = true;
    if (raw !== null) {
      try {
        enabled = (JSON.parse(raw) as { enabled?: unknown }).enabled !== false;
      } catch {
        this.logger.warn({ key: keys.featureFlag(EVENT_LOG_FLAG) }, 'unreadable event-log flag record: treating the event log as enabled');
      }
    }
    this.flag = { enabled, readAt: Date.now() };
    return enabled;
  }
}

/** Commits ops in one transaction whatever the compare says (etcd needs one to batch ops). */
export async function commitOps(etcd: Etcd3, ops: IOperation[]): Promise<void> {
  await unconditionalTxn(etcd).then(...ops).commit();
}
