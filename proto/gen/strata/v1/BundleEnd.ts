// Original file: proto/strata.proto


export interface BundleEnd {
  'error'?: (string);
}

export interface BundleEnd__Output {
  'error': (string);
}
