// Original file: proto/strata.proto


export interface CommandResult {
  'command_id'?: (string);
  'ok'?: (boolean);
  'error'?: (string);
}

export interface CommandResult__Output {
  'command_id': (string);
  'ok': (boolean);
  'error': (string);
}
