// A volume's protection state, from what is true now (docs/replication.md "Honest state"): used by
// the API's volume answers, cluster health and the controller's protection events alike.
import type { ReplicaLegState, ReplicaSetRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';

export type ProtectionState = 'Unknown' | 'FullyProtected' | 'Degraded' | 'ReadOnly' | 'NotAvailable';

export interface ProtectionInputs {
  readonly volume: VolumeRecord;
  /** The replicated volume's replica set (undefined for one copy). */
  readonly replicaSet: ReplicaSetRecord | undefined;
  /** Status reports by node (nodes of the nodeList only). */
  readonly statusOf: ReadonlyMap<string, VolumeStatusRecord>;
  /** Nodes whose agent is alive now. */
  readonly present: ReadonlySet<string>;
}

/**
 * Unknown while Creating or unplaced. A replicated volume: NotAvailable unless its primary is alive
 * and serves (a failover in progress pauses I/O); then FullyProtected when as many in-sync copies
 * live as the volume asks for, else Degraded. One copy: FullyProtected when its node serves it,
 * else NotAvailable. A replicaCount 2-3 volume from before replication (no replica set) holds
 * independent copies of which only the primary's is served: Degraded, never FullyProtected.
 */
export function protectionOf({ volume, replicaSet, statusOf, present }: ProtectionInputs): ProtectionState {
  const nodeList = volume.placement?.nodeList ?? [];
  if (volume.state === 'Creating' || nodeList.length === 0) return 'Unknown';
  const serves = (node: string) => present.has(node) && statusOf.get(node)?.state === 'Served';
  if (replicaSet) {
    if (!serves(replicaSet.primaryNodeUUID) || !replicaSet.inSync.includes(replicaSet.primaryNodeUUID)) return 'NotAvailable';
    // A copy counts while etcd calls it in sync and its node is alive and serves it.
    const live = replicaSet.inSync.filter(serves).length;
    return live >= volume.replicaCount ? 'FullyProtected' : 'Degraded';
  }
  const primary = volume.placement!.primaryNodeUUID;
  if (!serves(primary)) return 'NotAvailable';
  return volume.replicaCount > 1 ? 'Degraded' : 'FullyProtected';
}

/** The primary of a placed volume now: its replica set's, else placement's. */
export function primaryOf(volume: VolumeRecord, replicaSet: ReplicaSetRecord | undefined): string {
  return replicaSet?.primaryNodeUUID ?? volume.placement?.primaryNodeUUID ?? '';
}

/**
 * rebuildProgress (spec: percent as a string): the slowest running resync the primary reports;
 * 100 when every copy is in sync; 0 while a copy waits to be resynchronized. One copy: 100 when
 * served.
 */
export function rebuildProgressOf(protection: ProtectionState, primaryLegs: readonly ReplicaLegState[] | undefined): string {
  if (!primaryLegs || primaryLegs.length === 0) return protection === 'FullyProtected' ? '100' : '0';
  if (primaryLegs.every((l) => l.state === 'InSync')) return '100';
  const resyncing = primaryLegs.filter((l) => l.state === 'Resyncing');
  return resyncing.length > 0 ? String(Math.min(...resyncing.map((l) => l.syncPercent))) : '0';
}
