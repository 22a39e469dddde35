// Turns an agent's VolumeReport into stored VolumeStatusRecords. An agent may report only its
// own nodes (named in its Hello); anything else in the report is refused.
import { errors, StrataError } from '../../lib/errors.js';
import type { HostNqnSource, ReplicaLegState, VolumeQosStatus, VolumeStatusRecord } from '../../lib/records.js';
import type { QosStatus__Output } from '../../proto/gen/strata/v1/QosStatus.js';
import type { VolumeReport__Output } from '../../proto/gen/strata/v1/VolumeReport.js';
import type { VolumeServeState__Output } from '../../proto/gen/strata/v1/VolumeServeState.js';
import type { ReportedVolumeStatus, VolumeStatusStore } from './volume-status-store.js';

const stateOf: Record<VolumeServeState__Output, VolumeStatusRecord['state'] | undefined> = {
  VOLUME_SERVE_STATE_UNSPECIFIED: undefined,
  VOLUME_SERVED: 'Served',
  VOLUME_FAILED: 'Failed',
  VOLUME_ABSENT: 'Absent',
};

export class VolumeReportService {
  constructor(private readonly store: VolumeStatusStore) {}

  async record(agentNodes: readonly string[], report: VolumeReport__Output): Promise<void> {
    const nodes = new Set(agentNodes);
    const now = new Date().toISOString();
    const records: ReportedVolumeStatus[] = [];
    for (const status of report.volumes) {
      if (!nodes.has(status.node_uuid)) {
        throw errors.denied(`volume report names node ${status.node_uuid}, which is not this agent's`);
      }
      const state = stateOf[status.state];
      if (!state) throw new StrataError('INVALID_ARGUMENT', `volume ${status.volume_uuid}: state unspecified`);
      records.push({
        volumeUUID: status.volume_uuid,
        nodeUUID: status.node_uuid,
        generation: Number(status.generation),
        state,
        error: status.error,
        snapshots: status.snapshots.map((s) => ({ snapshotUUID: s.snapshot_uuid, state: s.available ? 'Available' : 'Failed', error: s.error })),
        connectedHosts: status.connected_hosts.map((h) => ({ hostNQN: h.host_nqn, address: h.address, hostNQNSource: h.host_nqn !== '' ? nqnSourceOf(h.host_nqn_source) : '' })),
        logicalUsedBytes: status.logical_used_bytes,
        physicalUsedBytes: status.physical_used_bytes,
        ...(status.replica_legs.length > 0 ? { replicaLegs: status.replica_legs.map(legStateOf) } : {}),
        // A replicated volume's primary: what its device counted (the store keeps the total).
        ...(status.user_written_device !== '' ? { written: { bytes: status.user_written_bytes, device: status.user_written_device } } : {}),
        ...(status.qos ? { qos: qosStatusOf(status.volume_uuid, status.qos) } : {}),
        reportedAt: now,
      });
    }
    await this.store.save(records, report.complete ? nodes : undefined);
  }
}

const LEG_STATES = new Set<ReplicaLegState['state']>(['InSync', 'Resyncing', 'OutOfSync', 'Unreachable']);

function legStateOf(leg: { node_uuid: string; state: string; sync_percent: number }): ReplicaLegState {
  if (!LEG_STATES.has(leg.state as ReplicaLegState['state'])) throw new StrataError('INVALID_ARGUMENT', `replica leg ${leg.node_uuid}: unknown state ${JSON.stringify(leg.state)}`);
  return { nodeUUID: leg.node_uuid, state: leg.state as ReplicaLegState['state'], syncPercent: Math.min(100, Math.max(0, leg.sync_percent)) };
}

/** A primary's word on its volume's QoS policy (records.ts VolumeQosStatus). */
function qosStatusOf(volumeUUID: string, qos: QosStatus__Output): VolumeQosStatus {
  if (qos.state !== 'Enforced' && qos.state !== 'NotEnforced') throw new StrataError('INVALID_ARGUMENT', `volume ${volumeUUID}: unknown QoS state ${JSON.stringify(qos.state)}`);
  const n = (v: string) => Number(v); // uint64 as a decimal string: limits are far below 2^53
  return {
    state: qos.state,
    reason: qos.reason,
    limits: { readIops: n(qos.read_iops), writeIops: n(qos.write_iops), readBytesPerSecond: n(qos.read_bytes_per_second), writeBytesPerSecond: n(qos.write_bytes_per_second) },
  };
}

/** A source this control plane knows; anything else (an agent newer or wrong) is "not said". */
function nqnSourceOf(source: string): HostNqnSource {
  return source === 'acl' || source === 'discovery' ? source : '';
}
