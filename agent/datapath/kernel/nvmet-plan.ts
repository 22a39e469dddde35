// The planner: desired exports + the kernel target as it really is → the smallest ordered list
// of configfs operations. Pure (no I/O): the reconciler reads the tree, plans, applies.
//
// Order (architecture.md): hosts → subsystem and its attributes → namespace (enable last) →
// allowed hosts → port and ANA state → link subsystem into port; teardown in reverse. Kernel
// rules it respects (drivers/nvme/target/configfs.c):
// - a namespace's device_path/device_uuid/device_nguid/buffered_io change only while disabled;
// - a port's addr_* change only while no subsystem is linked (the port is "enabled");
// - attr_allow_any_host=1 is refused while allowed_hosts has links, and links are refused while
//   it is 1;
// - attr_cntlid_min must stay below attr_cntlid_max at every step;
// - removing a host from allowed_hosts does not disconnect it: when a host loses access, the
//   subsystem is unlinked from its port and linked again, which drops every controller of that
//   subsystem on that port. Only then: a no-op never disturbs connected hosts.
// Ownership: subsystems whose NQN starts with the cluster's volume prefix, ports whose id is in
// the volume port range, and host entries Strata created (the caller tracks those). Everything
// else is left alone, except links from anywhere to a Strata subsystem that is not desired there.
import {
  paths,
  type DesiredExport,
  type NvmetOp,
  type NvmetTree,
  type PortAttribute,
  type SubsystemAttribute,
} from './nvmet-model.js';
import { simulate, workCopy, type WorkTree } from './nvmet-simulator.js';

export interface Ownership {
  /** `<cluster subsystemNQN>:vol:` */
  readonly subsystemPrefix: string;
  readonly portIdMin: number;
  readonly portIdMax: number;
  /** The replication port's id (outside the volume range), when this node has one. */
  readonly replicationPortId?: number;
  /** Host entries Strata created (only those are ever removed). */
  readonly hosts: ReadonlySet<string>;
}

export interface PlanInput {
  readonly desired: readonly DesiredExport[];
  readonly observed: NvmetTree;
  readonly owned: Ownership;
  /**
   * Strata subsystems to leave exactly as they are: their volume is still assigned but could
   * not be prepared this pass (e.g. the pool failed). Never torn down for that.
   */
  readonly keep?: ReadonlySet<string>;
  /** Subsystems whose port link must be cycled (a revocation that a crash interrupted). */
  readonly pendingRelink?: ReadonlySet<string>;
  /** Subsystems whose namespace must re-read the size of its backing (it grew). */
  readonly pendingRevalidate?: ReadonlySet<string>;
  /**
   * In-band authentication: the DH-HMAC-CHAP keys a new host entry gets right after its mkdir,
   * before anything links it (host-auth.ts; existing entries are kept current by the reconciler).
   */
  readonly hostKeys?: (host: string) => { readonly key: string; readonly ctrlKey: string } | undefined;
}

export interface NvmetPlan {
  readonly ops: readonly NvmetOp[];
  /** Host entries the plan creates (to be recorded as Strata's before applying). */
  readonly createdHosts: readonly string[];
  /** Host entries the plan removes. */
  readonly removedHosts: readonly string[];
  /** Subsystems whose port link the plan cycles (or links fresh) to drop revoked hosts. */
  readonly relinked: readonly string[];
  /** Subsystems whose namespace re-reads its size in this plan (revalidate_size or enable). */
  readonly revalidated: readonly string[];
}

const bool = (b: boolean) => (b ? '1' : '0');
const sameUuid = (observed: string | undefined, desired: string) => observed !== undefined && observed.toLowerCase() === desired.toLowerCase();

/** The volume a Strata subsystem serves: its host path `<prefix><volume>` or a copy `<prefix><volume>:rep:<node>`. */
export function volumeOfNqn(nqn: string, prefix: string): string | undefined {
  return nqn.startsWith(prefix) ? nqn.slice(prefix.length).split(':')[0] : undefined;
}

/**
 * TLS on a port (written after addr_trtype: the kernel takes addr_tsas on TCP ports only).
 * Writing addr_tsas tls1.3 makes addr_treq "required" and writing "none" makes it "not
 * specified" (6.12); treq is written too so that a port an operator set to "not required"
 * (TLS optional) is required again. Without TLS wanted, a kernel without the attribute (6.1)
 * is left alone.
 */
function portSecurity(tls: boolean, observedTsas: string | undefined): [PortAttribute, string][] {
  if (tls) return [['addr_tsas', 'tls1.3'], ['addr_treq', 'required']];
  return observedTsas === undefined ? [] : [['addr_tsas', 'none']];
}

/**
 * A volume's host-path export under in-band authentication: open to any host (ALLOW_ANY) means
 * open to the trusted hosts, each with its secret (nvmet skips authentication entirely for
 * attr_allow_any_host=1). With TLS required on volume ports (nvme-tcp-tls.ts), its port admits
 * TLS 1.3 connections only. Replication legs are not host paths and keep plain ports.
 */
export function withHostAuth(
  d: DesiredExport,
  auth: { readonly enabled: boolean; readonly hosts: ReadonlyMap<string, unknown>; readonly tls?: { readonly required: boolean } },
): DesiredExport {
  const tls = auth.tls?.required ? { ...d, port: { ...d.port, tls: true } } : d;
  if (!auth.enabled || !tls.allowAnyHost) return tls;
  return { ...tls, allowAnyHost: false, allowedHosts: [...auth.hosts.keys()].sort() };
}

export function planNvmet(input: PlanInput): NvmetPlan {
  const { owned } = input;
  const keep = input.keep ?? new Set<string>();
  const pendingRelink = input.pendingRelink ?? new Set<string>();
  const pendingRevalidate = input.pendingRevalidate ?? new Set<string>();
  const work: WorkTree = workCopy(input.observed);
  const ops: NvmetOp[] = [];
  const emit = (op: NvmetOp) => {
    ops.push(op);
    simulate(work, op);
  };
  const createdHosts: string[] = [];
  const removedHosts: string[] = [];
  const relinked: string[] = [];
  const revalidated: string[] = [];

  const desired = [...input.desired].sort((a, b) => (a.nqn < b.nqn ? -1 : a.nqn > b.nqn ? 1 : 0));
  const desiredByNqn = new Map(desired.map((d) => [d.nqn, d]));
  const desiredPortIds = new Set(desired.map((d) => d.port.id));
  const isOwnedSubsystem = (nqn: string) => nqn.startsWith(owned.subsystemPrefix);
  const isOwnedPort = (id: number) => (id >= owned.portIdMin && id <= owned.portIdMax) || id === owned.replicationPortId;
  const volumeOf = (nqn: string) => volumeOfNqn(nqn, owned.subsystemPrefix);
  const tag = (nqn: string) => {
    const v = volumeOf(nqn);
    return v === undefined ? {} : { volume: v };
  };

  // --- Teardown, in reverse order -------------------------------------------------------------
  // 1. Links of Strata subsystems that are not desired where they are (any port).
  for (const port of [...work.ports.values()].sort((a, b) => a.id - b.id)) {
    for (const nqn of [...port.subsystems].sort()) {
      if (!isOwnedSubsystem(nqn) || keep.has(nqn)) continue;
      if (desiredByNqn.get(nqn)?.port.id === port.id) continue;
      emit({ op: 'unlink', path: paths.portSubsystem(port.id, nqn), ...tag(nqn) });
    }
  }
  // 2. Strata ports nobody wants any more, unless something foreign still hangs on them.
  for (const port of [...work.ports.values()].sort((a, b) => a.id - b.id)) {
    if (!isOwnedPort(port.id) || desiredPortIds.has(port.id)) continue;
    if (port.subsystems.size > 0 || port.referrals.length > 0) continue;
    for (const group of [...port.anaGroups.keys()].filter((g) => g !== 1).sort((a, b) => a - b)) {
      emit({ op: 'rmdir', path: paths.anaGroup(port.id, group) });
    }
    emit({ op: 'rmdir', path: paths.port(port.id) });
  }
  // 3. Strata subsystems of volumes no longer assigned here.
  for (const sub of [...work.subsystems.values()].sort((a, b) => (a.nqn < b.nqn ? -1 : 1))) {
    if (!isOwnedSubsystem(sub.nqn) || desiredByNqn.has(sub.nqn) || keep.has(sub.nqn)) continue;
    const t = tag(sub.nqn);
    for (const host of [...sub.allowedHosts].sort()) emit({ op: 'unlink', path: paths.allowedHost(sub.nqn, host), ...t });
    for (const ns of [...sub.namespaces.values()].sort((a, b) => a.nsid - b.nsid)) {
      if (ns.attrs['enable'] === '1') emit({ op: 'write', path: paths.namespaceAttr(sub.nqn, ns.nsid, 'enable'), value: '0', ...t });
      emit({ op: 'rmdir', path: paths.namespace(sub.nqn, ns.nsid), ...t });
    }
    emit({ op: 'rmdir', path: paths.subsystem(sub.nqn), ...t });
  }

  // --- Creation and update, in forward order ---------------------------------------------------
  // 4. Host entries every desired ACL needs.
  const neededHosts = new Set(desired.flatMap((d) => (d.allowAnyHost ? [] : d.allowedHosts)));
  for (const host of [...neededHosts].sort()) {
    if (work.hosts.has(host)) continue;
    emit({ op: 'mkdir', path: paths.host(host) });
    createdHosts.push(host);
    const keys = input.hostKeys?.(host);
    if (keys?.key) emit({ op: 'write', path: `${paths.host(host)}/dhchap_key`, value: keys.key });
    if (keys?.ctrlKey) emit({ op: 'write', path: `${paths.host(host)}/dhchap_ctrl_key`, value: keys.ctrlKey });
  }

  // 5. Each volume: subsystem, namespace, ACL, port, link.
  for (const d of desired) {
    const t = { volume: d.volumeUUID };
    const nqn = d.nqn;
    if (!work.subsystems.has(nqn)) emit({ op: 'mkdir', path: paths.subsystem(nqn), ...t });
    const sub = work.subsystems.get(nqn)!;
    const writeSub = (attr: SubsystemAttribute, value: string) => {
      if (sub.attrs[attr] !== value) emit({ op: 'write', path: paths.subsystemAttr(nqn, attr), value, ...t });
    };
    writeSub('attr_serial', d.serial);
    writeSub('attr_model', d.model);
    // Keep min < max at every step: raise max before min when the new window starts above it.
    const currentMax = Number(sub.attrs['attr_cntlid_max'] ?? NaN);
    if (Number.isFinite(currentMax) && d.cntlidMin >= currentMax) {
      writeSub('attr_cntlid_max', String(d.cntlidMax));
      writeSub('attr_cntlid_min', String(d.cntlidMin));
    } else {
      writeSub('attr_cntlid_min', String(d.cntlidMin));
      writeSub('attr_cntlid_max', String(d.cntlidMax));
    }

    // Namespace: one per volume subsystem; any other nsid is stale.
    for (const ns of [...sub.namespaces.values()].sort((a, b) => a.nsid - b.nsid)) {
      if (ns.nsid === d.namespace.nsid) continue;
      if (ns.attrs['enable'] === '1') emit({ op: 'write', path: paths.namespaceAttr(nqn, ns.nsid, 'enable'), value: '0', ...t });
      emit({ op: 'rmdir', path: paths.namespace(nqn, ns.nsid), ...t });
    }
    const nsid = d.namespace.nsid;
    if (!sub.namespaces.has(nsid)) emit({ op: 'mkdir', path: paths.namespace(nqn, nsid), ...t });
    const ns = sub.namespaces.get(nsid)!;
    const immutable: [('device_path' | 'device_uuid' | 'device_nguid' | 'buffered_io'), string, boolean][] = [
      ['device_path', d.namespace.devicePath, ns.attrs['device_path'] === d.namespace.devicePath],
      ['device_uuid', d.namespace.uuid, sameUuid(ns.attrs['device_uuid'], d.namespace.uuid)],
      // The NGUID is the same 16 bytes; the kernel reads and prints it in UUID form.
      ['device_nguid', d.namespace.uuid, sameUuid(ns.attrs['device_nguid'], d.namespace.uuid)],
      ['buffered_io', bool(d.namespace.bufferedIo), ns.attrs['buffered_io'] === bool(d.namespace.bufferedIo)],
    ];
    const changes = immutable.filter(([, , same]) => !same);
    let enabled = ns.attrs['enable'] === '1';
    if (enabled && changes.length > 0) {
      emit({ op: 'write', path: paths.namespaceAttr(nqn, nsid, 'enable'), value: '0', ...t });
      enabled = false;
    }
    for (const [attr, value] of changes) emit({ op: 'write', path: paths.namespaceAttr(nqn, nsid, attr), value, ...t });
    if (ns.attrs['ana_grpid'] !== String(d.namespace.anaGroupId)) {
      emit({ op: 'write', path: paths.namespaceAttr(nqn, nsid, 'ana_grpid'), value: String(d.namespace.anaGroupId), ...t });
    }
    if (!enabled) {
      emit({ op: 'write', path: paths.namespaceAttr(nqn, nsid, 'enable'), value: '1', ...t });
      if (pendingRevalidate.has(nqn)) revalidated.push(nqn);
    } else if (pendingRevalidate.has(nqn)) {
      // Grown backing: the kernel re-reads the size and raises a namespace-changed AEN, without
      // the disable/enable that would make hosts drop the namespace.
      emit({ op: 'write', path: paths.namespaceAttr(nqn, nsid, 'revalidate_size'), value: '1', ...t });
      revalidated.push(nqn);
    }

    // Whether a host that holds access loses it: its connections survive the ACL change, so the
    // subsystem's port link is cycled (which drops every controller of the subsystem on the port).
    const wantedHosts = new Set(d.allowedHosts);
    const lostAccess = !d.allowAnyHost && (sub.attrs['attr_allow_any_host'] === '1' || [...sub.allowedHosts].some((h) => !wantedHosts.has(h)));
    // The ACL. When the link is cycled, the ACL changes while it is down: a host the change admits
    // cannot connect before the cut and be dropped by it (a new primary dialling a replica's export
    // as the export was relinked to it got a connection the cut then killed; md found the leg faulty).
    const applyAcl = () => {
      if (d.allowAnyHost) {
        for (const host of [...sub.allowedHosts].sort()) emit({ op: 'unlink', path: paths.allowedHost(nqn, host), ...t });
        writeSub('attr_allow_any_host', '1');
      } else {
        writeSub('attr_allow_any_host', '0');
        for (const host of [...sub.allowedHosts].sort()) {
          if (!wantedHosts.has(host)) emit({ op: 'unlink', path: paths.allowedHost(nqn, host), ...t });
        }
        for (const host of d.allowedHosts) {
          if (!sub.allowedHosts.has(host)) emit({ op: 'symlink', path: paths.allowedHost(nqn, host), target: paths.host(host), ...t });
        }
      }
    };
    const cycle = (work.ports.get(d.port.id)?.subsystems.has(nqn) ?? false) && (lostAccess || pendingRelink.has(nqn));
    if (!cycle) applyAcl();

    // Port, ANA state, link.
    const id = d.port.id;
    if (!work.ports.has(id)) emit({ op: 'mkdir', path: paths.port(id), ...t });
    const port = work.ports.get(id)!;
    const address: [PortAttribute, string][] = [
      ['addr_trtype', d.port.trtype],
      ['addr_adrfam', d.port.adrfam],
      ['addr_traddr', d.port.traddr],
      ['addr_trsvcid', d.port.trsvcid],
      ...portSecurity(d.port.tls ?? false, port.attrs['addr_tsas']),
    ];
    const addressChanges = address.filter(([attr, value]) => port.attrs[attr] !== value);
    if (addressChanges.length > 0 && port.subsystems.size > 0) {
      // The address is frozen while anything is linked; foreign links on a Strata port are
      // not restored.
      for (const linked of [...port.subsystems].sort()) emit({ op: 'unlink', path: paths.portSubsystem(id, linked), ...t });
    } else if (cycle) {
      emit({ op: 'unlink', path: paths.portSubsystem(id, nqn), ...t });
    }
    if (cycle) applyAcl();
    for (const [attr, value] of addressChanges) emit({ op: 'write', path: paths.portAttr(id, attr), value, ...t });
    const group = d.namespace.anaGroupId;
    if (!port.anaGroups.has(group)) emit({ op: 'mkdir', path: paths.anaGroup(id, group), ...t });
    if (port.anaGroups.get(group) !== d.port.anaState) emit({ op: 'write', path: paths.anaState(id, group), value: d.port.anaState, ...t });
    if (!port.subsystems.has(nqn)) emit({ op: 'symlink', path: paths.portSubsystem(id, nqn), target: paths.subsystem(nqn), ...t });
    if (cycle || pendingRelink.has(nqn)) relinked.push(nqn);
  }

  // 6. Host entries Strata created that nothing links to any more.
  const linkedHosts = new Set([...work.subsystems.values()].flatMap((s) => [...s.allowedHosts]));
  for (const host of [...work.hosts].sort()) {
    if (!owned.hosts.has(host) || neededHosts.has(host) || linkedHosts.has(host)) continue;
    emit({ op: 'rmdir', path: paths.host(host) });
    removedHosts.push(host);
  }

  return { ops, createdHosts, removedHosts, relinked, revalidated };
}
