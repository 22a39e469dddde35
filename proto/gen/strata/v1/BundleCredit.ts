// Original file: proto/strata.proto


export interface BundleCredit {
  'bundle_id'?: (string);
  'chunks'?: (number);
}

export interface BundleCredit__Output {
  'bundle_id': (string);
  'chunks': (number);
}
