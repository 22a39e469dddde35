// Original file: proto/strata.proto

import type { Long } from '@grpc/proto-loader';

export interface ServerFacts {
  'hostname'?: (string);
  'product_version'?: (string);
  'tpm2_supported'?: (boolean);
  'cpu_cores'?: (number);
  'memory_bytes'?: (number | string | Long);
  'os'?: (string);
  'kernel'?: (string);
}

export interface ServerFacts__Output {
  'hostname': (string);
  'product_version': (string);
  'tpm2_supported': (boolean);
  'cpu_cores': (number);
  'memory_bytes': (string);
  'os': (string);
  'kernel': (string);
}
