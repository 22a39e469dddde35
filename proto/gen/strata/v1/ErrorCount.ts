// Original file: proto/strata.proto

import type { Long } from '@grpc/proto-loader';

export interface ErrorCount {
  'count'?: (number | string | Long);
}

export interface ErrorCount__Output {
  'count': (string);
}
