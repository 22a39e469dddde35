// Original file: proto/strata.proto


export interface ReplicaLegStatus {
  'node_uuid'?: (string);
  'state'?: (string);
  'sync_percent'?: (number);
}

export interface ReplicaLegStatus__Output {
  'node_uuid': (string);
  'state': (string);
  'sync_percent': (number);
}
