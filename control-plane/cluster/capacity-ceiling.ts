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

  async largestVolumeBytes(replicaCount: number): Promise<bigint> {
    const [pools, devices] = await Promise.all([
      this.etcd.getAll().prefix(keys.nodePoolsPrefix()).strings(),
      this.etcd.getAll().prefix(keys.devicesPrefix()).strings(),
    ]);
    const capacities = this.cache.nodes().map((node) => {
      const pool = pools[keys.nodePool(node.UUID)];
      if (pool !== undefined) return BigInt((JSON.parse(pool) as NodePoolRecord).capacityBytes);
      return node.managedDeviceSerials.reduce((sum, serial) => {
        const raw = devices[keys.device(serial)];
        const device = raw === undefined ? undefined : (JSON.parse(raw) as DeviceRecord);
        return device?.present ? sum + BigInt(device.sizeBytes) : sum;
      }, 0n);
    });
    capacities.sort((a, b) => (b > a ? 1 : b < a ? -1 : 0));
    return allowedAllocation(capacities[replicaCount - 1] ?? 0n, this.overcommitRatio);
  }
}
