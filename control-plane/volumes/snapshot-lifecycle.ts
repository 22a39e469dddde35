// What the active cluster manager's controller decides about snapshots from the agents'
// reports (docs/volume-lifecycle.md, docs/snapshots.md). Pure functions: the controller reads
// the records, calls these, and writes the outcome with its fenced transactions.
//
// A snapshot lives where its source volume lives: the controller lists it in the
// `snapshotUUIDs` of the volume's assignment on every node of `placement.nodeList`; each
// node's agent takes it and reports it in `VolumeStatusRecord.snapshots`.
import type { SnapshotRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';

type SnapshotReport = VolumeStatusRecord['snapshots'][number];

/** The reports of one snapshot from one volume's status records, by node. */
function reportsOf(snapshot: Pick<SnapshotRecord, 'UUID' | 'sourceVolumeUUID'>, statusRecords: readonly VolumeStatusRecord[]): Map<string, SnapshotReport> {
  const byNode = new Map<string, SnapshotReport>();
  for (const status of statusRecords) {
    if (status.volumeUUID !== snapshot.sourceVolumeUUID) continue;
    // A node that tore the volume down holds none of its snapshots, whatever its last list says.
    if (status.state === 'Absent') continue;
    const report = (status.snapshots ?? []).find((s) => s.snapshotUUID === snapshot.UUID);
    if (report) byNode.set(status.nodeUUID, report);
  }
  return byNode;
}

/**
 * The state a Creating snapshot moves to, or undefined to keep waiting:
 * - Failed when its source volume is gone or Deleting (the snapshot can no longer be taken),
 *   or when any node of the volume's nodeList reports it Failed;
 * - Available when every node of the nodeList reports it Available;
 * - undefined otherwise (not placed, or some node has not reported it yet).
 * Snapshots in any other state never change here (Available stays Available; Deleting is
 * isSnapshotGone's business). Status records of other volumes are ignored.
 */
export function snapshotStateFromReports(
  snapshot: Pick<SnapshotRecord, 'UUID' | 'sourceVolumeUUID' | 'state'>,
  volume: Pick<VolumeRecord, 'UUID' | 'state' | 'placement'> | null | undefined,
  statusRecords: readonly VolumeStatusRecord[],
): 'Available' | 'Failed' | undefined {
  if (snapshot.state !== 'Creating') return undefined;
  if (!volume || volume.UUID !== snapshot.sourceVolumeUUID || volume.state === 'Deleting') return 'Failed';
  const nodes = volume.placement?.nodeList ?? [];
  if (nodes.length === 0) return undefined;
  const reports = reportsOf(snapshot, statusRecords);
  if (nodes.some((node) => reports.get(node)?.state === 'Failed')) return 'Failed';
  return nodes.every((node) => reports.get(node)?.state === 'Available') ? 'Available' : undefined;
}

/** Why snapshotStateFromReports said Failed: the text for failureReason and the event. */
export function snapshotFailureReason(
  snapshot: Pick<SnapshotRecord, 'UUID' | 'sourceVolumeUUID'>,
  volume: Pick<VolumeRecord, 'UUID' | 'state' | 'placement'> | null | undefined,
  statusRecords: readonly VolumeStatusRecord[],
): string {
  if (!volume || volume.UUID !== snapshot.sourceVolumeUUID) return `source volume ${snapshot.sourceVolumeUUID} no longer exists`;
  if (volume.state === 'Deleting') return `source volume ${snapshot.sourceVolumeUUID} is being deleted`;
  const reports = reportsOf(snapshot, statusRecords);
  const failed = (volume.placement?.nodeList ?? []).flatMap((node) => {
    const report = reports.get(node);
    return report?.state === 'Failed' ? [`node ${node}: ${report.error || 'failed'}`] : [];
  });
  return failed.length > 0 ? failed.join('; ') : '';
}

/**
 * A Deleting snapshot can be forgotten (its record deleted) once no node reports it any more.
 * Pass the status records of nodes that still count: the controller leaves out those of nodes
 * removed from the cluster (a dead node's last report must not keep the snapshot forever).
 * Records of other volumes, and nodes that report the volume Absent, do not hold it.
 */
export function isSnapshotGone(snapshot: Pick<SnapshotRecord, 'UUID' | 'sourceVolumeUUID'>, statusRecords: readonly VolumeStatusRecord[]): boolean {
  return reportsOf(snapshot, statusRecords).size === 0;
}
