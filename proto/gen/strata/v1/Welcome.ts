// Original file: proto/strata.proto


export interface Welcome {
  'control_plane_instance'?: (string);
  'cluster_uuid'?: (string);
}

export interface Welcome__Output {
  'control_plane_instance': (string);
  'cluster_uuid': (string);
}
