// The storage pools' report to the control plane: one NodePoolStatus per node that has a pool
// (md + btrfs over its data devices), measured on the server. The control-plane session sends
// the latest report no control plane acknowledged yet, like the inventory and volume reports.
import type { NodePool } from '../../../proto/gen/strata/v1/NodePool.js';
import type { PoolDeviceState } from '../../../proto/gen/strata/v1/PoolDeviceState.js';
import type { PoolReport } from '../../../proto/gen/strata/v1/PoolReport.js';
import type { PoolState } from '../../../proto/gen/strata/v1/PoolState.js';
import type { DeviceState, PoolDeviceStatus } from './pool-growth.js';

export type PoolStateName = 'Ready' | 'Growing' | 'Rebuilding' | 'Degraded' | 'Failed';

export interface NodePoolStatus {
  readonly nodeUUID: string;
  readonly state: PoolStateName;
  readonly error: string;
  readonly level: string;
  readonly journal: boolean;
  readonly rawBytes: bigint;
  readonly arrayBytes: bigint;
  readonly capacityBytes: bigint;
  readonly freeBytes: bigint;
  readonly provisionedBytes: bigint;
  readonly logicalUsedBytes: bigint;
  readonly physicalUsedBytes: bigint;
  readonly physicalUsedIncludingParityBytes: bigint;
  readonly rebuildProgressPercent: number;
  readonly devices: readonly PoolDeviceStatus[];
  readonly measuredAt: string;
  /** md's corrected read errors (integrity-errors.ts); absent: not measured. */
  readonly recoverableIntegrityErrors?: bigint;
  /** btrfs' read, corruption and generation errors; absent: not measured. */
  readonly unrecoverableIntegrityErrors?: bigint;
}

export interface PoolReportSnapshot {
  /** Grows per agent process whenever the content (measurement time aside) changes. */
  readonly sequence: number;
  readonly pools: readonly NodePoolStatus[];
}

export interface PoolReportSource {
  current(): PoolReportSnapshot | undefined;
  onChange(listener: (report: PoolReportSnapshot) => void): () => void;
  /** A control plane persisted the report with this sequence. */
  acknowledged(sequence: number): void;
}

const poolState: Record<PoolStateName, PoolState> = {
  Ready: 'POOL_READY',
  Growing: 'POOL_GROWING',
  Rebuilding: 'POOL_REBUILDING',
  Degraded: 'POOL_DEGRADED',
  Failed: 'POOL_FAILED',
};
const deviceState: Record<DeviceState, PoolDeviceState> = {
  Healthy: 'POOL_DEVICE_HEALTHY',
  Adding: 'POOL_DEVICE_ADDING',
  Rebuilding: 'POOL_DEVICE_REBUILDING',
  Failed: 'POOL_DEVICE_FAILED',
};

export function toPoolReportMessage(report: PoolReportSnapshot): PoolReport {
  return { sequence: String(report.sequence), pools: report.pools.map(toNodePoolMessage) };
}

function toNodePoolMessage(pool: NodePoolStatus): NodePool {
  return {
    node_uuid: pool.nodeUUID,
    state: poolState[pool.state],
    error: pool.error,
    level: pool.level,
    journal: pool.journal,
    raw_bytes: String(pool.rawBytes),
    array_bytes: String(pool.arrayBytes),
    capacity_bytes: String(pool.capacityBytes),
    free_bytes: String(pool.freeBytes),
    provisioned_bytes: String(pool.provisionedBytes),
    logical_used_bytes: String(pool.logicalUsedBytes),
    physical_used_bytes: String(pool.physicalUsedBytes),
    physical_used_including_parity_bytes: String(pool.physicalUsedIncludingParityBytes),
    rebuild_progress_percent: pool.rebuildProgressPercent,
    devices: pool.devices.map((d) => ({
      serial: d.serial,
      role: d.role,
      state: deviceState[d.state],
      size_bytes: String(d.sizeBytes),
      error: d.error,
      recoverable_integrity_errors: errorCount(d.recoverableIntegrityErrors),
    })),
    measured_at: pool.measuredAt,
    recoverable_integrity_errors: errorCount(pool.recoverableIntegrityErrors),
    unrecoverable_integrity_errors: errorCount(pool.unrecoverableIntegrityErrors),
  };
}

/** A measured count, or null (not measured) on the wire. */
const errorCount = (count: bigint | undefined) => (count === undefined ? null : { count: String(count) });
