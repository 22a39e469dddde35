// Where the event log is appended in etcd (docs/etcd-keys.md, /strata/events/<id>; docs/events.md):
// one immutable key per event, put alone or in the transaction of the change it records, and the
// `event-log` feature flag that turns recording off. event-store.ts reads, counts and trims it.
import type { Etcd3 } from 'etcd3';
import type { IOperation } from 'etcd3/lib/builder.js';
import { commitOps } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { Logger } from '../../lib/logger.js';
import type { EventWire } from './event-wire.js';

export interface PreparedEvent {
  readonly id: string;
  readonly wire: EventWire;
  /** Commit these (alone, or a store puts them in its own transaction) to append the event. */
  readonly ops: IOperation[];
}

export class EventLogStore {
  constructor(private readonly etcd: Etcd3) {}

  /** The event, ready to append. */
  prepare(id: string, wire: EventWire): PreparedEvent {
    return { id, wire, ops: [this.etcd.put(keys.event(id)).value(JSON.stringify(wire))] };
  }

  /** Appends it alone. */
  async append(event: PreparedEvent): Promise<void> {
    await commitOps(this.etcd, event.ops);
  }

  /** Whether a feature flag is on: absent, or a record that cannot be read (logged), is on. */
  async isFlagOn(name: string, logger: Logger): Promise<boolean> {
    const key = keys.featureFlag(name);
    const raw = await this.etcd.get(key).string();
    if (raw === null) return true;
    try {
      return (JSON.parse(raw) as { enabled?: unknown }).enabled !== false;
    } catch {
      logger.warn({ key }, `unreadable ${name} flag record: treating the event log as enabled`);
      return true;
    }
  }
}
