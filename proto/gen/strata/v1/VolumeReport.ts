// Original file: proto/strata.proto

import type { VolumeStatus as _strata_v1_VolumeStatus, VolumeStatus__Output as _strata_v1_VolumeStatus__Output } from '../../strata/v1/VolumeStatus.js';
import type { Long } from '@grpc/proto-loader';

export interface VolumeReport {
  'sequence'?: (number | string | Long);
  'volumes'?: (_strata_v1_VolumeStatus)[];
  'complete'?: (boolean);
}

export interface VolumeReport__Output {
  'sequence': (string);
  'volumes': (_strata_v1_VolumeStatus__Output)[];
  'complete': (boolean);
}
