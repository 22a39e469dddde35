// What each node of a placed volume must serve (VolumeAssignment), derived from the volume and
// its snapshots. Pure: the controller compares this with what is stored and writes the
// difference.
import { volumeSubsystemNQN } from '../../lib/contract/nqn.js';
import type { QosLimits } from '../../lib/contract/qos.js';
import type { AssignmentReplication, NodeRecord, ReplicaSetRecord, SnapshotRecord, VolumeAssignment, VolumePlacement, VolumeRecord } from '../../lib/records.js';
import { replicationOf } from '../../lib/replication.js';

/** Each node exporting a volume gets its own controller-ID window (multipath needs them disjoint). */
export const CNTLID_WINDOW = 1000;
/** Windows 0-64: nvmet's controller IDs end at 0xFFEF (65519). */
const CNTLID_WINDOWS = Math.floor(0xffef / CNTLID_WINDOW);

/** The controller-ID window of each nodeList position (VolumePlacement.cntlidWindows). */
export function cntlidWindowsOf(placement: VolumePlacement): number[] {
  return placement.nodeList.map((_, i) => placement.cntlidWindows?.[i] ?? i);
}

/**
 * The placement with `nodeList` in place of the old one (a copy moved to another node: same
 * length, a node per position). A position whose node changed gets a window none of the volume's
 * nodes had, the lost one's included: a host keeps the lost node's controller while it tries to
 * reconnect, and the Linux host refuses a new controller whose ID another controller of the
 * subsystem holds ("Duplicate cntlid"), so a new node in the old window could never be connected
 * (seen in the replication e2e: EINVAL from nvme connect). New windows count up; after the last
 * they wrap to the lowest one no current or replaced position uses.
 */
export function placementWithNodes(placement: VolumePlacement, nodeList: readonly string[]): VolumePlacement {
  const before = cntlidWindowsOf(placement);
  const taken = new Set(before);
  const windows = nodeList.map((node, i) => (placement.nodeList[i] === node ? before[i]! : -1));
  for (const [i, window] of windows.entries()) {
    if (window >= 0) continue;
    let fresh = Math.max(...taken) + 1;
    if (fresh >= CNTLID_WINDOWS) fresh = [...Array(CNTLID_WINDOWS).keys()].find((w) => !taken.has(w)) ?? 0;
    windows[i] = fresh;
    taken.add(fresh);
  }
  return { ...placement, nodeList: [...nodeList], cntlidWindows: windows };
}

export function assignmentFor(
  volume: VolumeRecord,
  nodeUUID: string,
  clusterSubsystemNQN: string,
  snapshotsOfVolume: readonly SnapshotRecord[],
  replication: AssignmentReplication | null = null,
  qos: QosLimits | null = null,
): VolumeAssignment {
  const placement = volume.placement!;
  const window = cntlidWindowsOf(placement)[placement.nodeList.indexOf(nodeUUID)] ?? 0;
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
    cntlidMin: window * CNTLID_WINDOW + 1,
    cntlidMax: (window + 1) * CNTLID_WINDOW,
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
