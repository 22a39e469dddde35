// Original file: proto/strata.proto


export interface BundleCancel {
  'bundle_id'?: (string);
  'reason'?: (string);
}

export interface BundleCancel__Output {
  'bundle_id': (string);
  'reason': (string);
}
