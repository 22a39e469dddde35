// Original file: proto/strata.proto

import type { Long } from '@grpc/proto-loader';

export interface QosStatus {
  'state'?: (string);
  'reason'?: (string);
  'read_iops'?: (number | string | Long);
  'write_iops'?: (number | string | Long);
  'read_bytes_per_second'?: (number | string | Long);
  'write_bytes_per_second'?: (number | string | Long);
}

export interface QosStatus__Output {
  'state': (string);
  'reason': (string);
  'read_iops': (string);
  'write_iops': (string);
  'read_bytes_per_second': (string);
  'write_bytes_per_second': (string);
}
