// Turns an agent's PoolReport into stored NodePoolRecords. An agent may report only its own
// nodes (named in its Hello); a report from one agent process that is older than one already
// stored (a late delivery after a failover) is dropped, like an inventory.
import { errors, StrataError } from '../../lib/errors.js';
import type { NodePoolRecord, PoolDeviceState } from '../../lib/records.js';
import type { PoolDeviceState__Output as PoolDeviceStateWire } from '../../proto/gen/strata/v1/PoolDeviceState.js';
import type { PoolReport__Output } from '../../proto/gen/strata/v1/PoolReport.js';
import type { PoolState__Output as PoolState } from '../../proto/gen/strata/v1/PoolState.js';
import type { NodePoolStore, ReportedPool } from './node-pool-store.js';

const poolStateOf: Record<PoolState, NodePoolRecord['state'] | undefined> = {
  POOL_STATE_UNSPECIFIED: undefined,
  POOL_READY: 'Ready',
  POOL_GROWING: 'Growing',
  POOL_REBUILDING: 'Rebuilding',
  POOL_DEGRADED: 'Degraded',
  POOL_FAILED: 'Failed',
};
const deviceStateOf: Record<PoolDeviceStateWire, PoolDeviceState | undefined> = {
  POOL_DEVICE_STATE_UNSPECIFIED: undefined,
  POOL_DEVICE_HEALTHY: 'Healthy',
  POOL_DEVICE_ADDING: 'Adding',
  POOL_DEVICE_REBUILDING: 'Rebuilding',
  POOL_DEVICE_FAILED: 'Failed',
};

export class PoolReportService {
  /** Highest sequence persisted per "serverUUID/agentInstance". */
  private readonly persisted = new Map<string, bigint>();

  constructor(private readonly store: NodePoolStore) {}

  /** Persists the report; returns false when it was stale and ignored. */
  async record(serverUUID: string, agentInstance: string, agentNodes: readonly string[], report: PoolReport__Output): Promise<boolean> {
    const sequence = BigInt(report.sequence || '0');
    const streamKey = `${serverUUID}/${agentInstance}`;
    const last = this.persisted.get(streamKey);
    if (last !== undefined && sequence <= last) return false;
    const nodes = new Set(agentNodes);
    const now = new Date().toISOString();
    const pools: ReportedPool[] = report.pools.map((p) => {
      if (!nodes.has(p.node_uuid)) throw errors.denied(`pool report names node ${p.node_uuid}, which is not this agent's`);
      const state = poolStateOf[p.state];
      if (!state) throw new StrataError('INVALID_ARGUMENT', `pool of node ${p.node_uuid}: state unspecified`);
      return {
        nodeUUID: p.node_uuid,
        serverUUID,
        state,
        error: p.error,
        level: p.level,
        journal: p.journal,
        rawBytes: p.raw_bytes,
        arrayBytes: p.array_bytes,
        capacityBytes: p.capacity_bytes,
        freeBytes: p.free_bytes,
        provisionedBytes: p.provisioned_bytes,
        logicalUsedBytes: p.logical_used_bytes,
        physicalUsedBytes: p.physical_used_bytes,
        physicalUsedIncludingParityBytes: p.physical_used_including_parity_bytes,
        rebuildProgressPercent: Math.min(100, p.rebuild_progress_percent),
        devices: p.devices.map((d) => {
          const deviceState = deviceStateOf[d.state];
          if (!deviceState) throw new StrataError('INVALID_ARGUMENT', `pool of node ${p.node_uuid}: device ${d.serial} state unspecified`);
          return {
            serial: d.serial,
            role: d.role === 'journal' ? 'journal' : 'data',
            state: deviceState,
            sizeBytes: d.size_bytes,
            error: d.error,
            ...(d.recoverable_integrity_errors ? { recoverableIntegrityErrors: d.recoverable_integrity_errors.count } : {}),
          };
        }),
        measuredAt: p.measured_at,
        reportedAt: now,
        // Absent (an agent that does not measure them): not measured, served as documented.
        ...(p.recoverable_integrity_errors ? { recoverableIntegrityErrors: p.recoverable_integrity_errors.count } : {}),
        ...(p.unrecoverable_integrity_errors ? { unrecoverableIntegrityErrors: p.unrecoverable_integrity_errors.count } : {}),
      };
    });
    await this.store.save(agentNodes, pools);
    this.persisted.set(streamKey, sequence);
    return true;
  }
}
