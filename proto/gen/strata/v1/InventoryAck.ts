// Original file: proto/strata.proto

import type { Long } from '@grpc/proto-loader';

export interface InventoryAck {
  'sequence'?: (number | string | Long);
}

export interface InventoryAck__Output {
  'sequence': (string);
}
