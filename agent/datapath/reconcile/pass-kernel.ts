// Pass, phase 2: the kernel target (pass.ts).
//   2a. IP ACLs, before the exports change: a new port is filtered before nvmet listens on it.
//   2b. nvmet: the whole tree read in a full pass, otherwise the objects of the volumes that
//       change over the tree kept from earlier passes (which the periodic full pass checks);
//       planned against what is really there, applied, and what the operations touched read back.
import { stopwatch } from '../../../lib/stopwatch.js';
import { DEFAULT_REPLICATION_PORT } from '../../../lib/replication.js';
import { HOST_AUTH_DISABLED, hostKeysFor, hostKeyWrites, LOCKED_OUT_KEY, type HostKeys } from '../kernel/host-auth.js';
import type { IpAclPassResult, WantedIpAcl } from '../kernel/ip-acl-enforcer.js';
import { describeOp, objectOfOp, paths, type DesiredExport, type NvmetTree } from '../kernel/nvmet-model.js';
import { planNvmet, volumeOfNqn, withHostAuth, type NvmetPlan, type Ownership } from '../kernel/nvmet-plan.js';
import { replaceObjects, treeOf, workCopy, type WorkTree } from '../kernel/nvmet-simulator.js';
import type { Backings } from './pass-backings.js';
import { fenced, PassPreempted, type PassContext, type PassScope } from './pass.js';

/** Configfs operations applied between two turns of the event loop. */
const OPS_PER_TURN = 8;

/** What phase 2a hands on: the exports the IP ACLs let through. */
export interface Exports {
  /** port → the IP ACL its volume wants. */
  readonly wantedIpAcls: ReadonlyMap<number, WantedIpAcl>;
  /** What enforcing them did: changes applied, volumes whose IP ACL is not enforced (reported Failed). */
  readonly ipAclPass: IpAclPassResult;
  /** Every subsystem wanted on this node: host paths (fenced, with host authentication) and replication exports. */
  readonly desired: readonly DesiredExport[];
  /** The DH-HMAC-CHAP keys of a host entry, for the hosts of the volumes' ACLs. */
  readonly hostKeys: (host: string) => HostKeys | undefined;
}

/**
 * Phase 2a. A volume whose ACL cannot be enforced keeps its export exactly as it is (a new one is
 * not created: it joins `backings.keptVolumes`) and is reported Failed. An incremental pass that
 * wants the ports and ACLs the last pass left in place reads no table (IpAclEnforcer.enforce);
 * a full pass always checks it.
 */
export async function enforceIpAcls(ctx: PassContext, pass: PassScope, backings: Backings): Promise<Exports> {
  const { ipAcls, hostAuth, replicas } = ctx.options;
  const wantedIpAcls = new Map<number, WantedIpAcl>(backings.preparedNow.map((p) => [p.desired.port.id, p.ipAcl]));
  const ipAclPass = await ipAcls.enforce(wantedIpAcls, { check: pass.full });
  const desired: DesiredExport[] = [];
  const auth = hostAuth?.current() ?? HOST_AUTH_DISABLED;
  const volumeHosts = new Set<string>();
  for (const p of backings.preparedNow) {
    if (ipAclPass.failed.has(p.desired.volumeUUID)) backings.keptVolumes.add(p.desired.volumeUUID);
    else {
      const hostPath = withHostAuth(fenced(replicas, p.desired), auth);
      for (const h of hostPath.allowedHosts) volumeHosts.add(h);
      desired.push(hostPath, ...p.extra);
    }
  }
  const hostKeys = (host: string): HostKeys | undefined => (volumeHosts.has(host) ? hostKeysFor(auth, host, LOCKED_OUT_KEY) : undefined);
  return { wantedIpAcls, ipAclPass, desired, hostKeys };
}

/** The kernel target as phase 2b read it, before planning. */
export interface TargetRead {
  /** The work tree read (the context's `memory.observed`), updated again by the read-back. */
  readonly observed: WorkTree;
  /** The tree the plan starts from. */
  readonly tree: NvmetTree;
  /** Subsystems left exactly as they are (the kept volumes'). */
  readonly keep: ReadonlySet<string>;
  /** What of the kernel target is Strata's (its subsystems, ports and host entries). */
  readonly owned: Ownership;
  /** DataPathState changed (pending marks of subsystems gone) and is not saved yet. */
  readonly stateChanged: boolean;
}

/**
 * Phase 2b, reading: the whole tree in a full pass (or when none is kept), which `preempt`
 * aborts (undefined: the pass gives way); otherwise the objects of the volumes that change
 * (readChanged).
 */
export async function readTarget(ctx: PassContext, pass: PassScope, backings: Backings, exports: Exports, preempt: AbortSignal | undefined): Promise<TargetRead | undefined> {
  const { memory } = ctx;
  const { settings, replicas, state } = ctx.options;
  const { prefix, configfs } = pass;
  const { keptVolumes } = backings;
  const { desired } = exports;
  let observed = memory.observed;
  if (pass.full || !observed) {
    try {
      observed = memory.observed = workCopy(await configfs.read(preempt));
    } catch (err) {
      if (!(err instanceof PassPreempted)) throw err;
      return undefined;
    }
  } else {
    await readChanged(pass, backings, desired, observed);
  }
  const tree = treeOf(observed);
  const keep = new Set([...tree.subsystems.keys()].filter((nqn) => keptVolumes.has(volumeOfNqn(nqn, prefix) ?? '')));
  for (const v of keptVolumes) keep.add(`${prefix}${v}`);
  const owned = {
    subsystemPrefix: prefix,
    portIdMin: settings.portIdMin,
    portIdMax: settings.portIdMax,
    ...(replicas ? { replicationPortId: settings.replicationPort ?? DEFAULT_REPLICATION_PORT } : {}),
    hosts: state.ownedHosts,
  };
  let stateChanged = false;
  const desiredNqns = new Set(desired.map((d) => d.nqn));
  for (const set of [state.pendingRelink, state.pendingRevalidate]) {
    for (const nqn of set) {
      if (!desiredNqns.has(nqn) && !keep.has(nqn)) {
        set.delete(nqn);
        stateChanged = true;
      }
    }
  }
  return { observed, tree, keep, owned, stateChanged };
}

/** What phase 2b hands on. */
export interface KernelTarget {
  /** The tree before applying, and after (read back). */
  readonly tree: NvmetTree;
  readonly after: NvmetTree;
  readonly keep: ReadonlySet<string>;
  readonly owned: Ownership;
  readonly plan: NvmetPlan;
  /** volume → the error of its first failed operation (its other operations were skipped). */
  readonly opFailures: ReadonlyMap<string, string>;
  /** Failed configfs operations, host keys included. */
  readonly failedOperations: number;
}

/**
 * Phase 2b, applying: plans against the tree read, writes ahead to DataPathState what the tree
 * cannot tell, applies, reads back what the operations touched, keeps the host entries' keys
 * current, and releases the IP ACLs of ports gone.
 */
export async function applyTarget(ctx: PassContext, pass: PassScope, exports: Exports, read: TargetRead): Promise<KernelTarget> {
  const { state, logger: log, ipAcls } = ctx.options;
  const { prefix, configfs, timer } = pass;
  const { desired, hostKeys } = exports;
  const { observed, tree, keep, owned } = read;
  let stateChanged = read.stateChanged;
  const plan = planNvmet({
    desired,
    observed: tree,
    owned,
    keep,
    pendingRelink: state.pendingRelink,
    pendingRevalidate: state.pendingRevalidate,
    hostKeys,
  });
  if (recordAhead(state, plan)) stateChanged = false;
  timer.lap('plan');
  const opFailures = new Map<string, string>();
  const failedPaths = new Set<string>();
  let failedOperations = 0;
  for (const [index, op] of plan.ops.entries()) {
    if (ctx.stopped()) break;
    if (op.volume && opFailures.has(op.volume)) continue;
    // Operations are synchronous system calls: let the event loop (etcd keepalives, gRPC) run.
    if (index % OPS_PER_TURN === OPS_PER_TURN - 1) await new Promise((resolve) => setImmediate(resolve));
    try {
      await configfs.apply(op);
      log.debug({ op: describeOp(op), volumeUUID: op.volume }, 'configfs operation applied');
    } catch (err) {
      failedOperations += 1;
      failedPaths.add(op.path);
      log.warn({ err: (err as Error).message, volumeUUID: op.volume }, 'configfs operation failed');
      if (op.volume) opFailures.set(op.volume, (err as Error).message);
    }
  }
  timer.lap('apply');
  const okVolume = (nqn: string) => {
    const v = volumeOfNqn(nqn, prefix);
    return v !== undefined && !opFailures.has(v);
  };
  for (const h of plan.removedHosts) {
    if (!failedPaths.has(`hosts/${h}`)) {
      state.ownedHosts.delete(h);
      stateChanged = true;
    }
  }
  for (const n of plan.relinked) if (okVolume(n) && state.pendingRelink.delete(n)) stateChanged = true;
  for (const n of plan.revalidated) if (okVolume(n) && state.pendingRevalidate.delete(n)) stateChanged = true;
  // Read back what the operations touched (nothing else changed by this pass's hand).
  if (plan.ops.length > 0) {
    const subsystems = new Set<string>();
    const ports = new Set<number>();
    for (const op of plan.ops) {
      const object = objectOfOp(op);
      if (object && 'subsystem' in object) subsystems.add(object.subsystem);
      else if (object && 'port' in object) ports.add(object.port);
    }
    replaceObjects(observed, await configfs.readObjects({ subsystems, ports }));
  }
  // Keys of host entries that already existed (enable, disable, rotation): new connects need
  // the new key; connected hosts stay connected (the kernel re-authenticates only when asked).
  for (const host of [...state.ownedHosts].sort()) {
    const wanted = hostKeys(host);
    if (!wanted) continue;
    for (const op of await hostKeyWrites(configfs.root, host, wanted)) {
      try {
        await configfs.apply(op);
      } catch (err) {
        failedOperations += 1;
        log.warn({ err: (err as Error).message, host }, 'setting a host entry\'s DH-HMAC-CHAP key failed');
      }
    }
  }
  timer.lap('readBack');
  const after = plan.ops.length > 0 ? treeOf(observed) : tree;
  for (const h of [...state.ownedHosts]) {
    if (!after.hosts.has(h)) {
      state.ownedHosts.delete(h);
      stateChanged = true;
    }
  }
  if (pruneReplicatedPorts(ctx, pass, after)) stateChanged = true;
  for (const [volumeUUID, mark] of [...state.rollbacksDone]) {
    const stillPending = pass.entries.some((e) => e.volumeUUID === volumeUUID && e.assignment && `${e.assignment.generation}:${e.assignment.rollbackSnapshotUUID}` === mark);
    if (!stillPending) {
      state.rollbacksDone.delete(volumeUUID);
      stateChanged = true;
    }
  }
  if (stateChanged) state.save();
  // IP ACLs of ports that are gone from the kernel target now and wanted by no volume.
  await ipAcls.release(new Set(exports.wantedIpAcls.keys()), new Set(after.ports.keys()));
  return { tree, after, keep, owned, plan, opFailures, failedOperations };
}

/**
 * An incremental pass reads back the objects of the volumes that change, over the tree kept:
 * their subsystems, their ports now and before, and Strata subsystems nobody wants (left by a
 * failed teardown), whose volumes join `backings.touchedVolumes`.
 */
async function readChanged(pass: PassScope, backings: Backings, desired: readonly DesiredExport[], observed: WorkTree): Promise<void> {
  const { prefix, configfs } = pass;
  const { keptVolumes, touchedVolumes } = backings;
  // Strata subsystems nobody wants (left by a failed teardown): read back before removing.
  const wanted = new Set(desired.map((d) => d.nqn));
  for (const nqn of observed.subsystems.keys()) {
    const volumeUUID = volumeOfNqn(nqn, prefix);
    if (volumeUUID && !keptVolumes.has(volumeUUID) && !wanted.has(nqn)) touchedVolumes.add(volumeUUID);
  }
  const ports = new Set<number>();
  for (const d of desired) if (touchedVolumes.has(d.volumeUUID)) ports.add(d.port.id);
  for (const volumeUUID of touchedVolumes) {
    const old = backings.previousPorts.get(volumeUUID);
    if (old !== undefined) ports.add(old);
    for (const port of observed.ports.values()) {
      if ([...port.subsystems].some((nqn) => volumeOfNqn(nqn, prefix) === volumeUUID)) ports.add(port.id);
    }
  }
  const subsystems = [...touchedVolumes].flatMap((v) => nqnsOf(observed, v, prefix, desired));
  replaceObjects(observed, await configfs.readObjects({ subsystems, ports }));
}

/** The subsystems of a volume on this node: desired now, or present in the kernel tree. */
function nqnsOf(observed: WorkTree, volumeUUID: string, prefix: string, desired: readonly DesiredExport[]): string[] {
  const nqns = new Set([`${prefix}${volumeUUID}`]);
  for (const d of desired) if (d.volumeUUID === volumeUUID) nqns.add(d.nqn);
  for (const nqn of observed.subsystems.keys()) if (volumeOfNqn(nqn, prefix) === volumeUUID) nqns.add(nqn);
  return [...nqns];
}

/**
 * The ports of this pass's replicated volumes' assignments (in the agent's volume port range,
 * whatever their role: a replica's port turns optimized the moment it is promoted).
 */
function replicatedPortsOf(ctx: PassContext, pass: PassScope): Set<number> {
  const { portIdMin, portIdMax } = ctx.options.settings;
  const ports = new Set<number>();
  for (const e of pass.entries) {
    const port = e.assignment?.replication ? e.assignment.port : undefined;
    if (port !== undefined && Number.isSafeInteger(port) && port >= portIdMin && port <= portIdMax) ports.add(port);
  }
  return ports;
}

/**
 * First thing of every pass, before any step that can make a host path ANA-optimized (the
 * promotion's early write in the backings phase, the plan): the ports of replicated volumes go
 * into DataPathState, saved at once. They are what the exit fence turns inaccessible once the
 * agent process has ended (systemd/strata-agent-exit-fence): a primary's kernel would otherwise keep serving
 * after its agent died, beside the copy promoted when its lease expired.
 */
export function recordReplicatedPorts(ctx: PassContext, pass: PassScope): void {
  ctx.options.state.recordReplicatedPorts(replicatedPortsOf(ctx, pass));
}

/**
 * After applying: a recorded port leaves DataPathState once no replicated volume's assignment
 * wants it and the kernel serves nothing of a replicated volume there any more (the port is gone,
 * or links only single copies' host paths: a port handed to a new single-copy volume, which the
 * exit fence must not cut off). A port the kernel may still serve a replicated volume on stays
 * listed: listing one too many costs nothing, missing one leaves a dead agent's path optimized.
 * True when something was dropped (not saved yet).
 */
function pruneReplicatedPorts(ctx: PassContext, pass: PassScope, after: NvmetTree): boolean {
  const { replicatedPorts } = ctx.options.state;
  const wanted = replicatedPortsOf(ctx, pass);
  const singleCopies = new Set(pass.entries.filter((e) => e.assignment && !e.assignment.replication).map((e) => `${pass.prefix}${e.volumeUUID}`));
  let dropped = false;
  for (const id of [...replicatedPorts]) {
    if (wanted.has(id)) continue;
    const port = after.ports.get(id);
    if (port && port.subsystems.some((nqn) => !singleCopies.has(nqn))) continue;
    replicatedPorts.delete(id);
    dropped = true;
  }
  return dropped;
}

/**
 * The plan's new host entries and revocations (links to cut and make again) go into the agent's
 * state before any of its operations: a crash in between must not forget a host entry Strata
 * made, nor a revocation half done. True when it saved.
 */
function recordAhead(state: PassContext['options']['state'], plan: { readonly createdHosts: readonly string[]; readonly relinked: readonly string[] }): boolean {
  if (plan.createdHosts.length === 0 && plan.relinked.every((n) => state.pendingRelink.has(n))) return false;
  for (const h of plan.createdHosts) state.ownedHosts.add(h);
  for (const n of plan.relinked) state.pendingRelink.add(n);
  state.save();
  return true;
}

/**
 * A copy's replication export admits a promoted primary at once, ahead of the pass's pool and
 * kernel phases (0.3 s under emulation: the block stack's checks, the configfs read, the plan):
 * the new primary dials every in-sync copy as soon as it sees the promotion, and assembles its
 * mirror only once they answer (docs/replication.md, "Failover"). It is the plan the pass would
 * make, for this export alone, over the tree the last pass left: the port link is cut (which
 * drops the old primary's connections), the ACL swapped, the link made again (nvmet-plan.ts, in
 * that order), the host entry made first when missing, each written ahead to DataPathState as the
 * pass does. Only when that is all the export needs: anything else is left to the pass, which
 * follows, reads the export back and finds nothing more to do. False when nothing was applied.
 */
export async function admitNewPrimaryNow(ctx: PassContext, pass: PassScope, desired: DesiredExport): Promise<boolean> {
  const { state, settings, logger: log } = ctx.options;
  const observed = ctx.memory.observed;
  if (!observed) return false;
  // Milliseconds per step, in the log: this is on the failover's critical path.
  const lap = stopwatch();
  const whole = treeOf(observed);
  const port = whole.ports.get(desired.port.id);
  const sub = whole.subsystems.get(desired.nqn);
  if (!port || !sub || !port.subsystems.includes(desired.nqn)) return false;
  // This export and its port, with no other subsystem linked: the plan cannot touch anything else.
  const scoped: NvmetTree = {
    hosts: whole.hosts,
    subsystems: new Map([[desired.nqn, sub]]),
    ports: new Map([[port.id, { ...port, subsystems: [desired.nqn] }]]),
  };
  const plan = planNvmet({
    desired: [desired],
    observed: scoped,
    // No host entry is Strata's to remove here (the old primary's may serve other exports).
    owned: { subsystemPrefix: pass.prefix, portIdMin: settings.portIdMin, portIdMax: settings.portIdMax, replicationPortId: desired.port.id, hosts: new Set() },
    pendingRelink: state.pendingRelink,
  });
  const aclOnly = plan.ops.every(
    (op) =>
      (op.op === 'mkdir' && op.path.startsWith('hosts/')) ||
      ((op.op === 'symlink' || op.op === 'unlink') && (op.path === paths.portSubsystem(port.id, desired.nqn) || op.path.startsWith(`subsystems/${desired.nqn}/allowed_hosts/`))),
  );
  if (plan.ops.length === 0 || !aclOnly || plan.removedHosts.length > 0) return false;
  lap('plan');
  recordAhead(state, plan);
  lap('writeAhead');
  try {
    for (const op of plan.ops) {
      await pass.configfs.apply(op);
      log.debug({ op: describeOp(op), volumeUUID: desired.volumeUUID }, 'configfs operation applied');
    }
    lap('apply');
  } finally {
    replaceObjects(observed, await pass.configfs.readObjects({ subsystems: [desired.nqn], ports: [port.id] }));
  }
  if (plan.relinked.includes(desired.nqn) && state.pendingRelink.delete(desired.nqn)) state.save();
  const ms = lap('readBack');
  log.info({ volumeUUID: desired.volumeUUID, admitted: desired.allowedHosts, ms }, 'promotion: the replication export admits the new primary');
  return true;
}
