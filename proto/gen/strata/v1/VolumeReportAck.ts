// Original file: proto/strata.proto

import type { Long } from '@grpc/proto-loader';

export interface VolumeReportAck {
  'sequence'?: (number | string | Long);
}

export interface VolumeReportAck__Output {
  'sequence': (string);
}
