// Original file: proto/strata.proto

import type { LedPattern as _strata_v1_LedPattern, LedPattern__Output as _strata_v1_LedPattern__Output } from '../../strata/v1/LedPattern.js';
import type { Long } from '@grpc/proto-loader';

export interface NvmeDevice {
  'serial'?: (string);
  'model'?: (string);
  'size_bytes'?: (number | string | Long);
  'numa_node'?: (number);
  'firmware'?: (string);
  'pci_address'?: (string);
  'controller'?: (string);
  'holds_os'?: (boolean);
  'led'?: (_strata_v1_LedPattern);
}

export interface NvmeDevice__Output {
  'serial': (string);
  'model': (string);
  'size_bytes': (string);
  'numa_node': (number);
  'firmware': (string);
  'pci_address': (string);
  'controller': (string);
  'holds_os': (boolean);
  'led': (_strata_v1_LedPattern__Output);
}
