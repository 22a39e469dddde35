// Original file: proto/strata.proto

import type { Long } from '@grpc/proto-loader';

export interface BundleEntry {
  'path'?: (string);
  'size'?: (number | string | Long);
  'mode'?: (number);
  'mtime_seconds'?: (number | string | Long);
}

export interface BundleEntry__Output {
  'path': (string);
  'size': (string);
  'mode': (number);
  'mtime_seconds': (string);
}
