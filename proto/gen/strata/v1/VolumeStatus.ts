// Original file: proto/strata.proto

import type { VolumeServeState as _strata_v1_VolumeServeState, VolumeServeState__Output as _strata_v1_VolumeServeState__Output } from '../../strata/v1/VolumeServeState.js';
import type { SnapshotStatus as _strata_v1_SnapshotStatus, SnapshotStatus__Output as _strata_v1_SnapshotStatus__Output } from '../../strata/v1/SnapshotStatus.js';
import type { ConnectedHost as _strata_v1_ConnectedHost, ConnectedHost__Output as _strata_v1_ConnectedHost__Output } from '../../strata/v1/ConnectedHost.js';
import type { ReplicaLegStatus as _strata_v1_ReplicaLegStatus, ReplicaLegStatus__Output as _strata_v1_ReplicaLegStatus__Output } from '../../strata/v1/ReplicaLegStatus.js';
import type { QosStatus as _strata_v1_QosStatus, QosStatus__Output as _strata_v1_QosStatus__Output } from '../../strata/v1/QosStatus.js';
import type { Long } from '@grpc/proto-loader';

export interface VolumeStatus {
  'volume_uuid'?: (string);
  'node_uuid'?: (string);
  'generation'?: (number | string | Long);
  'state'?: (_strata_v1_VolumeServeState);
  'error'?: (string);
  'snapshots'?: (_strata_v1_SnapshotStatus)[];
  'connected_hosts'?: (_strata_v1_ConnectedHost)[];
  'logical_used_bytes'?: (number | string | Long);
  'physical_used_bytes'?: (number | string | Long);
  'replica_legs'?: (_strata_v1_ReplicaLegStatus)[];
  'user_written_bytes'?: (number | string | Long);
  'user_written_device'?: (string);
  'qos'?: (_strata_v1_QosStatus | null);
}

export interface VolumeStatus__Output {
  'volume_uuid': (string);
  'node_uuid': (string);
  'generation': (string);
  'state': (_strata_v1_VolumeServeState__Output);
  'error': (string);
  'snapshots': (_strata_v1_SnapshotStatus__Output)[];
  'connected_hosts': (_strata_v1_ConnectedHost__Output)[];
  'logical_used_bytes': (string);
  'physical_used_bytes': (string);
  'replica_legs': (_strata_v1_ReplicaLegStatus__Output)[];
  'user_written_bytes': (string);
  'user_written_device': (string);
  'qos': (_strata_v1_QosStatus__Output | null);
}
