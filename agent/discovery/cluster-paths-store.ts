// The etcd keys that say which node serves which volume, as the discovery controller reads them
// (docs/discovery.md): the cluster record, the TLS switch, servers, nodes, presence, assignments
// and volume status, read from the agent's watched state (agent/agent-state-store.ts: one read at
// one revision, then one watch from the next, reloaded after a watch failure) as records.
import { keys } from '../../lib/etcd/keys.js';
import { requireMirrored } from '../../lib/etcd/mirror-follower.js';
import type { PrefixMirror } from '../../lib/etcd/prefix-mirror.js';
import type { ClusterRecord, NodeRecord, PresenceRecord, ServerRecord, VolumeStatusRecord } from '../../lib/records.js';

const PREFIXES = {
  cluster: keys.cluster(),
  tls: keys.nvmeTcpTlsSwitch(),
  servers: keys.serversPrefix(),
  nodes: keys.nodesPrefix(),
  presence: keys.presencePrefix(),
  assignments: keys.assignmentsPrefix(),
  status: keys.volumeStatusPrefix(),
} as const;

/**
 * The records as last read. Records are as stored (another version may write more or fewer
 * fields, or null): the reader checks what it uses.
 */
export class ClusterPathsStore {
  private readonly unsubscribes: (() => void)[] = [];

  /** `mirror`: the agent's watched state, which the agent's root stops. */
  constructor(private readonly mirror: PrefixMirror) {
    requireMirrored(mirror, Object.values(PREFIXES), 'the cluster paths store');
  }

  /** Called after every batch of changes (and after a reload). */
  onChange(listener: () => void): void {
    this.unsubscribes.push(this.mirror.onChange(() => listener()));
  }

  /** Resolves once the state is loaded (rejects while etcd does not answer; the caller retries). */
  start(): Promise<void> {
    return this.mirror.start();
  }

  /** No more calls of the listeners. */
  async stop(): Promise<void> {
    for (const unsubscribe of this.unsubscribes.splice(0)) unsubscribe();
  }

  cluster(): ClusterRecord | undefined {
    return this.mirror.get<ClusterRecord>(PREFIXES.cluster, PREFIXES.cluster)?.record ?? undefined;
  }

  /** Whether the NVMe/TCP TLS switch is on. */
  tlsRequired(): boolean {
    return this.mirror.get<{ enabled?: boolean }>(PREFIXES.tls, PREFIXES.tls)?.record?.enabled === true;
  }

  servers(): (ServerRecord | null)[] {
    return this.records<ServerRecord>(PREFIXES.servers);
  }

  nodes(): (NodeRecord | null)[] {
    return this.records<NodeRecord>(PREFIXES.nodes);
  }

  presence(): (PresenceRecord | null)[] {
    return this.records<PresenceRecord>(PREFIXES.presence);
  }

  /** Every assignment of every node, unchecked. */
  assignments(): unknown[] {
    return this.records<unknown>(PREFIXES.assignments);
  }

  /** The status `nodeUUID` last reported for `volumeUUID` (as the control plane wrote it back). */
  status(volumeUUID: string, nodeUUID: string): VolumeStatusRecord | undefined {
    return this.mirror.get<VolumeStatusRecord>(PREFIXES.status, keys.volumeStatus(volumeUUID, nodeUUID))?.record;
  }

  private records<T>(prefix: string): (T | null)[] {
    return [...this.mirror.all<T | null>(prefix).values()].map((r) => r.record);
  }
}
