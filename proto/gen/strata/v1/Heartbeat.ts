// Original file: proto/strata.proto


export interface Heartbeat {
  'sent_at'?: (string);
}

export interface Heartbeat__Output {
  'sent_at': (string);
}
