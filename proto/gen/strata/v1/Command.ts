// Original file: proto/strata.proto

import type { SetLed as _strata_v1_SetLed, SetLed__Output as _strata_v1_SetLed__Output } from '../../strata/v1/SetLed.js';
import type { CollectBundle as _strata_v1_CollectBundle, CollectBundle__Output as _strata_v1_CollectBundle__Output } from '../../strata/v1/CollectBundle.js';

export interface Command {
  'command_id'?: (string);
  'set_led'?: (_strata_v1_SetLed | null);
  'collect_bundle'?: (_strata_v1_CollectBundle | null);
  'action'?: "set_led"|"collect_bundle";
}

export interface Command__Output {
  'command_id': (string);
  'set_led'?: (_strata_v1_SetLed__Output | null);
  'collect_bundle'?: (_strata_v1_CollectBundle__Output | null);
  'action'?: "set_led"|"collect_bundle";
}
