// Original file: proto/strata.proto

import type { SetLed as _strata_v1_SetLed, SetLed__Output as _strata_v1_SetLed__Output } from '../../strata/v1/SetLed.js';

export interface Command {
  'command_id'?: (string);
  'set_led'?: (_strata_v1_SetLed | null);
  'action'?: "set_led";
}

export interface Command__Output {
  'command_id': (string);
  'set_led'?: (_strata_v1_SetLed__Output | null);
  'action'?: "set_led";
}
