// CapacityCeiling (volume-dependencies.ts): the largest volume the cluster could ever place, from
// the nodes, their pool reports and devices, all from the watch cache. Node capacity is what
// placement counts (volumes/placement.ts): a pool's measured capacity; until a node's
// pool reports, the raw size of its present managed data devices, which the pool never exceeds.
import { allowedAllocation } from '../volumes/placement.js';
import type { CapacityCeiling } from '../volumes/volume-dependencies.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';

export class NodeCapacityCeiling implements CapacityCeiling {
  constructor(private readonly cache: WatchCache, private readonly overcommitRatio: number) {}

  async largestVolumeBytes(replicaCount: number): Promise<bigint | undefined> {
    // The request's sync() made the cache current: no read of etcd here.
    // Per server, its largest node: the copies of a replicated volume go to distinct servers.
    const byServer = new Map<string, bigint>();
    for (const node of this.cache.nodes()) {
      const pool = this.cache.nodePool(node.UUID);
      let capacity: bigint;
      if (pool !== null) capacity = BigInt(pool.capacityBytes);
      else {
        const managed = node.managedDeviceSerials.map((serial) => this.cache.device(serial) ?? undefined);
        // A node whose devices are not reported yet (an agent that just joined) could hold
        // anything: nothing can be ruled out until it reports.
        if (managed.some((raw) => raw === undefined)) return undefined;
        capacity = managed.reduce((sum, device) => (device!.present ? sum + BigInt(device!.sizeBytes) : sum), 0n);
      }
      if (capacity > (byServer.get(node.serverUUID) ?? -1n)) byServer.set(node.serverUUID, capacity);
    }
    const capacities = [...byServer.values()].sort((a, b) => (b > a ? 1 : b < a ? -1 : 0));
    return allowedAllocation(capacities[replicaCount - 1] ?? 0n, this.overcommitRatio);
  }
}
