// Where the event log is appended in etcd (docs/etcd-keys.md, /strata/events/<id>; docs/events.md):
// one immutable key per event, put alone or in the transaction of the change it records, and the
// `event-log` feature flag that turns recording off. event-store.ts reads, counts and trims it.
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import { commitUnguarded, type Write } from '../../lib/etcd/transaction.js';
import type { Logger } from '../../lib/logger.js';
import type { EventWire } from './event-wire.js';

export interface PreparedEvent {
  readonly id: string;
  readonly wire: EventWire;
  /** Committed alone, or in the transaction of the change the event records, they append the event. */
  readonly writes: readonly Write[];
}

export class EventLogStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  /** The event, ready to append. */
  prepare(id: string, wire: EventWire): PreparedEvent {
    return { id, wire, writes: [{ put: keys.event(id), value: wire }] };
  }

  /** Appends it alone. */
  async append(event: PreparedEvent): Promise<void> {
    await commitUnguarded(this.kv, event.writes);
  }

  /** Whether a feature flag is on: absent, or a record that cannot be read (logged), is on. */
  async isFlagOn(name: string, logger: Logger): Promise<boolean> {
    const key = keys.featureFlag(name);
    const raw = (await this.kv.get(key))?.value.toString('utf8');
    if (raw === undefined) return true;
    try {
      return (JSON.parse(raw) as { enabled?: unknown }).enabled !== false;
    } catch {
      logger.warn({ key }, `unreadable ${name} flag record: treating the event log as enabled`);
      return true;
    }
  }
}
