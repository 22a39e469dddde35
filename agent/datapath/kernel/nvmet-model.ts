// The kernel NVMe target (nvmet) as the data path sees it: the configfs tree read back into a
// typed model, the operations that change it, and the desired state of one exported volume.
// Pure types and helpers: no I/O here. Paths are relative to the nvmet root
// (/sys/kernel/config/nvmet on a real server) and always use '/'.
import { NQN_MAX_BYTES } from '../../../lib/contract/nqn.js';

/** Attribute files the data path reads, per object kind (all others are left unread). */
export const subsystemAttributes = ['attr_allow_any_host', 'attr_serial', 'attr_model', 'attr_cntlid_min', 'attr_cntlid_max'] as const;
export const namespaceAttributes = ['device_path', 'device_uuid', 'device_nguid', 'buffered_io', 'enable', 'ana_grpid'] as const;
/** addr_tsas and addr_treq exist only on kernels with NVMe/TCP TLS (6.7+): missing on 6.1. */
export const portAttributes = ['addr_trtype', 'addr_adrfam', 'addr_traddr', 'addr_trsvcid', 'addr_tsas', 'addr_treq'] as const;

export type SubsystemAttribute = (typeof subsystemAttributes)[number];
export type NamespaceAttribute = (typeof namespaceAttributes)[number];
export type PortAttribute = (typeof portAttributes)[number];

/**
 * Attribute values as read (trailing newline removed). A missing key means the file does not
 * exist or could not be read: on a real configfs every attribute exists from mkdir on, on a
 * plain directory (tests) only after it was written once.
 */
export type Attributes<K extends string> = Partial<Record<K, string>>;

export interface NvmetNamespace {
  readonly nsid: number;
  readonly attrs: Attributes<NamespaceAttribute>;
}

export interface NvmetSubsystem {
  readonly nqn: string;
  readonly attrs: Attributes<SubsystemAttribute>;
  /** Host NQNs linked in allowed_hosts (the link's target name, which is what the kernel uses). */
  readonly allowedHosts: readonly string[];
  readonly namespaces: ReadonlyMap<number, NvmetNamespace>;
}

export interface NvmetPort {
  readonly id: number;
  readonly attrs: Attributes<PortAttribute>;
  /** ana_groups/<id>/ana_state; group 1 always exists on a real configfs. */
  readonly anaGroups: ReadonlyMap<number, string | undefined>;
  /** Subsystem NQNs linked into ports/<id>/subsystems. */
  readonly subsystems: readonly string[];
  /** Entries of referrals/ (never created by Strata; they keep a port from being removed). */
  readonly referrals: readonly string[];
}

export interface NvmetTree {
  readonly hosts: ReadonlySet<string>;
  readonly subsystems: ReadonlyMap<string, NvmetSubsystem>;
  readonly ports: ReadonlyMap<number, NvmetPort>;
}

/** Some objects read back fresh (readObjects): undefined = the object does not exist. */
export interface NvmetObjects {
  readonly hosts: ReadonlySet<string>;
  readonly subsystems: ReadonlyMap<string, NvmetSubsystem | undefined>;
  readonly ports: ReadonlyMap<number, NvmetPort | undefined>;
}

/** The objects an operation changes: its subsystem, its port, or the host entries. */
export function objectOfOp(op: NvmetOp): { subsystem: string } | { port: number } | { hosts: true } | undefined {
  const [top, name] = op.path.split('/');
  if (name === undefined) return undefined;
  if (top === 'subsystems') return { subsystem: name };
  if (top === 'ports' && /^\d+$/.test(name)) return { port: Number(name) };
  if (top === 'hosts') return { hosts: true };
  return undefined;
}

export const emptyTree = (): NvmetTree => ({ hosts: new Set(), subsystems: new Map(), ports: new Map() });

/**
 * The only changes the data path makes to the kernel target. `volume` names the volume an
 * operation serves, so a failure is charged to that volume and skips only its later operations;
 * operations on shared objects (host entries) carry none.
 */
export type NvmetOp =
  | { readonly op: 'mkdir'; readonly path: string; readonly volume?: string }
  | { readonly op: 'write'; readonly path: string; readonly value: string; readonly volume?: string }
  /** Creates `path` as a link to the object at `target` (both relative to the root). */
  | { readonly op: 'symlink'; readonly path: string; readonly target: string; readonly volume?: string }
  | { readonly op: 'unlink'; readonly path: string; readonly volume?: string }
  | { readonly op: 'rmdir'; readonly path: string; readonly volume?: string };

export function describeOp(op: NvmetOp): string {
  switch (op.op) {
    case 'write':
      return `write ${JSON.stringify(op.value)} to ${op.path}`;
    case 'symlink':
      return `link ${op.path} -> ${op.target}`;
    default:
      return `${op.op} ${op.path}`;
  }
}

export type AnaState = 'optimized' | 'non-optimized' | 'inaccessible' | 'persistent-loss' | 'change';

/** What one volume must look like in the kernel target on this node. */
export interface DesiredExport {
  readonly volumeUUID: string;
  readonly nqn: string;
  readonly serial: string;
  readonly model: string;
  readonly cntlidMin: number;
  readonly cntlidMax: number;
  /** ALLOW_ANY. */
  readonly allowAnyHost: boolean;
  /** Host NQNs (empty with allowAnyHost, and for ALLOW_NONE). Sorted, unique. */
  readonly allowedHosts: readonly string[];
  readonly namespace: {
    readonly nsid: number;
    readonly devicePath: string;
    /** Both the namespace UUID and (same 16 bytes) its NGUID: the volume UUID. */
    readonly uuid: string;
    readonly bufferedIo: boolean;
    readonly anaGroupId: number;
  };
  readonly port: {
    readonly id: number;
    readonly trtype: 'tcp';
    readonly adrfam: 'ipv4' | 'ipv6';
    readonly traddr: string;
    readonly trsvcid: string;
    readonly anaState: AnaState;
    /** Only TLS 1.3 connections (addr_tsas tls1.3, addr_treq required; docs/nvme-tcp-tls.md). */
    readonly tls?: boolean;
  };
}

export const STRATA_MODEL = 'Strata Volume';
/** NVMET_SN_MAX_SIZE in the kernel. */
export const SERIAL_LENGTH = 20;

/**
 * The controller serial of a volume: identical on every node (multipath needs it), derived
 * from the volume UUID alone. 20 hex digits = the first 80 bits of the UUID.
 */
export function serialOfVolume(volumeUUID: string): string {
  return volumeUUID.replace(/-/g, '').toLowerCase().slice(0, SERIAL_LENGTH);
}

/**
 * A name safe to use as one configfs directory entry: NQNs come from users (ACLs), and a '/'
 * or '..' would leave the directory it is meant for. NVMe caps NQNs at 223 bytes.
 */
export function isSafeObjectName(name: string): boolean {
  return (
    name.length > 0 &&
    Buffer.byteLength(name) <= NQN_MAX_BYTES &&
    name !== '.' &&
    name !== '..' &&
    /^[\x21-\x7e]+$/.test(name) &&
    !name.includes('/')
  );
}

export const paths = {
  host: (nqn: string) => `hosts/${nqn}`,
  subsystem: (nqn: string) => `subsystems/${nqn}`,
  subsystemAttr: (nqn: string, attr: SubsystemAttribute) => `subsystems/${nqn}/${attr}`,
  allowedHost: (nqn: string, host: string) => `subsystems/${nqn}/allowed_hosts/${host}`,
  namespace: (nqn: string, nsid: number) => `subsystems/${nqn}/namespaces/${nsid}`,
  namespaceAttr: (nqn: string, nsid: number, attr: NamespaceAttribute | 'revalidate_size') =>
    `subsystems/${nqn}/namespaces/${nsid}/${attr}`,
  port: (id: number) => `ports/${id}`,
  portAttr: (id: number, attr: PortAttribute) => `ports/${id}/${attr}`,
  anaGroup: (id: number, group: number) => `ports/${id}/ana_groups/${group}`,
  anaState: (id: number, group: number) => `ports/${id}/ana_groups/${group}/ana_state`,
  portSubsystem: (id: number, nqn: string) => `ports/${id}/subsystems/${nqn}`,
};
