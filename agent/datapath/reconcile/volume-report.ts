// The data path's report to the control plane: one VolumeStatus per volume this agent's nodes
// hold, after every pass. The control-plane session sends the latest report that no control
// plane acknowledged yet, like the inventory.
import type { VolumeStatusRecord } from '../../../lib/records.js';
import type { VolumeReport } from '../../../proto/gen/strata/v1/VolumeReport.js';
import type { VolumeServeState } from '../../../proto/gen/strata/v1/VolumeServeState.js';

/**
 * A volume's status as the agent reports it. The control plane keeps `userWritten` across device
 * restarts; the agent reports what its primary's device counts now (userWrittenBytes, a decimal
 * string) and which device instance counted it, both absent when this node measured none.
 */
export type VolumeStatusEntry = Omit<VolumeStatusRecord, 'reportedAt' | 'userWritten'> & { userWrittenBytes?: string; userWrittenDevice?: string };

export interface VolumeReportSnapshot {
  /** Grows per agent process whenever the content changes. */
  readonly sequence: number;
  /** Lists every volume the agent's nodes hold: any other volume is absent on them. */
  readonly complete: boolean;
  readonly volumes: readonly VolumeStatusEntry[];
  readonly takenAt: string;
}

export interface VolumeReportSource {
  current(): VolumeReportSnapshot | undefined;
  onChange(listener: (report: VolumeReportSnapshot) => void): () => void;
  /** A control plane persisted the report with this sequence. */
  acknowledged(sequence: number): void;
}

const serveState: Record<VolumeStatusEntry['state'], VolumeServeState> = {
  Served: 'VOLUME_SERVED',
  Failed: 'VOLUME_FAILED',
  Absent: 'VOLUME_ABSENT',
};

export function toVolumeReportMessage(report: VolumeReportSnapshot): VolumeReport {
  return {
    sequence: String(report.sequence),
    complete: report.complete,
    volumes: report.volumes.map((v) => ({
      volume_uuid: v.volumeUUID,
      node_uuid: v.nodeUUID,
      generation: String(v.generation),
      state: serveState[v.state],
      error: v.error,
      snapshots: v.snapshots.map((s) => ({ snapshot_uuid: s.snapshotUUID, available: s.state === 'Available', error: s.error })),
      connected_hosts: v.connectedHosts.map((h) => ({ host_nqn: h.hostNQN, address: h.address, host_nqn_source: h.hostNQNSource ?? '' })),
      logical_used_bytes: v.logicalUsedBytes,
      physical_used_bytes: v.physicalUsedBytes,
      ...(v.replicaLegs ? { replica_legs: v.replicaLegs.map((l) => ({ node_uuid: l.nodeUUID, state: l.state, sync_percent: l.syncPercent })) } : {}),
      ...(v.userWrittenDevice && v.userWrittenBytes ? { user_written_bytes: v.userWrittenBytes, user_written_device: v.userWrittenDevice } : {}),
      ...(v.qos
        ? {
            qos: {
              state: v.qos.state,
              reason: v.qos.reason,
              read_iops: String(v.qos.limits.readIops),
              write_iops: String(v.qos.limits.writeIops),
              read_bytes_per_second: String(v.qos.limits.readBytesPerSecond),
              write_bytes_per_second: String(v.qos.limits.writeBytesPerSecond),
            },
          }
        : {}),
    })),
  };
}
