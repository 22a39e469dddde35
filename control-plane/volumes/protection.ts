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
 * rebuildProgress (spec: percent as a string). A replicated volume: 100 when the replica set holds
 * every copy of its nodeList; otherwise the slowest resync the primary reports for a copy out of
 * sync, 0 while one waits to start (the set decides what is out of sync, the report only how far
 * a resync got: a report older than the set never shows 100 for a lost copy); 0 while the volume
 * is not available. One copy: 100 when served.
 */
export function rebuildProgressOf(
  protection: ProtectionState,
  volume: VolumeRecord,
  replicaSet: ReplicaSetRecord | undefined,
  primaryLegs: readonly ReplicaLegState[] | undefined,
): string {
  if (!replicaSet) return protection === 'FullyProtected' ? '100' : '0';
  // Nothing is being rebuilt while nothing is served (no primary copies to the others).
  if (protection === 'NotAvailable' || protection === 'Unknown') return '0';
  const outOfSync = (volume.placement?.nodeList ?? []).filter((n) => !replicaSet.inSync.includes(n));
  if (outOfSync.length === 0) return '100';
  const percents = outOfSync.map((n) => {
    const leg = primaryLegs?.find((l) => l.nodeUUID === n);
    return leg?.state === 'Resyncing' ? leg.syncPercent : 0;
  });
  return String(Math.min(...percents));
}
