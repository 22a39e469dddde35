// Original file: proto/strata.proto


export interface ConnectedHost {
  'host_nqn'?: (string);
  'address'?: (string);
}

export interface ConnectedHost__Output {
  'host_nqn': (string);
  'address': (string);
}
