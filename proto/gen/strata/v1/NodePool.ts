// Original file: proto/strata.proto

import type { PoolState as _strata_v1_PoolState, PoolState__Output as _strata_v1_PoolState__Output } from '../../strata/v1/PoolState.js';
import type { PoolDevice as _strata_v1_PoolDevice, PoolDevice__Output as _strata_v1_PoolDevice__Output } from '../../strata/v1/PoolDevice.js';
import type { ErrorCount as _strata_v1_ErrorCount, ErrorCount__Output as _strata_v1_ErrorCount__Output } from '../../strata/v1/ErrorCount.js';
import type { Long } from '@grpc/proto-loader';

export interface NodePool {
  'node_uuid'?: (string);
  'state'?: (_strata_v1_PoolState);
  'error'?: (string);
  'level'?: (string);
  'journal'?: (boolean);
  'raw_bytes'?: (number | string | Long);
  'array_bytes'?: (number | string | Long);
  'capacity_bytes'?: (number | string | Long);
  'free_bytes'?: (number | string | Long);
  'provisioned_bytes'?: (number | string | Long);
  'logical_used_bytes'?: (number | string | Long);
  'physical_used_bytes'?: (number | string | Long);
  'physical_used_including_parity_bytes'?: (number | string | Long);
  'rebuild_progress_percent'?: (number);
  'devices'?: (_strata_v1_PoolDevice)[];
  'measured_at'?: (string);
  'recoverable_integrity_errors'?: (_strata_v1_ErrorCount | null);
  'unrecoverable_integrity_errors'?: (_strata_v1_ErrorCount | null);
}

export interface NodePool__Output {
  'node_uuid': (string);
  'state': (_strata_v1_PoolState__Output);
  'error': (string);
  'level': (string);
  'journal': (boolean);
  'raw_bytes': (string);
  'array_bytes': (string);
  'capacity_bytes': (string);
  'free_bytes': (string);
  'provisioned_bytes': (string);
  'logical_used_bytes': (string);
  'physical_used_bytes': (string);
  'physical_used_including_parity_bytes': (string);
  'rebuild_progress_percent': (number);
  'devices': (_strata_v1_PoolDevice__Output)[];
  'measured_at': (string);
  'recoverable_integrity_errors': (_strata_v1_ErrorCount__Output | null);
  'unrecoverable_integrity_errors': (_strata_v1_ErrorCount__Output | null);
}
