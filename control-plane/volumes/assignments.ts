// What each node of a placed volume must serve (VolumeAssignment), derived from the volume and
// its snapshots. Pure: the controller compares this with what is stored and writes the
// difference.
import { volumeSubsystemNQN } from '../../lib/contract/nqn.js';
import type { QosLimits } from '../../lib/contract/qos.js';
import type { AssignmentReplication, NodeRecord, ReplicaSetRecord, SnapshotRecord, VolumeAssignment, VolumeRecord } from '../../lib/records.js';
import { replicationOf } from '../../lib/replication.js';

/** Each node exporting a volume gets its own controller-ID window (multipath needs them disjoint). */
export const CNTLID_WINDOW = 1000;

export function assignmentFor(
  volume: VolumeRecord,
  nodeUUID: string,
  clusterSubsystemNQN: string,
  snapshotsOfVolume: readonly SnapshotRecord[],
  replication: AssignmentReplication | null = null,
  qos: QosLimits | null = null,
): VolumeAssignment {
  const placement = volume.placement!;
  const index = placement.nodeList.indexOf(nodeUUID);
  // A replicated volume's primary is its replica set's (it moves on failover); otherwise placement's.
  const primary = (replication?.primaryNodeUUID ?? placement.primaryNodeUUID) === nodeUUID;
  return {
    volumeUUID: volume.UUID,
    nodeUUID,
    generation: volume.generation,
    sizeBytes: volume.sizeBytes,
    compression: volume.compression,
    sectorSize: volume.sectorSize,
    acl: [...volume.acl],
    ipAcl: [...volume.ipAcl],
    subsystemNQN: volumeSubsystemNQN(clusterSubsystemNQN, volume.UUID),
    nsid: placement.nsid,
    port: placement.port,
    role: primary ? 'primary' : 'replica',
    anaState: primary ? 'optimized' : 'inaccessible',
    cntlidMin: index * CNTLID_WINDOW + 1,
    cntlidMax: (index + 1) * CNTLID_WINDOW,
    cloneFromSnapshotUUID: volume.sourceSnapshotUUID,
    // Snapshots being taken or kept; a Deleting one is dropped so the node removes it.
    snapshotUUIDs: snapshotsOfVolume.filter((s) => s.state === 'Creating' || s.state === 'Available').map((s) => s.UUID).sort(),
    rollbackSnapshotUUID: volume.state === 'Rollback' ? volume.rollbackSnapshotUUID : '',
    replication,
    // The same limits on every node: whichever is primary (now or after a failover) enforces them.
    qos,
  };
}

/** The replication part of every node's assignment, from the replica set and the nodes' endpoints. */
export function replicationFor(
  volume: VolumeRecord,
  replicaSet: ReplicaSetRecord | undefined,
  clusterSubsystemNQN: string,
  nodeOf: (nodeUUID: string) => NodeRecord | undefined,
): AssignmentReplication | null {
  if (!replicaSet || !volume.placement) return null;
  return replicationOf(
    replicaSet,
    clusterSubsystemNQN,
    volume.placement.nodeList.map((nodeUUID) => ({ nodeUUID, endpoint: nodeOf(nodeUUID)?.replicationEndpoint ?? '' })),
  );
}

/** Equal as an agent reads them: an absent `qos` (written before it existed) is null, no limits. */
export function sameAssignment(a: VolumeAssignment, b: VolumeAssignment): boolean {
  return JSON.stringify({ ...a, qos: a.qos ?? null }) === JSON.stringify({ ...b, qos: b.qos ?? null });
}
