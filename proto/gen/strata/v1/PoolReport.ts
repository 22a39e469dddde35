// Original file: proto/strata.proto

import type { NodePool as _strata_v1_NodePool, NodePool__Output as _strata_v1_NodePool__Output } from '../../strata/v1/NodePool.js';
import type { Long } from '@grpc/proto-loader';

export interface PoolReport {
  'sequence'?: (number | string | Long);
  'pools'?: (_strata_v1_NodePool)[];
}

export interface PoolReport__Output {
  'sequence': (string);
  'pools': (_strata_v1_NodePool__Output)[];
}
