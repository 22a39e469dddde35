// Where control-plane instances are in etcd (docs/etcd-keys.md): each registers its record under
// its lease (/strata/control-planes/<instanceId>), so clients and tests can see who serves the API
// and, with the leader key, which one is the active cluster manager.
import type { Etcd3, Lease } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord, unconditionalTxn } from '../../lib/etcd/client.js';
import type { ControlPlaneRecord, LeaderRecord } from '../../lib/records.js';

export interface ControlPlaneView extends ControlPlaneRecord {
  readonly isActiveClusterManager: boolean;
}

export class ControlPlaneStore {
  constructor(private readonly etcd: Etcd3, private readonly self: ControlPlaneRecord) {}

  async register(lease: Lease): Promise<void> {
    await lease.put(keys.controlPlane(this.self.instanceId)).value(JSON.stringify(this.self));
  }

  /** One instance's record; null when it is not (or no longer) registered. */
  async get(instanceId: string): Promise<ControlPlaneRecord | null> {
    const key = keys.controlPlane(instanceId);
    return parseRecord<ControlPlaneRecord>(key, await this.etcd.get(key).buffer());
  }

  async list(): Promise<ControlPlaneView[]> {
    const result = await unconditionalTxn(this.etcd)
      .then(this.etcd.getAll().prefix(keys.controlPlanesPrefix()), this.etcd.get(keys.leader()))
      .commit();
    const [instances, leader] = result.responses.map((r) => r.response_range);
    const leaderRecord = leader?.kvs[0] ? parseRecord<LeaderRecord>(keys.leader(), leader.kvs[0].value) : null;
    return (instances?.kvs ?? [])
      .map((kv) => parseRecord<ControlPlaneRecord>(kv.key.toString(), kv.value))
      .filter((r): r is ControlPlaneRecord => r !== null)
      .map((r) => ({ ...r, isActiveClusterManager: r.instanceId === leaderRecord?.instanceId }))
      .sort((a, b) => a.instanceId.localeCompare(b.instanceId));
  }
}
