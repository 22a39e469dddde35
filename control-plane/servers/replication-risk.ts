// Which servers a replicated volume's protection hangs on (spec 2.16 RiskOfServiceLossState;
// docs/replication.md "What the API says"): read from the watch cache (volumes, replica sets,
// presence, nodes), current as of the request's sync().
import type { WatchCache } from '../watch-cache/watch-cache.js';

export interface ReplicationRisk {
  /** Servers holding the only live in-sync copy of a replicated volume: losing one loses service. */
  readonly lastCopy: ReadonlySet<string>;
  /** Servers that are down and hold a copy of a replicated volume left with at most one live in-sync copy. */
  readonly source: ReadonlySet<string>;
}

export interface ReplicationRiskSource {
  risk(): Promise<ReplicationRisk>;
}

export class WatchedReplicationRisk implements ReplicationRiskSource {
  constructor(private readonly cache: WatchCache) {}

  async risk(): Promise<ReplicationRisk> {
    const present = new Set(this.cache.presence().flatMap((p) => p.nodeUUIDs ?? []));
    const serverOf = new Map(this.cache.nodes().map((n) => [n.UUID, n.serverUUID]));
    const lastCopy = new Set<string>();
    const source = new Set<string>();
    for (const { record: volume } of this.cache.volumesInOrder()) {
      if (volume.replicaCount < 2 || !volume.placement || volume.state === 'Deleting' || volume.state === 'Creating') continue;
      const set = this.cache.replicaSet(volume.UUID);
      if (!set) continue;
      const live = set.inSync.filter((n) => present.has(n));
      if (live.length > 1) continue;
      for (const n of live) {
        const server = serverOf.get(n);
        if (server) lastCopy.add(server);
      }
      for (const n of volume.placement.nodeList) {
        const server = serverOf.get(n);
        if (server && !present.has(n)) source.add(server);
      }
    }
    return { lastCopy, source };
  }
}
