// Original file: proto/strata.proto

import type { BundleEntry as _strata_v1_BundleEntry, BundleEntry__Output as _strata_v1_BundleEntry__Output } from '../../strata/v1/BundleEntry.js';
import type { BundleEnd as _strata_v1_BundleEnd, BundleEnd__Output as _strata_v1_BundleEnd__Output } from '../../strata/v1/BundleEnd.js';

export interface BundleChunk {
  'bundle_id'?: (string);
  'entry'?: (_strata_v1_BundleEntry | null);
  'data'?: (Buffer | Uint8Array | string);
  'end'?: (_strata_v1_BundleEnd | null);
  'part'?: "entry"|"data"|"end";
}

export interface BundleChunk__Output {
  'bundle_id': (string);
  'entry'?: (_strata_v1_BundleEntry__Output | null);
  'data'?: (Buffer);
  'end'?: (_strata_v1_BundleEnd__Output | null);
  'part'?: "entry"|"data"|"end";
}
