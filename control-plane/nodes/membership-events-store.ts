// What the membership events controller (membership-events.ts) last reported, in etcd:
// /strata/membership-events/{nodes,servers,devices}/<id>, each written in the same transaction as
// the event that reported it (fenced by the leader's term when the composition root gives the
// fenced commit); and the changes of the records those events derive from (presence, nodes,
// servers, devices), as the process's watched state (WatchCache.state) sees them.
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import { commitUnguarded, type Committer, type Write } from '../../lib/etcd/transaction.js';
import type { PreparedEvent } from '../events/event-log-store.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';

/** The keys of what the controller last reported (lib/etcd/keys.ts). */
export const membershipKeys = {
  prefix: keys.membershipEventsPrefix,
  node: keys.membershipEventNode,
  server: keys.membershipEventServer,
  device: keys.membershipEventDevice,
};

/** /strata/membership-events/nodes/<nodeUUID> */
export interface ReportedNodeState {
  nodeUUID: string;
  state: 'Active' | 'Inactive';
  /** The event that reported it; '' when none was recorded (event log disabled, or first seen Inactive). */
  eventID: string;
  at: string;
}

/** /strata/membership-events/servers/<serverUUID> */
export interface ReportedServer {
  serverUUID: string;
  eventID: string;
  at: string;
}

/** /strata/membership-events/devices/<serial> */
export interface ReportedDevice {
  serial: string;
  present: boolean;
  eventID: string;
  at: string;
}

/** Everything last reported, by node UUID, server UUID and device serial. */
export interface Reported {
  readonly nodes: Map<string, ReportedNodeState>;
  readonly servers: Map<string, ReportedServer>;
  readonly devices: Map<string, ReportedDevice>;
}

/** One reported state to write (null: forget it), with the event that reports it, if any. */
export type ReportedWrite = (
  | { readonly kind: 'node'; readonly id: string; readonly reported: ReportedNodeState | null }
  | { readonly kind: 'server'; readonly id: string; readonly reported: ReportedServer | null }
  | { readonly kind: 'device'; readonly id: string; readonly reported: ReportedDevice | null }
) & { readonly event: PreparedEvent | null };

export interface MembershipWatch {
  cancel(): Promise<void>;
}

/** The prefixes node, server and device events derive from (the watched state holds them). */
const DERIVED_FROM = [keys.presencePrefix(), keys.nodesPrefix(), keys.serversPrefix(), keys.devicesPrefix()];

export class MembershipEventsStore {
  private readonly kv: Kv;

  /** `cache`: the process's watched state, started. Without `fencedCommit` (LeaderElection.fencedCommit), writes are plain transactions (tests). */
  constructor(
    client: KvClient,
    private readonly cache: WatchCache,
    private readonly fencedCommit?: Committer,
  ) {
    this.kv = kvOf(client);
  }

  async loadReported(): Promise<Reported> {
    const reported: Reported = { nodes: new Map(), servers: new Map(), devices: new Map() };
    for (const { key, value } of await this.kv.range(membershipKeys.prefix())) {
      const record = parseRecord<Record<string, unknown>>(key, value);
      if (!record) continue;
      if (key.startsWith(membershipKeys.node(''))) reported.nodes.set(String(record['nodeUUID']), record as unknown as ReportedNodeState);
      else if (key.startsWith(membershipKeys.server(''))) reported.servers.set(String(record['serverUUID']), record as unknown as ReportedServer);
      else if (key.startsWith(membershipKeys.device(''))) reported.devices.set(String(record['serial']), record as unknown as ReportedDevice);
    }
    return reported;
  }

  /**
   * `changed` on every change of what node, server and device events derive from (presence,
   * nodes, servers, devices) from now on, and whenever the state was read again (anything may
   * have changed). A reader that subscribes BEFORE it reads those records misses no change.
   */
  watch(changed: () => void): MembershipWatch {
    const unsubscribe = this.cache.state.onChange((changes, reloaded) => {
      if (reloaded || changes.some((c) => DERIVED_FROM.includes(c.prefix))) changed();
    });
    return { cancel: async () => void unsubscribe() };
  }

  /** Writes the states with their events in one (fenced) transaction. */
  async commit(writes: readonly ReportedWrite[]): Promise<void> {
    const all: Write[] = [];
    for (const { kind, id, reported, event } of writes) {
      if (event) all.push(...event.writes);
      const key = membershipKeys[kind](id);
      all.push(reported ? { put: key, value: reported } : { delete: key });
    }
    await commitUnguarded(this.kv, all, this.fencedCommit);
  }
}
