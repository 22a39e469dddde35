// Original file: proto/strata.proto

import type { PoolDeviceState as _strata_v1_PoolDeviceState, PoolDeviceState__Output as _strata_v1_PoolDeviceState__Output } from '../../strata/v1/PoolDeviceState.js';
import type { Long } from '@grpc/proto-loader';

export interface PoolDevice {
  'serial'?: (string);
  'role'?: (string);
  'state'?: (_strata_v1_PoolDeviceState);
  'size_bytes'?: (number | string | Long);
  'error'?: (string);
}

export interface PoolDevice__Output {
  'serial': (string);
  'role': (string);
  'state': (_strata_v1_PoolDeviceState__Output);
  'size_bytes': (string);
  'error': (string);
}
