// Original file: proto/strata.proto

import type { KernelCapabilities as _strata_v1_KernelCapabilities, KernelCapabilities__Output as _strata_v1_KernelCapabilities__Output } from '../../strata/v1/KernelCapabilities.js';
import type { Long } from '@grpc/proto-loader';

export interface ServerFacts {
  'hostname'?: (string);
  'product_version'?: (string);
  'tpm2_supported'?: (boolean);
  'cpu_cores'?: (number);
  'memory_bytes'?: (number | string | Long);
  'os'?: (string);
  'kernel'?: (string);
  'kernel_capabilities'?: (_strata_v1_KernelCapabilities | null);
}

export interface ServerFacts__Output {
  'hostname': (string);
  'product_version': (string);
  'tpm2_supported': (boolean);
  'cpu_cores': (number);
  'memory_bytes': (string);
  'os': (string);
  'kernel': (string);
  'kernel_capabilities': (_strata_v1_KernelCapabilities__Output | null);
}
