// From a VolumeAssignment (etcd, written by the active cluster manager) to what the kernel
// target must show on this node. Checks every field the kernel or a path depends on: an
// assignment that fails here is reported Failed with the reason, and nothing is touched for it.
import { accessOf, ALLOW_NONE, mixedPseudoValuesProblem } from '../../../lib/contract/acl.js';
import { volumeNqnPrefix } from '../../../lib/contract/nqn.js';
import { isCanonicalUuid, uuidFromName } from '../../../lib/contract/uuid.js';
import type { AclEntry, AssignmentReplication, VolumeAssignment } from '../../../lib/records.js';
import { DEFAULT_REPLICATION_PORT, nodeHostNQN } from '../../../lib/replication.js';
import {
  isSafeObjectName,
  serialOfVolume,
  STRATA_MODEL,
  type DesiredExport,
} from '../kernel/nvmet-model.js';
import { ipAclOf } from '../kernel/ip-acl.js';
import type { ClusterFacts } from '../pool/node-pools.js';

export interface ExportSettings {
  /** traddr of every volume port (0.0.0.0 = all IPv4 addresses). */
  readonly listenAddress: string;
  readonly portIdMin: number;
  readonly portIdMax: number;
  /** The node's replication port (and its nvmet port id); default DEFAULT_REPLICATION_PORT. */
  readonly replicationPort?: number;
}

/** NVME_CNTLID_MAX in the kernel. */
const CNTLID_MAX = 0xffef;

export interface Acl {
  readonly allowAnyHost: boolean;
  readonly hosts: readonly string[];
}

export function aclOf(entries: readonly AclEntry[]): Acl | string {
  const access = accessOf(entries, ALLOW_NONE);
  if (access === undefined) return mixedPseudoValuesProblem('an ACL');
  if (access === 'none') return { allowAnyHost: false, hosts: [] };
  if (access === 'any') return { allowAnyHost: true, hosts: [] };
  for (const host of access) {
    if (!host.startsWith('nqn.') || !isSafeObjectName(host)) return `invalid host NQN in the ACL: ${JSON.stringify(host)}`;
  }
  return { allowAnyHost: false, hosts: [...new Set(entries)].sort() };
}

/** The reason an assignment cannot be served, or undefined when it is sound. */
export function assignmentProblem(a: VolumeAssignment, facts: ClusterFacts, settings: ExportSettings): string | undefined {
  if (!isCanonicalUuid(a.volumeUUID)) return `invalid volume UUID ${JSON.stringify(a.volumeUUID)}`;
  const nqn = `${volumeNqnPrefix(facts.subsystemNQN)}${a.volumeUUID}`;
  if (a.subsystemNQN !== nqn) return `the assignment's subsystem NQN ${JSON.stringify(a.subsystemNQN)} is not ${nqn}`;
  if (!isSafeObjectName(nqn)) return `the subsystem NQN ${nqn} is not usable in configfs`;
  if (!Number.isInteger(a.generation) || a.generation < 0) return `invalid generation ${a.generation}`;
  if (typeof a.sizeBytes !== 'string' || !/^[1-9]\d*$/.test(a.sizeBytes)) return `invalid size ${JSON.stringify(a.sizeBytes)}`;
  if (a.sectorSize !== 512 && a.sectorSize !== 4096) return `invalid sector size ${a.sectorSize}`;
  if (!Number.isInteger(a.nsid) || a.nsid < 1 || a.nsid > 0xfffffffe) return `invalid nsid ${a.nsid}`;
  if (!Number.isInteger(a.port) || a.port < settings.portIdMin || a.port > settings.portIdMax) {
    return `port ${a.port} is outside this agent's volume port range ${settings.portIdMin}-${settings.portIdMax}`;
  }
  if (!Number.isInteger(a.cntlidMin) || !Number.isInteger(a.cntlidMax) || a.cntlidMin < 1 || a.cntlidMax > CNTLID_MAX || a.cntlidMin >= a.cntlidMax) {
    return `invalid controller-ID window ${a.cntlidMin}-${a.cntlidMax}`;
  }
  if (a.anaState !== 'optimized' && a.anaState !== 'inaccessible') return `invalid ANA state ${JSON.stringify(a.anaState)}`;
  const acl = aclOf(Array.isArray(a.acl) ? a.acl : []);
  if (typeof acl === 'string') return acl;
  const ipAcl = ipAclOf(Array.isArray(a.ipAcl) ? a.ipAcl : []);
  if (typeof ipAcl === 'string') return ipAcl;
  for (const s of [...(a.snapshotUUIDs ?? []), a.cloneFromSnapshotUUID, a.rollbackSnapshotUUID]) {
    if (s && !isCanonicalUuid(s)) return `invalid snapshot UUID ${JSON.stringify(s)}`;
  }
  const qos = qosProblem(a.qos);
  if (qos) return qos;
  return a.replication ? replicationProblem(a, a.replication, facts) : undefined;
}

/** The limits go to strata-ublk's limits file as they are: non-negative safe integers, or no policy at all. */
function qosProblem(qos: VolumeAssignment['qos']): string | undefined {
  if (qos === undefined || qos === null) return undefined;
  if (typeof qos !== 'object') return `invalid QoS limits ${JSON.stringify(qos)}`;
  for (const name of ['readIops', 'writeIops', 'readBytesPerSecond', 'writeBytesPerSecond'] as const) {
    const value: unknown = qos[name];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) return `invalid QoS limit ${name} ${JSON.stringify(value)}`;
  }
  return undefined;
}

function replicationProblem(a: VolumeAssignment, r: AssignmentReplication, facts: ClusterFacts): string | undefined {
  if (!Number.isInteger(r.epoch) || r.epoch < 1) return `invalid replication epoch ${r.epoch}`;
  if (!Array.isArray(r.legs) || r.legs.length < 2 || r.legs.length > 3) return 'a replicated volume has 2 or 3 copies';
  const nodes = new Set<string>();
  for (const leg of r.legs) {
    if (typeof leg.nodeUUID !== 'string' || !isCanonicalUuid(leg.nodeUUID) || nodes.has(leg.nodeUUID)) return `invalid replica node ${JSON.stringify(leg.nodeUUID)}`;
    if (typeof leg.endpoint !== 'string' || /\s/.test(leg.endpoint)) return `invalid replication endpoint ${JSON.stringify(leg.endpoint)}`;
    nodes.add(leg.nodeUUID);
  }
  if (!nodes.has(a.nodeUUID)) return `this node ${a.nodeUUID} is not among the volume's copies`;
  if (!nodes.has(r.primaryNodeUUID)) return `the primary ${r.primaryNodeUUID} is not among the volume's copies`;
  if (r.primaryHostNQN !== nodeHostNQN(facts.subsystemNQN, r.primaryNodeUUID)) return `the primary's host NQN ${JSON.stringify(r.primaryHostNQN)} is not the primary node's`;
  if ((a.role === 'primary') !== (r.primaryNodeUUID === a.nodeUUID)) return `the assignment's role ${a.role} contradicts its replica set`;
  return undefined;
}

/** The subsystem a replica node exports its copy on, to the primary's host NQN alone. */
export function replicationExportOf(
  a: VolumeAssignment,
  exported: { readonly nqn: string; readonly primaryHostNQN: string },
  backing: { readonly devicePath: string; readonly bufferedIo: boolean },
  settings: ExportSettings,
): DesiredExport {
  const port = settings.replicationPort ?? DEFAULT_REPLICATION_PORT;
  return {
    volumeUUID: a.volumeUUID,
    nqn: exported.nqn,
    // Distinct from the host path's (the volume's) serial and namespace UUID: to the primary's
    // initiator this is another device.
    serial: serialOfVolume(replicaIdOf(a.volumeUUID, a.nodeUUID)),
    model: STRATA_MODEL,
    cntlidMin: 1,
    cntlidMax: CNTLID_WINDOW_OF_REPLICATION,
    allowAnyHost: false,
    allowedHosts: [exported.primaryHostNQN],
    namespace: { nsid: 1, devicePath: backing.devicePath, uuid: replicaIdOf(a.volumeUUID, a.nodeUUID), bufferedIo: backing.bufferedIo, anaGroupId: 1 },
    port: {
      id: port,
      trtype: 'tcp',
      adrfam: settings.listenAddress.includes(':') ? 'ipv6' : 'ipv4',
      traddr: settings.listenAddress,
      trsvcid: String(port),
      anaState: 'optimized',
    },
  };
}

const CNTLID_WINDOW_OF_REPLICATION = 1000;

/** A UUID for one node's copy of a volume. */
function replicaIdOf(volumeUUID: string, nodeUUID: string): string {
  return uuidFromName(`${volumeUUID}/${nodeUUID}`);
}

/** The export of a sound assignment whose backing is ready. */
export function desiredExportOf(
  a: VolumeAssignment,
  backing: { readonly devicePath: string; readonly bufferedIo: boolean },
  facts: ClusterFacts,
  settings: ExportSettings,
): DesiredExport {
  const acl = aclOf(a.acl) as Acl;
  return {
    volumeUUID: a.volumeUUID,
    nqn: `${volumeNqnPrefix(facts.subsystemNQN)}${a.volumeUUID}`,
    serial: serialOfVolume(a.volumeUUID),
    model: STRATA_MODEL,
    cntlidMin: a.cntlidMin,
    cntlidMax: a.cntlidMax,
    allowAnyHost: acl.allowAnyHost,
    allowedHosts: acl.hosts,
    namespace: { nsid: a.nsid, devicePath: backing.devicePath, uuid: a.volumeUUID, bufferedIo: backing.bufferedIo, anaGroupId: 1 },
    port: {
      id: a.port,
      trtype: 'tcp',
      adrfam: settings.listenAddress.includes(':') ? 'ipv6' : 'ipv4',
      traddr: settings.listenAddress,
      trsvcid: String(a.port),
      anaState: a.anaState,
    },
  };
}
