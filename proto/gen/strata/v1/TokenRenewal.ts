// Original file: proto/strata.proto


export interface TokenRenewal {
  'token'?: (string);
}

export interface TokenRenewal__Output {
  'token': (string);
}
