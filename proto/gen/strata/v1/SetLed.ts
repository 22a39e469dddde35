// Original file: proto/strata.proto

import type { LedPattern as _strata_v1_LedPattern, LedPattern__Output as _strata_v1_LedPattern__Output } from '../../strata/v1/LedPattern.js';

export interface SetLed {
  'serial'?: (string);
  'pattern'?: (_strata_v1_LedPattern);
}

export interface SetLed__Output {
  'serial': (string);
  'pattern': (_strata_v1_LedPattern__Output);
}
