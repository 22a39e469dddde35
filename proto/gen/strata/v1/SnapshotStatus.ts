// Original file: proto/strata.proto


export interface SnapshotStatus {
  'snapshot_uuid'?: (string);
  'available'?: (boolean);
  'error'?: (string);
}

export interface SnapshotStatus__Output {
  'snapshot_uuid': (string);
  'available': (boolean);
  'error': (string);
}
