// Original file: proto/strata.proto

import type { ServerFacts as _strata_v1_ServerFacts, ServerFacts__Output as _strata_v1_ServerFacts__Output } from '../../strata/v1/ServerFacts.js';
import type { NvmeDevice as _strata_v1_NvmeDevice, NvmeDevice__Output as _strata_v1_NvmeDevice__Output } from '../../strata/v1/NvmeDevice.js';
import type { Long } from '@grpc/proto-loader';

export interface Inventory {
  'sequence'?: (number | string | Long);
  'facts'?: (_strata_v1_ServerFacts | null);
  'devices'?: (_strata_v1_NvmeDevice)[];
  'journal_device_serial'?: (string);
}

export interface Inventory__Output {
  'sequence': (string);
  'facts': (_strata_v1_ServerFacts__Output | null);
  'devices': (_strata_v1_NvmeDevice__Output)[];
  'journal_device_serial': (string);
}
