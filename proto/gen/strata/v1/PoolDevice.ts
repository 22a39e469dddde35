// Original file: proto/strata.proto

import type { PoolDeviceState as _strata_v1_PoolDeviceState, PoolDeviceState__Output as _strata_v1_PoolDeviceState__Output } from '../../strata/v1/PoolDeviceState.js';
import type { ErrorCount as _strata_v1_ErrorCount, ErrorCount__Output as _strata_v1_ErrorCount__Output } from '../../strata/v1/ErrorCount.js';
import type { Long } from '@grpc/proto-loader';

export interface PoolDevice {
  'serial'?: (string);
  'role'?: (string);
  'state'?: (_strata_v1_PoolDeviceState);
  'size_bytes'?: (number | string | Long);
  'error'?: (string);
  'recoverable_integrity_errors'?: (_strata_v1_ErrorCount | null);
}

export interface PoolDevice__Output {
  'serial': (string);
  'role': (string);
  'state': (_strata_v1_PoolDeviceState__Output);
  'size_bytes': (string);
  'error': (string);
  'recoverable_integrity_errors': (_strata_v1_ErrorCount__Output | null);
}
