// A snapshot as the API returns it (wire-conventions §7): the SnapshotRecord, plus what comes
// from its source volume at read time (where the snapshot lives: nodeList, primaryNodeUUID,
// replicaCount; the volume's current name) and the cluster id. docs/snapshots.md says which
// field comes from where and why.
import { ALLOW_NONE } from '../../lib/contract/acl.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import type { SnapshotRecord, VolumeRecord } from '../../lib/records.js';
import { formatRetention } from './snapshot-schema.js';

export type SnapshotWireState = 'Creating' | 'Available' | 'Deleting' | 'Deleted' | 'Failed';

/**
 * Snapshot statistics: byte counts, as decimal strings (int64, wire-conventions §1). None is
 * measured (agents report no per-snapshot space): all "0" (docs/api.md "Measured and not measured").
 */
export interface SnapshotStatisticsWire {
  physicalCapacity: string;
  physicalOwnedCapacity: string;
  physicalOwnedMemory: string;
  physicalMemory: string;
  userWritten: string;
}

export interface SnapshotWire {
  state: SnapshotWireState;
  UUID: string;
  name: string;
  description: string;
  creationTime: string;
  retentionTime: string;
  sourceVolumeUUID: string;
  sourceVolumeName: string;
  replicaCount: number;
  nodeList: string[];
  nsid: number;
  acl: { values: string[] };
  /** A JSON boolean here, unlike a volume's "true"/"false" (wire-conventions §7). */
  compression: boolean;
  size: string;
  IPAcl: { values: string[] };
  sectorSize: number;
  statistics: SnapshotStatisticsWire;
  ETag: string;
  projectName: string;
  primaryNodeUUID: string;
  labels: { key: string; value: string }[];
  clusterId: string;
  pgUUID: string;
}

/**
 * A snapshot is never exported to hosts (it is not a namespace of any subsystem): its ACLs
 * admit nobody and it has no nsid. Clones get their own ACL when they are created.
 */
const NOBODY = ALLOW_NONE;

export function snapshotToWire(stored: Versioned<SnapshotRecord>, volume: VolumeRecord | null | undefined, clusterId: string): SnapshotWire {
  const snapshot = stored.record;
  // The volume counts only while it is the one the snapshot was taken of.
  const source = volume && volume.UUID === snapshot.sourceVolumeUUID ? volume : null;
  const placement = source?.placement ?? null;
  return {
    state: snapshot.state,
    UUID: snapshot.UUID,
    name: snapshot.name,
    description: snapshot.description,
    creationTime: rfc3339(snapshot.creationTime),
    retentionTime: formatRetention(snapshot.retentionSeconds),
    sourceVolumeUUID: snapshot.sourceVolumeUUID,
    sourceVolumeName: source?.name ?? snapshot.sourceVolumeName,
    replicaCount: source?.replicaCount ?? 0,
    nodeList: placement ? [...placement.nodeList] : [],
    nsid: 0,
    acl: { values: [NOBODY] },
    compression: snapshot.compression,
    size: snapshot.sizeBytes,
    IPAcl: { values: [NOBODY] },
    sectorSize: snapshot.sectorSize,
    // Agents do not report per-snapshot space yet (VolumeStatusRecord.snapshots has no byte
    // counts): zeros rather than invented numbers.
    statistics: { physicalCapacity: '0', physicalOwnedCapacity: '0', physicalOwnedMemory: '0', physicalMemory: '0', userWritten: '0' },
    ETag: stored.revision,
    projectName: snapshot.projectName,
    primaryNodeUUID: placement?.primaryNodeUUID ?? '',
    labels: snapshot.labels.map((l) => ({ key: l.key, value: l.value })),
    clusterId,
    // No protection groups in Strata: the volume's replicas are its nodeList.
    pgUUID: '',
  };
}

function rfc3339(value: string): string {
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? value : new Date(ms).toISOString();
}
