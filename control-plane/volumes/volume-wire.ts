// A volume as the API returns it (spec 2.15 + wire-conventions §1, §7, §8): the stored record
// (desired state and lifecycle) joined with what the nodes report (volume-status) and which
// nodes are alive (presence). docs/volumes.md explains each derived field.
import type { Label, PlacementRestriction, ReplicaSetRecord, VolumeRecord, VolumeState, VolumeStatusRecord } from '../../lib/records.js';
import { hostOf, portOf } from '../../lib/endpoints.js';
import type { StoredVolume } from './volume-store.js';

import { primaryOf, protectionOf, rebuildProgressOf, type ProtectionState } from './protection.js';
import { volumeWritten } from './user-written.js';
export type { ProtectionState } from './protection.js';

/** The 11 volume statistics (wire-conventions §7). Byte counts are decimal strings. */
export interface VolumeStatisticsWire {
  logicalUsedStorage: string;
  physicalUsedStorage: string;
  compressionRatio: number;
  totalCompressionRatio: number;
  physicalCapacity: string;
  physicalOwnedCapacity: string;
  /** Not measured: always 0 (docs/api.md "Measured and not measured"). */
  physicalOwnedMemory: string;
  /** Not measured: always 0 (docs/api.md "Measured and not measured"). */
  physicalMemory: string;
  /**
   * Replicated volumes: bytes hosts wrote, from the block layer's counter of the volume's
   * device-mapper device on each primary, as last reported (a lower bound). Single-copy volumes:
   * not measured, always 0 (docs/api.md "Measured and not measured").
   */
  userWritten: string;
  /** Not measured: always 0 (docs/api.md "Measured and not measured"). */
  unrecoverableDataIntegrityErrors: number;
  /** Not measured: always 0 (docs/api.md "Measured and not measured"). */
  recoverableDataIntegrityErrors: number;
}

export interface VolumeWire {
  name: string;
  size: string;
  acl: { values: string[] };
  IPAcl: { values: string[] };
  compression: 'true' | 'false';
  replicaCount: number;
  minReplicas: number;
  sectorSize: number;
  projectName: string;
  sourceSnapshotUUID: string;
  sourceSnapshotName: string;
  placementRestrictions: PlacementRestriction[];
  qosPolicyUUID: string;
  qosPolicyName: string;
  labels: Label[];
  state: VolumeState;
  protectionState: ProtectionState;
  nodeList: string[];
  UUID: string;
  nsid: number;
  rebuildProgress: string;
  statistics: VolumeStatisticsWire;
  ETag: string;
  connectedHosts: string[];
  primaryNodeUUID: string;
  creationTime: string;
  clusterId: string;
  pgUUID: string;
  encrypted: boolean;
  missingNodesAccess: string[];
}

/** What the data path says about a volume, read when answering. */
export interface VolumeObservation {
  /** The volume's status records (any node; only nodes of its nodeList count). */
  readonly statuses: readonly VolumeStatusRecord[];
  /** Nodes whose agent is alive now. */
  readonly presentNodes: ReadonlySet<string>;
  /** A replicated volume's replica set (undefined for one copy). */
  readonly replicaSet?: ReplicaSetRecord | undefined;
}

/** The QoS policy in effect: the volume's own, else its project's default (names resolved). */
export interface EffectiveQos {
  readonly UUID: string;
  readonly name: string;
}

/** The volume's protection state from its replica set and its nodes' reports (cluster health counts by it too). */
export function protectionStateOf(v: VolumeRecord, observed: VolumeObservation): ProtectionState {
  const nodeList = v.placement?.nodeList ?? [];
  return protectionOf({ volume: v, replicaSet: observed.replicaSet, statusOf: statusesInNodeList(nodeList, observed.statuses), present: observed.presentNodes });
}

/** Node UUID → its status, for the nodes of the nodeList only. */
function statusesInNodeList(nodeList: readonly string[], statuses: readonly VolumeStatusRecord[]): Map<string, VolumeStatusRecord> {
  const inList = new Set(nodeList);
  return new Map(statuses.filter((s) => inList.has(s.nodeUUID)).map((s) => [s.nodeUUID, s]));
}

export function volumeToWire(stored: StoredVolume, observed: VolumeObservation, qos: EffectiveQos, clusterId: string): VolumeWire {
  const v = stored.record;
  const nodeList = v.placement?.nodeList ?? [];
  const statusOf = statusesInNodeList(nodeList, observed.statuses);
  const protection = protectionOf({ volume: v, replicaSet: observed.replicaSet, statusOf, present: observed.presentNodes });
  const primaryNodeUUID = primaryOf(v, observed.replicaSet);
  const primary = statusOf.get(primaryNodeUUID);
  const hosts = connectedHostsOf(nodeList, statusOf);
  return {
    name: v.name,
    size: v.sizeBytes,
    acl: { values: [...v.acl] },
    IPAcl: { values: [...v.ipAcl] },
    compression: v.compression ? 'true' : 'false',
    replicaCount: v.replicaCount,
    // "Not used" (spec 2.15): not stored, always 0.
    minReplicas: 0,
    sectorSize: v.sectorSize,
    projectName: v.projectName,
    sourceSnapshotUUID: v.sourceSnapshotUUID,
    sourceSnapshotName: v.sourceSnapshotName,
    placementRestrictions: v.placementRestrictions.map((r) => ({ operator: r.operator, labelValueKeyPairs: r.labelValueKeyPairs.map((p) => ({ ...p })) })),
    qosPolicyUUID: qos.UUID,
    qosPolicyName: qos.name,
    labels: v.labels.map((l) => ({ key: l.key, value: l.value })),
    state: v.state,
    protectionState: protection,
    nodeList: [...nodeList],
    UUID: v.UUID,
    nsid: v.placement?.nsid ?? 0,
    // The primary's md resync progress (docs/replication.md).
    rebuildProgress: rebuildProgressOf(protection, v, observed.replicaSet, primary?.replicaLegs),
    statistics: statisticsOf(primary, nodeList, statusOf, volumeWritten(observed.statuses)),
    ETag: stored.revision,
    connectedHosts: [...hosts.keys()].sort(),
    primaryNodeUUID,
    creationTime: rfc3339(v.creationTime),
    clusterId,
    // No protection groups in Strata.
    pgUUID: '',
    encrypted: v.encrypted,
    missingNodesAccess: missingNodesAccess(nodeList, hosts),
  };
}

/** Host NQN → the nodes of the nodeList it is connected through. */
function connectedHostsOf(nodeList: readonly string[], statusOf: ReadonlyMap<string, VolumeStatusRecord>): Map<string, Set<string>> {
  const hosts = new Map<string, Set<string>>();
  for (const node of nodeList) {
    for (const host of statusOf.get(node)?.connectedHosts ?? []) {
      if (!host.hostNQN) continue;
      const nodes = hosts.get(host.hostNQN) ?? new Set<string>();
      nodes.add(node);
      hosts.set(host.hostNQN, nodes);
    }
  }
  return hosts;
}

/**
 * Nodes of the nodeList that some connected host has no path through (a host that lost a
 * multipath leg). Empty when no host is connected: nobody is missing anything.
 */
function missingNodesAccess(nodeList: readonly string[], hosts: ReadonlyMap<string, Set<string>>): string[] {
  if (hosts.size === 0) return [];
  return nodeList.filter((node) => [...hosts.values()].some((nodes) => !nodes.has(node)));
}

/** RFC 3339 UTC; a stored value that does not parse is shown as stored rather than failing the read. */
function rfc3339(value: string): string {
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? value : new Date(ms).toISOString();
}

function bytes(value: string | undefined): bigint {
  return value !== undefined && /^\d+$/.test(value) ? BigInt(value) : 0n;
}

/** Two decimals: enough for a ratio, and stable across reads. */
function ratio(logical: bigint, physical: bigint): number {
  if (physical === 0n) return 1;
  return Math.round((Number(logical) / Number(physical)) * 100) / 100;
}

/**
 * Usage as the primary reports it (logical = what the host sees written, physical = what it
 * takes after compression); capacity counts every replica. userWritten is what the volume's
 * device-mapper devices counted (`written`: every node that was ever its primary counts, in the
 * nodeList now or not; a single copy still on its file namespace reports none: 0). Memory and
 * integrity counters are not measured by the data path: 0, not invented.
 */
function statisticsOf(primary: VolumeStatusRecord | undefined, nodeList: readonly string[], statusOf: ReadonlyMap<string, VolumeStatusRecord>, written: bigint | undefined): VolumeStatisticsWire {
  const logical = bytes(primary?.logicalUsedBytes);
  const physical = bytes(primary?.physicalUsedBytes);
  const allReplicas = nodeList.reduce((sum, node) => sum + bytes(statusOf.get(node)?.physicalUsedBytes), 0n);
  return {
    logicalUsedStorage: logical.toString(),
    physicalUsedStorage: physical.toString(),
    compressionRatio: ratio(logical, physical),
    totalCompressionRatio: ratio(logical, physical),
    physicalCapacity: allReplicas.toString(),
    physicalOwnedCapacity: allReplicas.toString(),
    physicalOwnedMemory: '0',
    physicalMemory: '0',
    userWritten: (written ?? 0n).toString(),
    unrecoverableDataIntegrityErrors: 0,
    recoverableDataIntegrityErrors: 0,
  };
}

/**
 * How a host attaches a volume (GET …/volumes/{UUID}/connection; docs/volumes.md "Connecting a
 * host"): a Strata extension, not in the spec. One subsystem per volume, reached on its own
 * port on every node of nodeList (ANA: the primary's path is optimized); the namespace UUID is
 * the volume UUID, hence the stable device link.
 */
export interface VolumeConnectionWire {
  UUID: string;
  name: string;
  projectName: string;
  state: string;
  transport: 'tcp';
  subsystemNQN: string;
  nsid: number;
  paths: { nodeUUID: string; address: string; port: number; primary: boolean; served: boolean }[];
  discoveryEndpoints: string[];
  devicePath: string;
  acl: string[];
  IPAcl: string[];
  commands: { connect: string[]; discover: string[]; connectAll: string[] };
  /**
   * A host that connects straight to the cluster's subsystemNQN for I/O (`nvme connect -n
   * <cluster subsystemNQN> -s 4420`, as the Proxmox plugin does) is refused; why, and what it
   * runs instead (docs/volumes.md "Hosts that connect to the cluster subsystemNQN").
   */
  clusterSubsystem: { subsystemNQN: string; directConnect: 'refused'; reason: string; instead: string[] };
}

/** Why an I/O connection to the cluster's subsystemNQN is refused (docs/volumes.md, docs/decisions.md). */
export const CLUSTER_NQN_DIRECT_CONNECT_REFUSAL =
  'the cluster subsystemNQN is not an I/O subsystem: the kernel NVMe target (nvmet) has no per-host namespace masking, so one subsystem holding every volume would show each host every volume; ' +
  'each volume is its own subsystem (subsystemNQN above) on its own port, and nothing listens on port 4420. ' +
  'On port 8009 the cluster subsystemNQN names the discovery controller, which lists the volumes this host may reach: use discovery (instead)';

export function volumeConnectionToWire(
  v: VolumeRecord,
  clusterSubsystemNQN: string,
  subsystemNQN: string,
  nodes: ReadonlyMap<string, { address: string; discoveryEndpoint: string }>,
  statuses: readonly VolumeStatusRecord[],
): VolumeConnectionWire {
  const placement = v.placement;
  const served = new Set(statuses.filter((s) => s.state === 'Served').map((s) => s.nodeUUID));
  const paths = (placement?.nodeList ?? []).flatMap((nodeUUID) => {
    const address = nodes.get(nodeUUID)?.address;
    if (!address || !placement) return [];
    return [{ nodeUUID, address, port: placement.port, primary: nodeUUID === placement.primaryNodeUUID, served: served.has(nodeUUID) }];
  });
  const discoveryEndpoints = [...nodes.values()].map((n) => n.discoveryEndpoint).filter((e) => e !== '');
  const hostNqn = '<host NQN: cat /etc/nvme/hostnqn>';
  const connectAll = discoveryEndpoints.slice(0, 1).map((e) => `nvme connect-all -t tcp -a ${hostOf(e)} -s ${portOf(e)} -q ${hostNqn} --persistent`);
  return {
    UUID: v.UUID,
    name: v.name,
    projectName: v.projectName,
    state: v.state,
    transport: 'tcp',
    subsystemNQN,
    nsid: placement?.nsid ?? 0,
    paths,
    discoveryEndpoints,
    devicePath: `/dev/disk/by-id/nvme-uuid.${v.UUID}`,
    acl: [...v.acl],
    IPAcl: [...v.ipAcl],
    commands: {
      connect: paths.map((p) => `nvme connect -t tcp -a ${p.address} -s ${p.port} -n ${subsystemNQN} -q ${hostNqn}`),
      discover: discoveryEndpoints.map((e) => `nvme discover -t tcp -a ${hostOf(e)} -s ${portOf(e)} -q ${hostNqn}`),
      connectAll,
    },
    clusterSubsystem: { subsystemNQN: clusterSubsystemNQN, directConnect: 'refused', reason: CLUSTER_NQN_DIRECT_CONNECT_REFUSAL, instead: connectAll },
  };
}
