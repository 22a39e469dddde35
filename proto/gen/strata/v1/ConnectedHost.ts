// Original file: proto/strata.proto


export interface ConnectedHost {
  'host_nqn'?: (string);
  'address'?: (string);
  'host_nqn_source'?: (string);
}

export interface ConnectedHost__Output {
  'host_nqn': (string);
  'address': (string);
  'host_nqn_source': (string);
}
