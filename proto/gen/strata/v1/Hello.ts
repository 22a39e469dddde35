// Original file: proto/strata.proto


export interface Hello {
  'server_uuid'?: (string);
  'node_uuids'?: (string)[];
  'agent_version'?: (string);
  'agent_instance'?: (string);
  'cluster_uuid'?: (string);
}

export interface Hello__Output {
  'server_uuid': (string);
  'node_uuids': (string)[];
  'agent_version': (string);
  'agent_instance': (string);
  'cluster_uuid': (string);
}
