// The discovery log page (log identifier 0x70) as one host sees it: an entry per path of every
// volume whose ACL admits the host, then a referral per other discovery endpoint. Pure code: the
// cluster's paths come in as a DiscoveryView (cluster-paths.ts builds it from etcd).
import { isIP } from 'node:net';
import { ALLOW_ANY, ALLOW_NONE } from '../../lib/contract/acl.js';
import { CNTLID_DYNAMIC, DISCOVERY_NQN, NQN_FIELD_BYTES } from './nvme.js';

export const DISCOVERY_LOG_HEADER_BYTES = 1024;
export const DISCOVERY_LOG_ENTRY_BYTES = 1024;
export const TRTYPE_TCP = 3;
export const AddressFamily = { IPv4: 1, IPv6: 2 } as const;
export const SubsystemType = { Referral: 1, Nvme: 2 } as const;
/**
 * TREQ: secure channel not specified, as the kernel target says for plain TCP. Not "not
 * required": libnvme (nvme-cli 2.x) reads either "required" or "not required" on a TCP entry as
 * TLS in use and asks the kernel for it (`tls`), which a 6.1 kernel refuses.
 */
export const TREQ_NOT_SPECIFIED = 0x00;
/**
 * With TLS required on volume ports (docs/nvme-tcp-tls.md) their entries say so, as the kernel's
 * own discovery controller does for a port with addr_tsas tls1.3: TREQ secure channel required,
 * TSAS security type TLS 1.3. Referrals (discovery controllers) stay plain.
 */
export const TREQ_REQUIRED = 0x01;
export const TSAS_SECTYPE_TLS13 = 0x02;
/** ASQSZ: the admin queue depth the volumes' controllers (kernel nvmet) accept. */
export const ADMIN_QUEUE_ENTRIES = 32;
const TRSVCID_BYTES = 32;
const TRADDR_BYTES = 256;

/** One reachable path of one volume: a node's address and the volume's own port. */
export interface VolumePath {
  readonly volumeUUID: string;
  readonly nodeUUID: string;
  readonly subsystemNQN: string;
  /** The ACL of the node's assignment: host NQNs, or ALLOW_ANY / ALLOW_NONE alone. */
  readonly acl: readonly string[];
  /** An IPv4 or IPv6 literal (no brackets). */
  readonly traddr: string;
  readonly port: number;
}

/** Another node's discovery controller. */
export interface Referral {
  readonly traddr: string;
  readonly port: number;
}

/** What every host's log page is computed from. */
export interface DiscoveryView {
  /** The cluster's subsystemNQN, accepted by Connect as a unique discovery NQN ('' until known). */
  readonly clusterSubsystemNQN: string;
  /** Paths of volumes that admit any host. */
  readonly openPaths: readonly VolumePath[];
  /** Paths by admitted host NQN. */
  readonly pathsByHost: ReadonlyMap<string, readonly VolumePath[]>;
  readonly referrals: readonly Referral[];
  /** Volume ports require TLS 1.3. */
  readonly tlsRequired: boolean;
}

export interface DiscoveryLogEntry {
  /** TREQ "required" and TSAS TLS 1.3. */
  readonly tls?: boolean;
  readonly subtype: number;
  readonly adrfam: number;
  readonly portid: number;
  readonly trsvcid: string;
  readonly subnqn: string;
  readonly traddr: string;
}

/** Indexes paths by the hosts their ACLs name, so a host's page costs only its own paths. */
export function makeDiscoveryView(clusterSubsystemNQN: string, paths: readonly VolumePath[], referrals: readonly Referral[], tlsRequired = false): DiscoveryView {
  const openPaths: VolumePath[] = [];
  const pathsByHost = new Map<string, VolumePath[]>();
  for (const path of paths) {
    if (path.acl.includes(ALLOW_NONE)) continue;
    if (path.acl.includes(ALLOW_ANY)) {
      openPaths.push(path);
      continue;
    }
    for (const host of new Set(path.acl)) {
      let list = pathsByHost.get(host);
      if (!list) pathsByHost.set(host, (list = []));
      list.push(path);
    }
  }
  return { clusterSubsystemNQN, openPaths, pathsByHost, referrals, tlsRequired };
}

export const EMPTY_VIEW: DiscoveryView = makeDiscoveryView('', [], []);

export function addressFamily(traddr: string): number | undefined {
  const family = isIP(traddr);
  return family === 4 ? AddressFamily.IPv4 : family === 6 ? AddressFamily.IPv6 : undefined;
}

/**
 * The host's entries, in a stable order (volume NQN, address, port; referrals last), one per
 * distinct (subsystem, address, port).
 */
export function entriesForHost(view: DiscoveryView, hostNQN: string): DiscoveryLogEntry[] {
  const seen = new Set<string>();
  const volumes: DiscoveryLogEntry[] = [];
  for (const path of [...view.openPaths, ...(view.pathsByHost.get(hostNQN) ?? [])]) {
    const adrfam = addressFamily(path.traddr);
    const key = `${path.subsystemNQN} ${path.traddr} ${path.port}`;
    if (adrfam === undefined || seen.has(key)) continue;
    seen.add(key);
    volumes.push({ ...(view.tlsRequired ? { tls: true } : {}), subtype: SubsystemType.Nvme, adrfam, portid: path.port, trsvcid: String(path.port), subnqn: path.subsystemNQN, traddr: path.traddr });
  }
  volumes.sort((a, b) => compare(a.subnqn, b.subnqn) || compare(a.traddr, b.traddr) || a.portid - b.portid);
  const referrals: DiscoveryLogEntry[] = [];
  for (const r of view.referrals) {
    const adrfam = addressFamily(r.traddr);
    const key = `referral ${r.traddr} ${r.port}`;
    if (adrfam === undefined || seen.has(key)) continue;
    seen.add(key);
    referrals.push({ subtype: SubsystemType.Referral, adrfam, portid: r.port, trsvcid: String(r.port), subnqn: DISCOVERY_NQN, traddr: r.traddr });
  }
  referrals.sort((a, b) => compare(a.traddr, b.traddr) || a.portid - b.portid);
  return [...volumes, ...referrals];
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Identifies a host's entries: equal keys, equal pages (but for genctr). */
export function entriesKey(entries: readonly DiscoveryLogEntry[]): string {
  return entries.map((e) => `${e.subtype}|${e.adrfam}|${e.portid}|${e.trsvcid}|${e.subnqn}|${e.traddr}|${e.tls ? 'tls' : ''}`).join('\n');
}

/** Writes an ASCII field NUL-padded to its width, as the kernel's own discovery controller does. */
function writeField(b: Buffer, value: string, offset: number, width: number): void {
  b.write(value, offset, width, 'latin1');
}

export function encodeDiscoveryLog(genctr: bigint, entries: readonly DiscoveryLogEntry[]): Buffer {
  const b = Buffer.alloc(DISCOVERY_LOG_HEADER_BYTES + entries.length * DISCOVERY_LOG_ENTRY_BYTES);
  b.writeBigUInt64LE(genctr, 0);
  b.writeBigUInt64LE(BigInt(entries.length), 8);
  b.writeUInt16LE(0, 16); // RECFMT
  entries.forEach((e, i) => {
    const o = DISCOVERY_LOG_HEADER_BYTES + i * DISCOVERY_LOG_ENTRY_BYTES;
    b[o] = TRTYPE_TCP;
    b[o + 1] = e.adrfam;
    b[o + 2] = e.subtype;
    b[o + 3] = e.tls ? TREQ_REQUIRED : TREQ_NOT_SPECIFIED;
    b.writeUInt16LE(e.portid & 0xffff, o + 4);
    b.writeUInt16LE(CNTLID_DYNAMIC, o + 6);
    b.writeUInt16LE(ADMIN_QUEUE_ENTRIES, o + 8);
    writeField(b, e.trsvcid, o + 32, TRSVCID_BYTES);
    writeField(b, e.subnqn, o + 256, NQN_FIELD_BYTES - 1);
    writeField(b, e.traddr, o + 512, TRADDR_BYTES);
    // TSAS (o + 768): the TCP security type, 0 (none) unless TLS is required.
    if (e.tls) b[o + 768] = TSAS_SECTYPE_TLS13;
  });
  return b;
}

export interface DecodedDiscoveryLog {
  readonly genctr: bigint;
  readonly numrec: bigint;
  readonly recfmt: number;
  readonly entries: (DiscoveryLogEntry & { trtype: number; treq: number; cntlid: number; asqsz: number })[];
}

const text = (b: Buffer, offset: number, width: number) => {
  const field = b.subarray(offset, offset + width);
  const end = field.indexOf(0);
  return field.subarray(0, end === -1 ? width : end).toString('latin1').trimEnd();
};

/** Decodes a whole log page (header and the entries present in `b`). */
export function decodeDiscoveryLog(b: Buffer): DecodedDiscoveryLog {
  const genctr = b.readBigUInt64LE(0);
  const numrec = b.readBigUInt64LE(8);
  const entries: DecodedDiscoveryLog['entries'] = [];
  for (let o = DISCOVERY_LOG_HEADER_BYTES; o + DISCOVERY_LOG_ENTRY_BYTES <= b.length && BigInt(entries.length) < numrec; o += DISCOVERY_LOG_ENTRY_BYTES) {
    entries.push({
      trtype: b[o]!,
      adrfam: b[o + 1]!,
      subtype: b[o + 2]!,
      treq: b[o + 3]!,
      portid: b.readUInt16LE(o + 4),
      cntlid: b.readUInt16LE(o + 6),
      asqsz: b.readUInt16LE(o + 8),
      trsvcid: text(b, o + 32, TRSVCID_BYTES),
      subnqn: text(b, o + 256, NQN_FIELD_BYTES),
      traddr: text(b, o + 512, TRADDR_BYTES),
    });
  }
  return { genctr, numrec, recfmt: b.readUInt16LE(16), entries };
}
