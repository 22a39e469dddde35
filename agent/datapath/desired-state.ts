// From a VolumeAssignment (etcd, written by the active cluster manager) to what the kernel
// target must show on this node. Checks every field the kernel or a path depends on: an
// assignment that fails here is reported Failed with the reason, and nothing is touched for it.
import { accessOf, ALLOW_NONE } from '../../lib/contract/acl.js';
import { volumeNqnPrefix } from '../../lib/contract/nqn.js';
import { isCanonicalUuid } from '../../lib/contract/uuid.js';
import type { AclEntry, VolumeAssignment } from '../../lib/records.js';
import {
  isSafeObjectName,
  serialOfVolume,
  STRATA_MODEL,
  type DesiredExport,
} from './nvmet-model.js';
import { ipAclOf } from './ip-acl.js';

export interface ClusterFacts {
  readonly clusterUUID: string;
  readonly subsystemNQN: string;
}

export interface ExportSettings {
  /** traddr of every volume port (0.0.0.0 = all IPv4 addresses). */
  readonly listenAddress: string;
  readonly portIdMin: number;
  readonly portIdMax: number;
}

/** NVME_CNTLID_MAX in the kernel. */
const CNTLID_MAX = 0xffef;

export interface Acl {
  readonly allowAnyHost: boolean;
  readonly hosts: readonly string[];
}

export function aclOf(entries: readonly AclEntry[]): Acl | string {
  const access = accessOf(entries, ALLOW_NONE);
  if (access === undefined) return 'ALLOW_ANY and ALLOW_NONE must stand alone in an ACL';
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
  return undefined;
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
