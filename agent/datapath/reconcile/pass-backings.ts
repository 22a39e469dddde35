// Pass, phase 1: backings (pass.ts). Checks that span volumes run over all of them; the pool
// work runs only for volumes whose assignment changed since it was last prepared (every volume in
// a full pass).
import { mapLimit } from '../../../lib/concurrency.js';
import { volumeSubsystemNQN } from '../../../lib/contract/nqn.js';
import type { VolumeAssignment } from '../../../lib/records.js';
import { replicaBackingBytes, replicationSubsystemNQN } from '../../../lib/replication.js';
import { ipAclOf, type IpAcl } from '../kernel/ip-acl.js';
import { paths, type DesiredExport } from '../kernel/nvmet-model.js';
import type { ClusterFacts } from '../pool/node-pools.js';
import { NotReadyYet } from '../replication/replica-manager.js';
import { assignmentProblem, desiredExportOf, replicationExportOf, type ExportSettings } from './desired-state.js';
import { admitNewPrimaryNow } from './pass-kernel.js';
import {
  BACKINGS_PREPARED_AT_ONCE,
  failedStatus,
  fenced,
  type AssignmentEntry,
  type PassContext,
  type PassMemory,
  type PassScope,
  type PreparedVolume,
} from './pass.js';
import type { VolumeStatusEntry } from './volume-report.js';

/** An assignment that passed every check. */
interface ValidAssignment {
  /** volume/node */
  readonly key: string;
  readonly entry: AssignmentEntry;
  readonly assignment: VolumeAssignment;
  /** The assignment's JSON: a prepared volume is prepared again when it changes. */
  readonly fingerprint: string;
}

/** What the checks make of the assignments, before any pool work. */
interface CheckedAssignments {
  /** volume/node → the status of an assignment that cannot be served. */
  readonly results: Map<string, VolumeStatusEntry>;
  /** Volumes whose kernel objects (host path and replication export alike) stay exactly as they are. */
  readonly keptVolumes: Set<string>;
  readonly valid: readonly ValidAssignment[];
}

/** What phase 1 hands on. */
export interface Backings {
  /** volume/node → the status decided already: assignments that cannot be served, backings that failed. */
  readonly results: Map<string, VolumeStatusEntry>;
  /** Volumes whose kernel objects stay exactly as they are (phase 2a adds those whose IP ACL failed). */
  readonly keptVolumes: Set<string>;
  /**
   * What changes this pass: volumes prepared afresh, and volumes prepared before that are gone or
   * no longer valid (phase 2b adds Strata subsystems nobody wants). In an incremental pass only
   * their kernel objects are read back.
   */
  readonly touchedVolumes: Set<string>;
  /** volume → the port it was prepared with before, for the volumes that changed. */
  readonly previousPorts: ReadonlyMap<string, number>;
  /** The valid volumes whose backing is ready, in assignment order. */
  readonly preparedNow: readonly PreparedVolume[];
  /** How many volumes this pass set out to prepare. */
  readonly preparing: number;
  /** Some volume waits for something outside this node (a replica to come up): try again soon. */
  readonly notReady: boolean;
}

/**
 * Phase 1. With `preempt` (a periodic full pass), the pool work stops when it is aborted; the
 * volumes not prepared yet stay as the last pass left them.
 */
export async function prepareBackings(ctx: PassContext, pass: PassScope, preempt: AbortSignal | undefined): Promise<Backings> {
  const { memory } = ctx;
  const log = ctx.options.logger;
  const { results, keptVolumes, valid } = checkAssignments(pass, ctx.options.settings, memory);
  const validKeys = new Set(valid.map((v) => v.key));
  const touchedVolumes = new Set<string>();
  const previousPorts = new Map<string, number>();
  for (const [key, p] of memory.prepared) {
    if (validKeys.has(key) || memory.frozenNodes.has(p.entry.nodeUUID)) continue;
    memory.prepared.delete(key);
    touchedVolumes.add(p.desired.volumeUUID);
    previousPorts.set(p.desired.volumeUUID, p.desired.port.id);
  }
  const toPrepare = valid.filter((v) => pass.full || memory.prepared.get(v.key)?.fingerprint !== v.fingerprint);
  for (const v of toPrepare) {
    const before = memory.prepared.get(v.key);
    if (before) previousPorts.set(v.entry.volumeUUID, before.desired.port.id);
  }
  // What was prepared before stays until this pass prepares it again: a full pass that gives
  // way leaves every volume as the last pass left it.
  const preempted = () => preempt?.aborted === true;
  let notReady = false;
  // A promotion seen by a copy: its export admits the new primary before anything else of the
  // pass (one volume after the other: they may share the new primary's host entry).
  for (const v of toPrepare) {
    const before = memory.prepared.get(v.key);
    const admitting = !pass.full && before ? exportAdmittingNewPrimary(ctx, pass, v, before) : undefined;
    if (!admitting) continue;
    await admitNewPrimaryNow(ctx, pass, admitting).catch((err: unknown) =>
      log.warn({ err, volumeUUID: v.entry.volumeUUID }, 'admitting the new primary ahead of the pass failed; the pass does it'),
    );
  }
  await mapLimit(toPrepare, BACKINGS_PREPARED_AT_ONCE, async (v) => {
    if (preempted()) return;
    try {
      // A promotion or demotion (only the replica set's part changed) in an incremental pass:
      // the pool work stands as it was; only the block stack changes (the failover's critical path).
      const before = memory.prepared.get(v.key);
      const poolWorkDone = !pass.full && before?.entry.assignment && onlyReplicationChanged(before.entry.assignment, v.assignment) ? before : undefined;
      const prepared = await prepareVolume(ctx, pass, v.entry, v.assignment, v.fingerprint, poolWorkDone);
      memory.prepared.set(v.key, prepared);
      touchedVolumes.add(v.entry.volumeUUID);
      // A replicated volume still growing is served at its old size: the next pass, soon, tries again.
      if (prepared.growing) notReady = true;
      if (poolWorkDone) await serveOptimizedNow(ctx, pass, prepared, poolWorkDone);
    } catch (err) {
      memory.prepared.delete(v.key);
      keptVolumes.add(v.entry.volumeUUID);
      if (err instanceof NotReadyYet) {
        // Not a failure: reported as not served (no status), and tried again soon.
        log.debug({ volumeUUID: v.entry.volumeUUID, reason: err.message }, 'volume not ready to serve yet');
        notReady = true;
      } else {
        results.set(v.key, failedStatus(v.entry, (err as Error).message));
      }
    }
  });
  const preparedNow = valid.map((v) => memory.prepared.get(v.key)).filter((p): p is PreparedVolume => p !== undefined);
  return { results, keptVolumes, touchedVolumes, previousPorts, preparedNow, preparing: toPrepare.length, notReady };
}

/** The checks that span volumes: one node per volume, one volume per port, and each assignment sound. */
function checkAssignments(pass: PassScope, settings: ExportSettings, memory: PassMemory): CheckedAssignments {
  const keptVolumes = new Set<string>();
  const results = new Map<string, VolumeStatusEntry>();
  const seen = new Map<string, string>();
  const portTaken = new Map<number, string>();
  const valid: ValidAssignment[] = [];
  for (const e of pass.entries) {
    const key = `${e.volumeUUID}/${e.nodeUUID}`;
    const a = e.assignment;
    // A stopped node serves nothing (its backings stay: the volume is still assigned); a node
    // being stopped keeps its volumes' kernel objects exactly as they are.
    if (memory.heldNodes.has(e.nodeUUID)) continue;
    if (memory.frozenNodes.has(e.nodeUUID)) {
      keptVolumes.add(e.volumeUUID);
      continue;
    }
    if (!a) {
      results.set(key, failedStatus(e, 'the assignment record is corrupt'));
      keptVolumes.add(e.volumeUUID);
      continue;
    }
    const other = seen.get(e.volumeUUID);
    if (other) {
      results.set(key, failedStatus(e, `volume ${e.volumeUUID} is also assigned to node ${other} of this server; one server serves a volume once`));
      continue;
    }
    seen.set(e.volumeUUID, e.nodeUUID);
    const problem =
      a.volumeUUID !== e.volumeUUID
        ? `the assignment at ${e.volumeUUID} names volume ${a.volumeUUID}`
        : (assignmentProblem(a, pass.cluster, settings) ??
          (portTaken.has(a.port) ? `port ${a.port} is also assigned to volume ${portTaken.get(a.port)}` : undefined));
    if (problem) {
      results.set(key, failedStatus(e, problem));
      keptVolumes.add(e.volumeUUID);
      continue;
    }
    portTaken.set(a.port, a.volumeUUID);
    valid.push({ key, entry: e, assignment: a, fingerprint: JSON.stringify(a) });
  }
  return { results, keptVolumes, valid };
}

/** Whether two assignments of a volume differ only in what a change of its replica set changes. */
function onlyReplicationChanged(a: VolumeAssignment, b: VolumeAssignment): boolean {
  const rest = (x: VolumeAssignment) => JSON.stringify({ ...x, role: '', anaState: '', replication: null });
  return a.replication != null && b.replication != null && rest(a) === rest(b);
}

/**
 * The replication export of a copy that stays a copy while the primary moves (only the replica
 * set changed, and this node exported to another primary before): the export as it must be now.
 */
function exportAdmittingNewPrimary(ctx: PassContext, pass: PassScope, v: ValidAssignment, before: PreparedVolume): DesiredExport | undefined {
  const replication = v.assignment.replication;
  if (!replication || replication.primaryNodeUUID === v.entry.nodeUUID) return undefined;
  if (!before.entry.assignment || !onlyReplicationChanged(before.entry.assignment, v.assignment)) return undefined;
  const nqn = replicationSubsystemNQN(pass.cluster.subsystemNQN, v.entry.volumeUUID, v.entry.nodeUUID);
  const old = before.extra.find((d) => d.nqn === nqn);
  if (!old || (old.allowedHosts.length === 1 && old.allowedHosts[0] === replication.primaryHostNQN)) return undefined;
  return replicationExportOf(v.assignment, { nqn, primaryHostNQN: replication.primaryHostNQN }, before.backing, ctx.options.settings);
}

/** Pool work for one volume: backing, growth, snapshots, rollback (taken from `poolWorkDone` when given), then the block stack. */
async function prepareVolume(ctx: PassContext, pass: PassScope, entry: AssignmentEntry, a: VolumeAssignment, fingerprint: string, poolWorkDone?: PreparedVolume): Promise<PreparedVolume> {
  const { replicas, singles, settings } = ctx.options;
  const { cluster } = pass;
  const { pool, backing, snapshots } = poolWorkDone ?? (await preparePool(ctx, entry, a, cluster));
  const replication = a.replication ?? null;
  let hostPath: { devicePath: string; bufferedIo: boolean } = backing;
  const extra: DesiredExport[] = [];
  let growing: string | undefined;
  let awaiting: string | undefined;
  if (replication) {
    if (!replicas) throw new Error('this agent does not serve replicated volumes');
    // The host namespace re-reads its size only once the device-mapper device under it grew: the
    // mark is written ahead right before that reload (not when the backing grew, which comes
    // first: the mirror may grow passes later), and this pass's kernel phase consumes it.
    const beforeGrowing = () => markRevalidate(ctx, volumeSubsystemNQN(cluster.subsystemNQN, a.volumeUUID));
    const served = await replicas.serve({ volumeUUID: a.volumeUUID, nodeUUID: entry.nodeUUID, sizeBytes: BigInt(a.sizeBytes), replication, backing, qos: a.qos ?? null, beforeGrowing });
    hostPath = { devicePath: served.hostDevicePath, bufferedIo: false };
    if (served.replicationExport) extra.push(replicationExportOf(a, served.replicationExport, backing, settings));
    growing = served.growing;
    awaiting = served.awaiting;
  } else if (singles) {
    const nqn = volumeSubsystemNQN(cluster.subsystemNQN, a.volumeUUID);
    const input = { volumeUUID: a.volumeUUID, nodeUUID: entry.nodeUUID, sizeBytes: BigInt(a.sizeBytes), backing, qos: a.qos ?? null, beforeGrowing: () => markRevalidate(ctx, nqn) };
    if (await servedStraightFromFile(ctx, pass, nqn, a.nsid, backing.devicePath)) await singles.servedFromFile(input);
    else hostPath = { devicePath: (await singles.serve(input)).hostDevicePath, bufferedIo: false };
  }
  return {
    entry,
    // Still growing: a fingerprint no assignment has, so the next incremental pass (the retry a
    // second later) serves it again; the pool work stands (only the block stack is asked again).
    fingerprint: growing ? `growing ${fingerprint}` : fingerprint,
    pool,
    backing,
    // Still growing, or a replica awaiting the primary's grown size: served, but this generation
    // is not done here (the control plane keeps the volume Updating until every node reports it).
    generation: growing || awaiting ? a.generation - 1 : a.generation,
    ...(growing ? { growing } : {}),
    desired: desiredExportOf(a, hostPath, cluster, settings),
    extra,
    ipAcl: { volumeUUID: a.volumeUUID, acl: ipAclOf(Array.isArray(a.ipAcl) ? a.ipAcl : []) as IpAcl },
    snapshots,
    ...(growing || awaiting || backing.warning ? { warning: growing ?? awaiting ?? backing.warning } : {}),
  };
}

/**
 * Whether the volume's namespace is enabled on its file itself: a namespace made before
 * single-copy volumes had the device-mapper stage, which keeps its file (single-copy.ts). The
 * last pass's view of configfs answers (only a pass changes namespaces, and a full pass reads
 * configfs again before it plans); the agent's first pass reads the subsystem.
 */
async function servedStraightFromFile(ctx: PassContext, pass: PassScope, nqn: string, nsid: number, file: string): Promise<boolean> {
  const tree = ctx.memory.observed ?? (await pass.configfs.readObjects({ subsystems: [nqn], ports: [] }));
  const ns = tree.subsystems.get(nqn)?.namespaces.get(nsid);
  return ns?.attrs['enable'] === '1' && ns.attrs['device_path'] === file;
}

/** The namespace of `nqn` must re-read its device's size: written ahead (datapath.json) before the change that needs it. */
function markRevalidate(ctx: PassContext, nqn: string): void {
  const { state } = ctx.options;
  if (state.pendingRevalidate.has(nqn)) return;
  state.pendingRevalidate.add(nqn);
  state.save();
}

async function preparePool(ctx: PassContext, entry: AssignmentEntry, a: VolumeAssignment, cluster: ClusterFacts): Promise<Pick<PreparedVolume, 'pool' | 'backing' | 'snapshots'>> {
  const { state, logger: log } = ctx.options;
  const nqn = volumeSubsystemNQN(cluster.subsystemNQN, a.volumeUUID);
  const pool = await ctx.poolOf(entry.nodeUUID, cluster);
  const size = BigInt(a.sizeBytes);
  const spec = { compression: a.compression, sectorSize: a.sectorSize, ...(a.cloneFromSnapshotUUID ? { cloneFromSnapshot: a.cloneFromSnapshotUUID } : {}) };
  const replication = a.replication ?? null;
  // Which namespace serves the file and must learn its new size: a single copy's host namespace;
  // a replicated volume's replication export, on a replica (the primary reads its file through a
  // loop device; the host namespaces grow with the device-mapper device, prepareVolume).
  const servesFile = !replication ? nqn : replication.primaryNodeUUID !== entry.nodeUUID ? replicationSubsystemNQN(cluster.subsystemNQN, a.volumeUUID, entry.nodeUUID) : undefined;
  const backing = await pool.ensureVolume(a.volumeUUID, replication ? replicaBackingBytes(size) : size, spec, () => {
    if (servesFile) markRevalidate(ctx, servesFile); // written ahead: the namespace must learn the new size
  });
  const snapshots: VolumeStatusEntry['snapshots'] = [];
  const wantedSnapshots = [...new Set(a.snapshotUUIDs ?? [])].sort();
  for (const snapshotUUID of wantedSnapshots) {
    try {
      await pool.ensureSnapshot(a.volumeUUID, snapshotUUID);
      snapshots.push({ snapshotUUID, state: 'Available', error: '' });
    } catch (err) {
      snapshots.push({ snapshotUUID, state: 'Failed', error: (err as Error).message });
    }
  }
  const rollbackMark = a.rollbackSnapshotUUID ? `${a.generation}:${a.rollbackSnapshotUUID}` : undefined;
  if (rollbackMark && state.rollbacksDone.get(a.volumeUUID) !== rollbackMark) {
    state.pendingRevalidate.add(nqn);
    state.save();
    await pool.rollback(a.volumeUUID, a.rollbackSnapshotUUID);
    await pool.resize(a.volumeUUID, size);
    state.rollbacksDone.set(a.volumeUUID, rollbackMark);
    state.save();
    log.info({ volumeUUID: a.volumeUUID, snapshotUUID: a.rollbackSnapshotUUID, generation: a.generation }, 'volume rolled back');
  }
  for (const snapshotUUID of await pool.listSnapshots(a.volumeUUID)) {
    if (wantedSnapshots.includes(snapshotUUID)) continue;
    await pool.removeSnapshot(a.volumeUUID, snapshotUUID);
    log.info({ volumeUUID: a.volumeUUID, snapshotUUID }, 'snapshot removed');
  }
  return { pool, backing, snapshots };
}

/**
 * A promotion's host path turns ANA-optimized as soon as its device-mapper table points at the
 * array (serve() returned: the copies etcd no longer calls in sync are out of the mirror), not
 * at the end of the pass (IP ACLs, configfs read-back, plan, apply): the failover's critical
 * path. Only when the kernel already serves this path as the pass would but for the ANA state
 * (the port, the subsystem linked to it, the namespace enabled on this very device) and the
 * volume is not fenced; the pass then writes the same state again. No other node can write to
 * the copies by then: the replica set moved only once the old primary was drained and cut off
 * (hand-over) or its lease was gone (the leader's failover), and the array holds the in-sync
 * copies alone.
 */
async function serveOptimizedNow(ctx: PassContext, pass: PassScope, now: PreparedVolume, before: PreparedVolume): Promise<void> {
  const observed = ctx.memory.observed;
  if (!observed) return;
  const d = fenced(ctx.options.replicas, now.desired);
  if (d.port.anaState !== 'optimized' || before.desired.port.anaState === 'optimized') return;
  if (before.desired.port.id !== d.port.id || before.desired.namespace.devicePath !== d.namespace.devicePath) return;
  const port = observed.ports.get(d.port.id);
  const ns = observed.subsystems.get(d.nqn)?.namespaces.get(d.namespace.nsid);
  if (!port?.subsystems.has(d.nqn) || ns?.attrs['enable'] !== '1' || ns.attrs['device_path'] !== d.namespace.devicePath) return;
  await pass.configfs.apply({ op: 'write', path: paths.anaState(d.port.id, d.namespace.anaGroupId), value: 'optimized', volume: d.volumeUUID });
  ctx.options.logger.info({ volumeUUID: d.volumeUUID, port: d.port.id }, 'promoted: host path ANA-optimized');
}
