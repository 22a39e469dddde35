// CapacityCeiling (volume-dependencies.ts): the largest volume the cluster could ever place, from
// the nodes (watch cache) and one read of their pool reports and devices. Node capacity is what
// placement counts (volume-controller/placement.ts): a pool's measured capacity; until a node's
// pool reports, the raw size of its present managed data devices, which the pool never exceeds.
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { DeviceRecord, NodePoolRecord } from '../../lib/records.js';
import { allowedAllocation } from '../volume-controller/placement.js';
import type { CapacityCeiling } from '../volumes/volume-dependencies.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';

export class NodeCapacityCeiling implements CapacityCeiling {
  constructor(private readonly etcd: Etcd3, private readonly cache: WatchCache, private readonly overcommitRatio: number) {}

  async largestVolumeBytes(replicaCount: number): Promise<bigint | undefined> {
    const [pools, devices] = await Promise.all([
      this.etcd.getAll().prefix(keys.nodePoolsPrefix()).strings(),
      this.etcd.getAll().prefix(keys.devicesPrefix()).strings(),
    ]);
    // Per server, its largest node: the copies of a replicated volume go to distinct servers.
    const byServer = new Map<string, bigint>();
    for (const node of this.cache.nodes()) {
      const pool = pools[keys.nodePool(node.UUID)];
      let capacity: bigint;
      if (pool !== undefined) capacity = BigInt((JSON.parse(pool) as NodePoolRecord).capacityBytes);
      else {
        const managed = node.managedDeviceSerials.map((serial) => devices[keys.device(serial)]);
        // A node whose devices are not reported yet (an agent that just joined) could hold
        // anything: nothing can be ruled out until it reports.
        if (managed.some((raw) => raw === undefined)) return undefined;
        capacity = managed.reduce((sum, raw) => {
          const device = JSON.parse(raw!) as DeviceRecord;
          return device.present ? sum + BigInt(device.sizeBytes) : sum;
        }, 0n);
      }
      if (capacity > (byServer.get(node.serverUUID) ?? -1n)) byServer.set(node.serverUUID, capacity);
    }
    const capacities = [...byServer.values()].sort((a, b) => (b > a ? 1 : b < a ? -1 : 0));
    return allowedAllocation(capacities[replicaCount - 1] ?? 0n, this.overcommitRatio);
  }
}
