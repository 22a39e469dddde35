// The data path's reconcile loop (domain layer): assignments in etcd → storage pool + kernel
// target → VolumeStatus reports.
//
// Level-triggered and serialized. A pass runs at start, on every change of the node's
// assignments (etcd watch from the revision read), and every resync interval (which also
// re-reads all assignments). Each pass (its five phases: pass.ts, a module each): prepare each
// assigned volume's backing (create, grow, snapshots, rollback), read the whole configfs tree
// back, plan against what is really there, apply, read back again to verify, remove the backings
// of volumes no longer assigned, and publish a complete report. Because the plan is computed
// from the real tree, a pass interrupted anywhere (kill -9) is finished by the next one; the few
// things the tree cannot tell are written ahead to DataPathState.
//
// When etcd is unreachable the last known assignments stay in force: nothing is torn down
// because a read or a watch failed.
import type { StoreWatch } from '../../../lib/etcd/record-store.js';
import type { ReplicaSetRecord, VolumeAssignment } from '../../../lib/records.js';
import { mapLimit } from '../../../lib/concurrency.js';
import { sleep } from '../../../lib/retry.js';
import { withReplicaSet } from '../../../lib/replication.js';
import { volumeNqnPrefix } from '../../../lib/contract/nqn.js';
import { reconcilePassDuration, reconcilePasses } from '../../metrics/agent-metrics.js';
import type { NvmetConfigfs } from '../kernel/nvmet-configfs.js';
import { paths, type NvmetTree } from '../kernel/nvmet-model.js';
import { volumeOfNqn } from '../kernel/nvmet-plan.js';
import type { ClusterFacts } from '../pool/node-pools.js';
import type { StoragePool } from '../pool/storage-pool.js';
import type { AssignmentKey, AssignmentStore } from './assignment-store.js';
import { prepareBackings } from './pass-backings.js';
import { applyTarget, enforceIpAcls, readTarget, recordReplicatedPorts, type TargetRead } from './pass-kernel.js';
import { statusesOf } from './pass-statuses.js';
import { tearDown } from './pass-teardown.js';
import { verify } from './pass-verify.js';
import {
  BACKINGS_PREPARED_AT_ONCE,
  failedStatus,
  PassPreempted,
  PhaseTimer,
  type AssignmentEntry,
  type PassContext,
  type PassMemory,
  type PassOptions,
  type PassScope,
} from './pass.js';
import type { VolumeReportSnapshot, VolumeReportSource, VolumeStatusEntry } from './volume-report.js';

/** What the data path runs on, decided once at start. */
export type DataPathBackend =
  | { readonly kind: 'nvmet'; readonly configfs: NvmetConfigfs }
  /** No usable kernel target: every assigned volume is reported Failed with `reason`. */
  | { readonly kind: 'unavailable'; readonly reason: string };

/** What the reconciler runs on; a pass uses the PassOptions part (pass.ts). */
export interface DataPathReconcilerOptions extends PassOptions {
  /** The cluster record and the nodes' assignments, read and watched (assignment-store.ts). */
  readonly store: AssignmentStore;
  readonly backend: () => Promise<DataPathBackend>;
  /** Opens the storage pool of one node (called once per node, again after a failure). */
  readonly openPool: (nodeUUID: string, cluster: ClusterFacts) => Promise<StoragePool>;
  readonly resyncIntervalMs: number;
  /** Coalesces bursts of watch events into one pass. */
  readonly debounceMs?: number;
}

export interface PassSummary {
  readonly operations: number;
  readonly failedOperations: number;
  /** nftables changes (IP ACLs) applied. */
  readonly ipAclChanges: number;
  readonly served: number;
  readonly failed: number;
  readonly removed: number;
  /** A full pass: every backing checked and the whole kernel tree read back. */
  readonly full: boolean;
  /** Volumes whose backing was prepared in this pass. */
  readonly prepared: number;
}

/** A volume waiting for something outside this node (a replica to come up) is tried again this soon. */
const NOT_READY_RETRY_MS = 1000;

/**
 * A full pass at least this many times its own duration apart: on a server with thousands of
 * volumes, where a full pass takes long, the periodic check stays a small part of the work.
 */
const FULL_PASS_SPACING = 10;

/** How a pass starts: which kind it is, and the cluster and assignments it works from. */
interface PassStart {
  readonly backend: DataPathBackend;
  /** Every backing checked and the whole kernel tree read back. */
  readonly full: boolean;
  /** A periodic full pass that still gives way to assignment changes. */
  readonly preemptible: boolean;
  /** The interval's refresh of connected hosts and usage is due. */
  readonly refresh: boolean;
  readonly cluster: ClusterFacts;
  /** By volume, then node. */
  readonly entries: readonly AssignmentEntry[];
}

export class DataPathReconciler implements VolumeReportSource {
  private backend: DataPathBackend | undefined;
  private cluster: ClusterFacts | undefined;
  /** node → volume → assignment entry; undefined until the first full read. */
  private assignments: Map<string, Map<string, AssignmentEntry>> | undefined;
  private readonly loadedRevision = new Map<string, bigint>();
  private readonly watchers = new Map<string, StoreWatch>();
  /** Replica sets whose epoch moved ahead of this node's assignments (a promotion in flight). */
  private readonly promotions = new Map<string, ReplicaSetRecord>();
  /** Replica-set changes seen by the watch so far: a pass that sees it move skips its statuses. */
  private promotionsSeen = 0;
  /** Resolved at the next replica-set change the watch sees (a pass's statuses give way to it). */
  private readonly promotionWaiters = new Set<() => void>();
  /** The replica-set and presence watches of replication. */
  private readonly replicaSetWatchers: StoreWatch[] = [];
  private watchBroken = false;
  private readonly poolErrors = new Map<string, string>();
  private report: VolumeReportSnapshot | undefined;
  private reportKey = '';
  private sequence = 0;
  private readonly listeners = new Set<(r: VolumeReportSnapshot) => void>();
  private timer: NodeJS.Timeout | undefined;
  private resyncTimer: NodeJS.Timeout | undefined;
  private resyncDue = true;
  /**
   * The periodic full pass is due. Unlike resyncDue (start, failure), it lets one pass for
   * pending assignment changes go first: a user's change does not wait for a check of all.
   */
  private periodicFullDue = false;
  /** The due periodic full pass already gave way once (it runs to the end next). */
  private periodicFullYielded = false;
  /** Assignment changes seen by the watch since the last pass began. */
  private pendingChanges = false;
  /** Aborted by the watch: the running periodic full pass may still give way. */
  private givingWay: AbortController | undefined;
  private started = false;
  private fullPassRan = false;
  private lastFullPass: { startedAt: number; ms: number } | undefined;
  /** The interval's refresh of connected hosts and usage is due. */
  private refreshDue = false;
  private running: Promise<void> | undefined;
  private dirty = false;
  private stopped = false;
  private readonly abort = new AbortController();
  private lastSummary: PassSummary | undefined;
  private readonly passListeners = new Set<(s: PassSummary) => void>();
  /** What passes keep from one to the next (pass.ts). */
  private readonly memory: PassMemory = {
    prepared: new Map(),
    observed: undefined,
    pools: new Map(),
    absent: new Map(),
    lastNodeOf: new Map(),
    frozenNodes: new Set(),
    heldNodes: new Set(),
    releasedHeld: new Set(),
  };
  /** What every pass is lent. */
  private readonly context: PassContext;

  constructor(private readonly options: DataPathReconcilerOptions) {
    this.context = {
      options,
      memory: this.memory,
      stopped: () => this.stopped,
      poolOf: (nodeUUID, cluster) => this.poolOf(nodeUUID, cluster),
    };
  }

  start(): void {
    if (this.stopped || this.started) return;
    this.started = true;
    this.options.replicas?.start();
    // A copy's state changed between passes: publish it (a pass with nothing to apply is cheap).
    this.options.replicas?.onChange(() => this.schedule(false));
    if (this.options.replicas) this.watchReplicaSets();
    this.options.hostAuth?.onChange(() => this.schedule(false, 0));
    this.resyncTimer = setInterval(() => this.onInterval(), this.options.resyncIntervalMs);
    this.schedule(true, 0);
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.abort.abort();
    await this.options.replicas?.stop();
    clearTimeout(this.timer);
    clearInterval(this.resyncTimer);
    const watchers = [...this.watchers.values(), ...this.replicaSetWatchers];
    this.watchers.clear();
    await Promise.all(watchers.map((w) => w.cancel().catch(() => undefined)));
    await this.running;
  }

  /** Runs a full pass now (after any running one) and resolves with the last summary. For tests. */
  async reconcileNow(): Promise<PassSummary | undefined> {
    this.resyncDue = true;
    await this.runPasses();
    return this.lastSummary;
  }

  /**
   * The membership lease is overdue (or lost): every volume this node serves as a replicated
   * volume's primary turns ANA-inaccessible now, written straight to the kernel (a pass may be
   * waiting on the unreachable etcd), and stays so in every pass until unfenced.
   */
  fence(): void {
    const replicas = this.options.replicas;
    if (!replicas) return;
    replicas.fenceAll();
    void this.writeFencedAnaStates();
    this.schedule(false, 0);
  }

  /** The lease was renewed before it expired: serve again. */
  unfenceRenewed(): void {
    this.options.replicas?.unfenceRenewed();
    this.schedule(false, 0);
  }

  /** Registered with a new lease: serve again what etcd still says this node is the primary of. */
  async unfenceRegistered(read: (volumeUUID: string) => Promise<{ epoch: number; primaryNodeUUID: string } | undefined>): Promise<void> {
    await this.options.replicas?.unfenceRegistered(read);
    this.schedule(false, 0);
  }

  /**
   * Planned stop (with stop(), which it need not wait for): hands every replicated volume this node is the primary of to
   * another copy. The host paths turn inaccessible (hosts queue their I/O), the device-mapper
   * devices drain, and the primary moves to an in-sync copy by compare-and-swap (whose agent
   * promotes it on that change); the caller then revokes the lease (the leader promotes a copy of
   * a volume that could not be moved so), and finishHandOver() stops the mirrors here.
   */
  async handOver(): Promise<void> {
    const replicas = this.options.replicas;
    if (!replicas || replicas.primaryVolumes().length === 0) return;
    replicas.fenceAll();
    await this.writeFencedAnaStates();
    await mapLimit(replicas.primaryVolumes(), BACKINGS_PREPARED_AT_ONCE, async (volumeUUID) => {
      try {
        await replicas.handOver(volumeUUID);
      } catch (err) {
        this.options.logger.error({ err, volumeUUID }, 'handing the volume over failed; its lease expiry fences it');
      }
    });
  }

  /** After the lease is revoked: the handed-over mirrors stop cleanly. */
  async finishHandOver(): Promise<void> {
    await this.options.replicas?.finishHandOver();
  }

  /**
   * Node stop, first step: no pass changes the node's volumes from now on (the running one, if
   * any, finishes first), so a hand-over cannot be undone by a pass serving them again.
   */
  async freezeNode(nodeUUID: string): Promise<void> {
    this.memory.frozenNodes.add(nodeUUID);
    while (this.running) await this.running;
  }

  /**
   * Node stop: hands over the replicated volumes the node is the primary of, as handOver() does
   * for the whole agent (host paths ANA-inaccessible, device-mapper drained onto the error
   * target), without fencing the server's other nodes. The caller then takes the node out of the
   * presence key (the leader promotes another copy) and calls finishHandOver(). Returns them.
   */
  async handOverNode(nodeUUID: string): Promise<string[]> {
    const replicas = this.options.replicas;
    if (!replicas) return [];
    const volumes = replicas.primaryVolumes().filter((v) => this.memory.prepared.get(`${v}/${nodeUUID}`) !== undefined);
    const set = new Set(volumes);
    await this.writeInaccessible((volumeUUID) => set.has(volumeUUID));
    for (const volumeUUID of volumes) {
      try {
        await replicas.handOver(volumeUUID);
      } catch (err) {
        this.options.logger.error({ err, volumeUUID, nodeUUID }, 'handing the volume over failed');
      }
    }
    return volumes;
  }

  /**
   * Node stop, last step: the node's volumes are served no more (their host paths and replication
   * exports leave the kernel target; their backings stay). Resolves once a pass found none of
   * their subsystems left and took down their device-mapper devices; returns what is still there.
   */
  async holdNode(nodeUUID: string): Promise<string[]> {
    this.memory.heldNodes.add(nodeUUID);
    this.memory.frozenNodes.delete(nodeUUID);
    await this.reconcileNow();
    return this.servedSubsystemsOf(nodeUUID);
  }

  /** Node start: the node's volumes are served again; resolves after a full pass with them. */
  async releaseNode(nodeUUID: string): Promise<PassSummary | undefined> {
    this.memory.heldNodes.delete(nodeUUID);
    this.memory.frozenNodes.delete(nodeUUID);
    for (const v of [...this.memory.releasedHeld]) if (this.memory.lastNodeOf.get(v)?.nodeUUID === nodeUUID) this.memory.releasedHeld.delete(v);
    return this.reconcileNow();
  }

  /** Held from the agent's start (a node stopped before the agent restarted). */
  holdNodeAtStart(nodeUUID: string): void {
    this.memory.heldNodes.add(nodeUUID);
  }

  /** The node's volumes' subsystems still in the kernel target as last read back. */
  private servedSubsystemsOf(nodeUUID: string): string[] {
    const prefix = this.cluster ? volumeNqnPrefix(this.cluster.subsystemNQN) : undefined;
    if (!prefix || !this.memory.observed || !this.assignments) return [];
    const volumes = new Set(this.assignments.get(nodeUUID)?.keys() ?? []);
    return [...this.memory.observed.subsystems.keys()].filter((nqn) => volumes.has(volumeOfNqn(nqn, prefix) ?? ''));
  }

  private writeFencedAnaStates(): Promise<void> {
    return this.writeInaccessible((volumeUUID) => this.options.replicas?.isFenced(volumeUUID) === true);
  }

  /** Writes `inaccessible` to the ANA state of the host paths of the volumes chosen, straight to configfs. */
  private async writeInaccessible(chosen: (volumeUUID: string) => boolean): Promise<void> {
    if (this.backend?.kind !== 'nvmet') return;
    const configfs = this.backend.configfs;
    for (const p of this.memory.prepared.values()) {
      if (!chosen(p.desired.volumeUUID)) continue;
      try {
        await configfs.apply({ op: 'write', path: paths.anaState(p.desired.port.id, p.desired.namespace.anaGroupId), value: 'inaccessible', volume: p.desired.volumeUUID });
        this.options.logger.warn({ volumeUUID: p.desired.volumeUUID, port: p.desired.port.id }, 'fenced: host path ANA-inaccessible');
      } catch (err) {
        this.options.logger.error({ err, volumeUUID: p.desired.volumeUUID }, 'fencing the host path failed');
      }
    }
  }

  /** The cluster's subsystem NQN once read (replication names its objects after it). */
  clusterSubsystemNQN(): string | undefined {
    return this.cluster?.subsystemNQN;
  }

  onPass(listener: (s: PassSummary) => void): () => void {
    this.passListeners.add(listener);
    return () => this.passListeners.delete(listener);
  }

  // --- VolumeReportSource -----------------------------------------------------------------------

  current(): VolumeReportSnapshot | undefined {
    return this.report;
  }

  onChange(listener: (report: VolumeReportSnapshot) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  acknowledged(sequence: number): void {
    let changed = false;
    for (const [volume, entry] of this.memory.absent) {
      if (entry.sequence <= sequence) {
        this.memory.absent.delete(volume);
        changed = true;
      }
    }
    // The next report no longer needs to say Absent: anything missing from a complete report is.
    if (changed) this.schedule(false);
  }

  // --- Scheduling -------------------------------------------------------------------------------

  private schedule(resync: boolean, delayMs = this.options.debounceMs ?? 100): void {
    if (this.stopped) return;
    if (resync) this.resyncDue = true;
    if (this.timer && delayMs > 0) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.runPasses();
    }, delayMs);
  }

  private runPasses(): Promise<void> {
    if (this.running) {
      this.dirty = true;
      return this.running;
    }
    this.running = (async () => {
      let failures = 0;
      do {
        this.dirty = false;
        const started = Date.now();
        try {
          const summary = await this.pass();
          if (summary) reconcilePasses.labels(summary.full ? 'full' : 'incremental', 'ok').inc();
          failures = 0;
          if (summary) {
            this.lastSummary = summary;
            for (const l of this.passListeners) l(summary);
          }
        } catch (err) {
          failures += 1;
          reconcilePasses.labels('unknown', 'error').inc();
          // What the pass left half done is only known after reading everything again.
          this.resyncDue = true;
          this.options.logger.error({ err }, 'data path pass failed; retrying');
          this.dirty = true;
          await sleep(Math.min(5000, 200 * 2 ** Math.min(failures, 5)), this.abort.signal);
        }
        if (this.fullPassRan) {
          this.fullPassRan = false;
          this.lastFullPass = { startedAt: started, ms: Date.now() - started };
        }
      } while ((this.dirty || this.periodicFullDue) && !this.stopped);
    })().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  // --- etcd ------------------------------------------------------------------------------------

  private async readCluster(): Promise<ClusterFacts | undefined> {
    const record = await this.options.store.cluster();
    return record ? { clusterUUID: record.UUID, subsystemNQN: record.subsystemNQN } : undefined;
  }

  private async loadAssignments(): Promise<void> {
    const next = new Map<string, Map<string, AssignmentEntry>>();
    const revisions = new Map<string, bigint>();
    for (const nodeUUID of this.options.nodeUUIDs) {
      const response = await this.options.store.read(nodeUUID);
      const byVolume = new Map<string, AssignmentEntry>();
      for (const kv of response.keys) {
        const entry = this.entryOf(nodeUUID, kv);
        if (entry) byVolume.set(entry.volumeUUID, entry);
      }
      next.set(nodeUUID, byVolume);
      revisions.set(nodeUUID, response.revision);
    }
    this.assignments = next;
    for (const [node, rev] of revisions) this.loadedRevision.set(node, rev);
    if (this.watchers.size === 0 || this.watchBroken) await this.startWatchers(revisions);
  }

  private entryOf(nodeUUID: string, kv: AssignmentKey): AssignmentEntry | undefined {
    const { key, volumeUUID } = kv;
    if (!volumeUUID || volumeUUID.includes('/')) return undefined;
    try {
      const assignment = kv.record();
      return { nodeUUID, volumeUUID, assignment: assignment ? this.promoted(assignment) : undefined };
    } catch (err) {
      this.options.logger.warn({ err, key }, 'ignoring a corrupt assignment record');
      return { nodeUUID, volumeUUID, assignment: undefined };
    }
  }

  /**
   * Promotion without waiting for the leader (docs/replication.md, "Failover"): the replica set
   * is etcd's word on a volume's epoch, primary and in-sync copies, and the leader only derives
   * assignments from it. When it moves ahead of this node's assignment of the volume, the
   * volume is served at once as the leader's next assignment will say (its own pass, at once,
   * only that volume prepared). The assignment that follows is the same, and prepares nothing.
   * Changes missed while the watch reconnects arrive as that assignment, as before.
   */
  private watchReplicaSets(): void {
    const { store } = this.options;
    const watcher = store.watchReplicaSets((volumeUUID, kv) => {
      let set: ReplicaSetRecord | null;
      try {
        set = kv.record();
      } catch {
        return;
      }
      if (!set || !this.assignments || !this.cluster) return;
      let changed = false;
      for (const byVolume of this.assignments.values()) {
        const entry = byVolume.get(volumeUUID);
        const epoch = entry?.assignment?.replication?.epoch;
        if (!entry?.assignment || epoch === undefined || set.epoch <= epoch) continue;
        this.promotions.set(volumeUUID, set);
        byVolume.set(volumeUUID, { ...entry, assignment: this.promoted(entry.assignment) });
        changed = true;
      }
      if (!changed) return;
      this.promotionsSeen += 1;
      for (const wake of this.promotionWaiters) wake();
      this.promotionWaiters.clear();
      this.options.logger.info({ volumeUUID, epoch: set.epoch, primary: set.primaryNodeUUID }, 'replica set moved ahead of the assignment: serving it now');
      this.pendingChanges = true;
      this.givingWay?.abort(new PassPreempted());
      this.schedule(false, 0);
    }, (err) => this.options.logger.debug({ err }, 'replica set watch failed; assignments carry the changes'));
    this.replicaSetWatchers.push(watcher);
    // A server registering again may bring back copies this node's mirrors miss.
    const presence = store.watchPresence((kv) => {
      try {
        const record = kv.record();
        if (record) this.options.replicas?.rejoinSoon(record.nodeUUIDs);
      } catch {
        // not a presence record this agent understands: its copies are retried every rejoin interval
      }
    }, (err) => this.options.logger.debug({ err }, 'presence watch failed; copies are retried every rejoin interval'));
    this.replicaSetWatchers.push(presence);
  }

  /** The assignment with a newer replica set seen by the watch applied (dropped once the assignment has caught up). */
  private promoted(a: VolumeAssignment): VolumeAssignment {
    const set = this.promotions.get(a.volumeUUID);
    if (!set || !a.replication || !this.cluster) return a;
    if (set.epoch <= a.replication.epoch) {
      this.promotions.delete(a.volumeUUID);
      return a;
    }
    return withReplicaSet(a, set, this.cluster.subsystemNQN);
  }

  private async startWatchers(revisions: Map<string, bigint>): Promise<void> {
    await Promise.all([...this.watchers.values()].map((w) => w.cancel().catch(() => undefined)));
    this.watchers.clear();
    this.watchBroken = false;
    // A pass that was reading the assignments when stop() came runs to its end: it watches no
    // more (stop() cancelled the watches it knew; one started now would outlive the reconciler and
    // keep reconnecting after its client is closed, holding the process open).
    if (this.stopped) return;
    for (const nodeUUID of this.options.nodeUUIDs) {
      const from = (revisions.get(nodeUUID) ?? 0n) + 1n;
      // The watch starts connecting at once and keeps retrying while etcd is away (it does not
      // wait for the connection).
      const onEvent = (kind: 'put' | 'delete') => (kv: AssignmentKey) => {
        const rev = kv.revision;
        if (rev <= (this.loadedRevision.get(nodeUUID) ?? 0n)) return;
        const byVolume = this.assignments?.get(nodeUUID);
        if (!byVolume) return;
        const { volumeUUID } = kv;
        if (kind === 'delete') {
          byVolume.delete(volumeUUID);
          this.promotions.delete(volumeUUID);
        }
        else {
          const entry = this.entryOf(nodeUUID, kv);
          if (entry) byVolume.set(entry.volumeUUID, entry);
        }
        this.pendingChanges = true;
        this.givingWay?.abort(new PassPreempted());
        this.schedule(false);
      };
      const watcher = this.options.store.watch(nodeUUID, from, {
        put: onEvent('put'),
        delete: onEvent('delete'),
        error: (err) => {
          // e.g. the start revision was compacted: the next resync reads everything again.
          this.options.logger.warn({ err, nodeUUID }, 'assignment watch failed; re-reading at the next resync');
          this.watchBroken = true;
        },
      });
      this.watchers.set(nodeUUID, watcher);
    }
  }

  // --- The pass ----------------------------------------------------------------------------------

  /**
   * One pass, in the five phases of pass.ts, each handing its result to the next. Undefined when
   * none ran to the end: the cluster is not bootstrapped yet, or a periodic full pass gave way.
   */
  private async pass(): Promise<PassSummary | undefined> {
    const log = this.options.logger;
    const started = Date.now();
    const promotionsAtStart = this.promotionsSeen;
    const start = await this.startPass();
    if (!start) return undefined;
    const { backend, full, preemptible, refresh, cluster, entries } = start;
    if (backend.kind === 'unavailable') {
      const statuses = entries.map((e) => failedStatus(e, backend.reason));
      this.publish(statuses);
      return { operations: 0, failedOperations: 0, ipAclChanges: 0, served: 0, failed: statuses.length, removed: 0, full: true, prepared: 0 };
    }
    const pass: PassScope = { full, cluster, prefix: volumeNqnPrefix(cluster.subsystemNQN), configfs: backend.configfs, entries, timer: new PhaseTimer() };
    const { timer } = pass;
    // Before anything of the pass can make a host path optimized: the exit fence's list.
    recordReplicatedPorts(this.context, pass);

    // 1. Backings. A periodic full pass gives way to assignment changes that arrive before it
    // changes anything (while it checks backings or reads the tree, its long steps): the watch
    // aborts it, the changes get a pass of their own, then the full pass runs again, to the end.
    const preempt = preemptible ? new AbortController() : undefined;
    this.givingWay = preempt;
    const backings = await prepareBackings(this.context, pass, preempt?.signal);
    if (backings.notReady) this.schedule(false, NOT_READY_RETRY_MS);
    if (preempt?.signal.aborted) return this.givenWay(timer.phases);
    timer.lap('prepare');

    // 2. Kernel target: 2a the IP ACLs, before the exports change; 2b nvmet, read, planned,
    // applied and read back.
    const exports = await enforceIpAcls(this.context, pass, backings);
    timer.lap('ipAcl');
    let read: TargetRead | undefined;
    try {
      read = await readTarget(this.context, pass, backings, exports, preempt?.signal);
    } finally {
      this.givingWay = undefined;
    }
    if (!read) return this.givenWay(timer.phases);
    timer.lap('read');
    const target = await applyTarget(this.context, pass, exports, read);

    // 3. Verify: what is still not as desired after applying.
    const verified = await verify(this.context, pass, exports, target);
    timer.lap('verify');

    // 4. Backings of volumes no longer assigned (only once their export is gone).
    const teardown = await tearDown(this.context, pass, target);
    timer.lap('teardown');

    // 5. Statuses, published as one complete report. A promotion that arrived during the pass, or
    // arrives while the statuses are read, goes first: reading usage, bytes written and connected
    // hosts takes 0.3-1.7 s under emulation, a new primary waits on it before it assembles, and a
    // copy before it admits the new primary. The reads left running only read; their answer is
    // dropped, and the next pass reports.
    let wake: () => void = () => undefined;
    const promoted = new Promise<undefined>((resolve) => {
      wake = () => resolve(undefined);
      if (this.promotionsSeen !== promotionsAtStart) wake();
      else this.promotionWaiters.add(wake);
    });
    const reading = statusesOf(this.context, pass, refresh, { backings, exports, target, verified, teardown });
    const statuses = await Promise.race([reading, promoted]).finally(() => this.promotionWaiters.delete(wake));
    if (statuses === undefined) {
      reading.catch((err: unknown) => log.debug({ err }, 'statuses dropped for a promotion failed'));
      if (refresh) this.refreshDue = true;
      log.debug({ phases: timer.phases }, 'pass ends before its statuses: a promotion goes first');
      return undefined;
    }
    timer.lap('status');
    this.publish(statuses);

    const summary: PassSummary = {
      operations: target.plan.ops.length,
      failedOperations: target.failedOperations,
      ipAclChanges: exports.ipAclPass.changes,
      served: statuses.filter((s) => s.state === 'Served').length,
      failed: statuses.filter((s) => s.state === 'Failed').length,
      removed: teardown.removed,
      full,
      prepared: backings.preparing,
    };
    if (full) this.periodicFullYielded = false;
    timer.lap('publish');
    const timing = { ms: Date.now() - started, phases: timer.phases };
    reconcilePassDuration.labels(full ? 'full' : 'incremental').observe(timing.ms / 1000);
    if (summary.operations > 0 || summary.removed > 0 || summary.failedOperations > 0 || summary.ipAclChanges > 0) log.info({ ...summary, ...timing }, 'data path reconciled');
    else log.debug({ ...summary, ...timing }, 'data path pass');
    return summary;
  }

  /**
   * Which pass runs, and what it works from. Start, a failed pass, reconcileNow: a full pass, now.
   * The periodic full pass gives way once to assignment changes: pending ones go first, and ones
   * that arrive while it reads the kernel tree stop it there; after one pass for them it runs to
   * the end. A full pass reads the cluster and the assignments again (the last known ones stay
   * when etcd does not answer). Undefined: the cluster is not bootstrapped yet.
   */
  private async startPass(): Promise<PassStart | undefined> {
    const log = this.options.logger;
    if (!this.backend) {
      this.backend = await this.options.backend();
      if (this.backend.kind === 'unavailable') {
        log.error({ reason: this.backend.reason }, 'the data path is unavailable: volumes assigned to this server are reported Failed');
      }
    }
    const backend = this.backend;
    const required = this.resyncDue || !this.cluster || !this.assignments || !this.memory.observed;
    let full = required;
    let preemptible = false;
    if (!required && this.periodicFullDue) {
      if (this.pendingChanges && !this.periodicFullYielded) this.periodicFullYielded = true;
      else {
        full = true;
        preemptible = !this.periodicFullYielded;
      }
    }
    this.pendingChanges = false;
    if (full) this.periodicFullDue = false;
    const refresh = this.refreshDue;
    this.refreshDue = false;
    this.fullPassRan ||= full;
    if (full) {
      try {
        this.cluster = (await this.readCluster()) ?? this.cluster;
        await this.loadAssignments();
        this.resyncDue = false;
      } catch (err) {
        if (!this.cluster || !this.assignments) throw err;
        log.warn({ err }, 'reading assignments failed; keeping the last known ones');
      }
    }
    const cluster = this.cluster;
    if (!cluster || !this.assignments) {
      log.info('the cluster is not bootstrapped yet; the data path waits');
      return undefined;
    }

    const entries = [...this.assignments.values()].flatMap((m) => [...m.values()]);
    entries.sort((a, b) => (a.volumeUUID < b.volumeUUID ? -1 : a.volumeUUID > b.volumeUUID ? 1 : a.nodeUUID < b.nodeUUID ? -1 : 1));
    for (const e of entries) this.memory.lastNodeOf.set(e.volumeUUID, { nodeUUID: e.nodeUUID, generation: e.assignment?.generation ?? 0 });
    return { backend, full, preemptible, refresh, cluster, entries };
  }

  /** A periodic full pass stops before changing anything: changes wait, it runs after them. */
  private givenWay(phases: Record<string, number>): undefined {
    this.givingWay = undefined;
    this.options.logger.debug({ phases }, 'full pass gave way to assignment changes');
    this.periodicFullDue = true;
    this.fullPassRan = false;
    return undefined;
  }

  /**
   * Every resync interval: a pass that refreshes what the kernel and the pool show (connected
   * hosts, usage) and, when due, checks everything. A full pass is due one interval after the
   * last one started, or 10 times its duration when full passes take long (thousands of
   * volumes), so the check stays a small part of the work.
   */
  private onInterval(): void {
    const last = this.lastFullPass;
    if (last && Date.now() - last.startedAt >= Math.max(this.options.resyncIntervalMs, last.ms * FULL_PASS_SPACING)) this.periodicFullDue = true;
    this.refreshDue = true;
    this.schedule(false);
  }

  private async poolOf(nodeUUID: string, cluster: ClusterFacts): Promise<StoragePool> {
    const existing = this.memory.pools.get(nodeUUID);
    if (existing) return existing;
    try {
      const pool = await this.options.openPool(nodeUUID, cluster);
      this.memory.pools.set(nodeUUID, pool);
      this.poolErrors.delete(nodeUUID);
      return pool;
    } catch (err) {
      const message = `the storage pool of node ${nodeUUID} cannot be opened: ${(err as Error).message}`;
      if (this.poolErrors.get(nodeUUID) !== message) this.options.logger.error({ err, nodeUUID }, 'opening the storage pool failed');
      this.poolErrors.set(nodeUUID, message);
      // Sooner than the next resync: a pool usually fails to open for a passing reason.
      this.schedule(true, 5000);
      throw new Error(message);
    }
  }

  private publish(statuses: VolumeStatusEntry[]): void {
    const listed = new Set(statuses.map((s) => s.volumeUUID));
    const absentEntries: VolumeStatusEntry[] = [];
    for (const [volumeUUID, a] of this.memory.absent) {
      if (listed.has(volumeUUID)) {
        this.memory.absent.delete(volumeUUID); // assigned again
        continue;
      }
      absentEntries.push({
        volumeUUID,
        nodeUUID: a.nodeUUID,
        generation: a.generation,
        state: 'Absent',
        error: '',
        snapshots: [],
        connectedHosts: [],
        logicalUsedBytes: '0',
        physicalUsedBytes: '0',
      });
    }
    const volumes = [...statuses, ...absentEntries].sort((x, y) =>
      x.volumeUUID < y.volumeUUID ? -1 : x.volumeUUID > y.volumeUUID ? 1 : x.nodeUUID < y.nodeUUID ? -1 : 1,
    );
    const key = JSON.stringify(volumes);
    if (key === this.reportKey && this.report) return;
    this.reportKey = key;
    this.sequence += 1;
    for (const a of this.memory.absent.values()) if (a.sequence === Number.MAX_SAFE_INTEGER) a.sequence = this.sequence;
    this.report = { sequence: this.sequence, complete: true, volumes, takenAt: new Date().toISOString() };
    for (const l of this.listeners) l(this.report);
  }
}

export type { NvmetTree };
