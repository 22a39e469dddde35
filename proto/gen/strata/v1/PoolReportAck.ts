// Original file: proto/strata.proto

import type { Long } from '@grpc/proto-loader';

export interface PoolReportAck {
  'sequence'?: (number | string | Long);
}

export interface PoolReportAck__Output {
  'sequence': (string);
}
