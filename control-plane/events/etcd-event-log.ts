// The event log over etcd: one immutable key per event (event-log-store.ts; event-id.ts tells
// why ids sort newest first). Any control plane records (API events happen where the request
// lands); the random id suffix keeps them from colliding. Recording is honoured only while
// the `event-log` feature flag is enabled (absent flag = enabled), read at most every
// `flagCacheMs`. record() never throws: a lost event must not fail the caller.
import type { Logger } from '../../lib/logger.js';
import { isCatalogued } from './event-catalogue.js';
import { newEventId, nowNs } from './event-id.js';
import type { EventLogStore, PreparedEvent } from './event-log-store.js';
import type { EventRecorder } from './event-recorder.js';
import { toEventWire, type RecordableEvent } from './event-wire.js';

export const EVENT_LOG_FLAG = 'event-log';
const DEFAULT_FLAG_CACHE_MS = 2000;

/** What a writer that commits an event together with its own state needs (membership-events). */
export interface EventPreparer {
  /** The event, ready to append in the caller's transaction; null while the event log is disabled. Throws on etcd failure. */
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
    private readonly store: EventLogStore,
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
      await this.store.append(prepared);
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
    return this.store.prepare(id, wire);
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
    const enabled = await this.store.isFlagOn(EVENT_LOG_FLAG, this.logger);
    this.flag = { enabled, readAt: Date.now() };
    return enabled;
  }
}
