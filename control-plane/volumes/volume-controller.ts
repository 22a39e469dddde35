// The active cluster manager's volume controller (docs/volume-lifecycle.md). It runs only on
// the leader and writes only with fenced transactions. It is level-triggered: every pass
// derives what should be from what etcd holds (mirrored in memory and kept current by
// watches), so a restart or a change of leader in the middle of any operation resumes it.
//
//   Creating, unplaced  → choose nodes, allocate nsid + port, write placement + assignments
//   placed, not Deleting → keep each node's assignment equal to what the volume says
//   Creating/Updating/Rollback → Available once every node reports Served at the generation
//   any node reports Failed at the generation → Failed (with the node's error)
//   Deleting            → remove assignments; once no node holds the volume, delete it all
//   snapshots           → Available once every node holds them; Deleting → gone likewise
//   QoS                 → every assignment carries the volume's limits (its policy, else its
//                         project's default, scaled by its size); a policy or default change
//                         rewrites them without a new generation (docs/policies.md)
import { StrataError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import type { NodeCommandRecord, NodeRecord, ReplicaSetRecord, SnapshotRecord, VolumeAssignment, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import type { EventInput } from '../events/event-recorder.js';
import { catalogued, type EventName } from '../events/event-catalogue.js';
import type { EventPreparer } from '../events/etcd-event-log.js';
import type { ControllerChange, Guard, VolumeControllerStore, Write } from './volume-controller-store.js';
import { assignmentFor, placementWithNodes, replicationFor, sameAssignment } from './assignments.js';
import { HANDED_OVER } from '../../lib/etcd/replica-set-store.js';
import { protectionOf } from './protection.js';
import { effectiveQosPolicyUUID, volumeQos } from '../policies/volume-qos.js';
import { chooseNodes, chooseReplacement, roomOn, type NodeCandidate } from './placement.js';
import { bytes } from '../inventory/inventory-view.js';
import { isSnapshotGone, snapshotFailureReason, snapshotStateFromReports } from './snapshot-lifecycle.js';
import { failoverDuration, failovers, type FailoverKind } from '../metrics/control-plane-metrics.js';

export interface VolumeControllerOptions {
  /** Its writes are fenced by the leader's term (the composition root gives the store the fenced commit). */
  readonly store: VolumeControllerStore;
  readonly logger: Logger;
  /** Events are prepared and committed in the same transaction as the change they record. */
  readonly events: EventPreparer;
  readonly clusterUUID: string;
  readonly clusterSubsystemNQN: string;
  /** TCP ports volumes are exported on (one per volume, the same on every node). */
  readonly volumePorts: { readonly min: number; readonly max: number };
  readonly overcommitRatio: number;
  /** A Creating volume that cannot be placed or served within this time becomes Failed. */
  readonly creatingTimeoutMs: number;
  /**
   * A node Inactive this long has failed for good: copies of replicated volumes it held (out of
   * sync by then) are re-created on other nodes, unless the fail-in-place flag is on. 0 or absent:
   * never.
   */
  readonly permanentFailureTimeoutMs?: number;
  /** A node replace not finished within this time fails (its moved copies go back). 0 or absent: never. */
  readonly replaceTimeoutMs?: number;
  /** A node replace whose target has been Inactive this long fails. Default 60 s. */
  readonly replaceTargetGraceMs?: number;
  /** Test hook. */
  readonly now?: () => number;
}

const MAX_NSID = 0xfffffffe;
const PERIODIC_PASS_MS = 2000;
/** An agent restart takes seconds; a target away longer than this is not coming back soon. */
const DEFAULT_REPLACE_TARGET_GRACE_MS = 60_000;
/** Volumes reconciled at once within a pass. */
const RECONCILE_CONCURRENCY = 32;

export class VolumeController {
  private readonly store: VolumeControllerStore;
  private readonly dirty = new Set<string>();
  private running: Promise<void> | undefined;
  private scheduled = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Allocations made in this process and not yet seen back through the watch. */
  private readonly pendingNsids = new Set<number>();
  private readonly pendingPorts = new Set<number>();
  private readonly now: () => number;
  /** Snapshot UUID → its volume, to find the volume when the snapshot record is deleted. */
  private readonly snapshotVolumes = new Map<string, string>();
  /** Node allocations for placement, computed once per pass and kept current within it. */
  private passCandidates: NodeCandidate[] | undefined;
  private readonly allocationHints = new Map<'nsid' | 'port', number>();
  /**
   * Since when (this process's clock) each node has been Inactive. Kept in memory: a new leader
   * starts counting afresh, which only delays re-creating copies, never hastens it.
   */
  private readonly absentSince = new Map<string, number>();
  /** Node replaces may have progressed: look whether one can finish. */
  private replacesDue = false;
  /** Failovers committed whose new primary has not reported serving yet, since when (this process's clock). */
  private readonly failingOver = new Map<string, { kind: FailoverKind; epoch: number; since: number }>();

  constructor(private readonly options: VolumeControllerOptions) {
    this.store = options.store;
    this.now = options.now ?? Date.now;
  }

  async start(): Promise<void> {
    await this.store.start((changes, reloaded) => this.onChanges(changes, reloaded));
    this.timer = setInterval(() => {
      if (this.openReplaces().length > 0) {
        this.replacesDue = true;
        for (const volumeUUID of this.store.replicatedVolumeUUIDs()) this.dirty.add(volumeUUID);
        this.schedule();
      }
      this.markWaiting();
      // Copies on nodes gone for good are re-created once the timeout passes: look again.
      if (this.absentSince.size > 0 && this.options.permanentFailureTimeoutMs) {
        for (const volumeUUID of this.store.replicatedVolumeUUIDs()) this.dirty.add(volumeUUID);
        this.schedule();
      }
    }, PERIODIC_PASS_MS);
    this.timer.unref();
    this.options.logger.info('volume controller started');
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.store.stop();
    await this.running?.catch(() => undefined);
  }

  /** Resolves when no pass is running or due (tests). */
  async idle(): Promise<void> {
    while (this.running || this.scheduled) await (this.running ?? new Promise((r) => setImmediate(r)));
  }

  private onChanges(changes: ControllerChange[], reloaded: boolean): void {
    if (reloaded || changes.some((c) => c.kind === 'presence' || c.kind === 'node')) this.trackAbsence();
    if (reloaded) {
      this.snapshotVolumes.clear();
      for (const snapshot of this.store.snapshots()) this.snapshotVolumes.set(snapshot.UUID, snapshot.sourceVolumeUUID);
      for (const volume of this.store.volumes()) this.dirty.add(volume.UUID);
      // Orphans: assignments or status of volumes that no longer exist.
      for (const volumeUUID of this.store.assignedOrReportedVolumeUUIDs()) this.dirty.add(volumeUUID);
    }
    for (const change of changes) {
      switch (change.kind) {
        case 'volume':
        case 'assignment':
        case 'replicaSet':
        case 'status':
          this.dirty.add(change.volumeUUID!);
          break;
        case 'snapshot': {
          const uuid = change.snapshotUUID!;
          const snapshot = this.store.snapshot(uuid);
          const volume = snapshot?.sourceVolumeUUID ?? this.snapshotVolumes.get(uuid);
          if (snapshot) this.snapshotVolumes.set(uuid, snapshot.sourceVolumeUUID);
          else this.snapshotVolumes.delete(uuid);
          if (volume) this.dirty.add(volume);
          break;
        }
        case 'nodeCommand':
          // A replace moves copies (replaceLostCopies) and then finishes (finishReplaces).
          for (const volumeUUID of this.store.replicatedVolumeUUIDs()) this.dirty.add(volumeUUID);
          this.replacesDue = true;
          break;
        case 'node':
        case 'presence':
          // Replicated volumes follow their nodes: replication endpoints, and failover.
          for (const volumeUUID of this.store.replicatedVolumeUUIDs()) this.dirty.add(volumeUUID);
          this.markWaiting();
          break;
        case 'device':
        case 'pool':
          this.markWaiting();
          break;
        case 'policy':
          // A policy changed: the limits of every volume it is in effect for (docs/policies.md).
          for (const volume of this.store.volumes()) {
            if (effectiveQosPolicyUUID(volume, this.store.project(volume.projectName)) === change.id) this.dirty.add(volume.UUID);
          }
          break;
        case 'project':
          // Its default policy may have changed: the volumes that name none follow it.
          for (const volumeUUID of this.store.volumesOfProject(change.id!)) this.dirty.add(volumeUUID);
          break;
        default:
          break;
      }
    }
    this.schedule();
  }

  /** Volumes that may be waiting for nodes: anything not settled in Available. */
  private markWaiting(): void {
    for (const volume of this.store.volumes()) {
      if (volume.state !== 'Available' && volume.state !== 'Failed') this.dirty.add(volume.UUID);
    }
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled || this.stopped || (this.dirty.size === 0 && !this.replacesDue)) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.running) {
        void this.running.then(() => this.schedule());
        return;
      }
      this.running = this.pass().finally(() => {
        this.running = undefined;
        this.schedule();
      });
    });
  }

  private async pass(): Promise<void> {
    if (this.replacesDue) {
      this.replacesDue = false;
      try {
        await this.progressReplaces();
      } catch (err) {
        if (err instanceof StrataError && err.code === 'NOT_LEADER') return;
        this.options.logger.error({ err }, 'finishing node replaces failed; the periodic pass retries');
      }
    }
    const batch = [...this.dirty];
    this.dirty.clear();
    this.passCandidates = undefined;
    // Volumes are independent (each write compares its own record), so reconcile several at
    // once: etcd commits concurrent transactions together, sequential ones each pay a sync.
    let next = 0;
    let notLeader = false;
    const worker = async () => {
      for (let i = next++; i < batch.length && !this.stopped && !notLeader; i = next++) {
        const volumeUUID = batch[i]!;
        try {
          // A write that lost a race (compare failed) is retried once the watch catches up.
          if ((await this.reconcile(volumeUUID)) === 'retry') this.dirty.add(volumeUUID);
        } catch (err) {
          if (err instanceof StrataError && err.code === 'NOT_LEADER') {
            notLeader = true;
            return;
          }
          this.options.logger.error({ err, volumeUUID }, 'volume reconcile failed; will retry');
          this.dirty.add(volumeUUID);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(RECONCILE_CONCURRENCY, batch.length) }, worker));
    if (this.dirty.size > 0) await new Promise((r) => setTimeout(r, 20));
  }

  // ------------------------------------------------------------------------------------------

  private async reconcile(volumeUUID: string): Promise<'done' | 'retry'> {
    const stored = this.store.volume(volumeUUID);
    if (!stored) return this.removeOrphans(volumeUUID);
    const volume = stored.record;
    const fence: Guard = { volume: volumeUUID, revision: stored.revision };

    if (volume.state === 'Deleting') return this.reconcileDeleting(volume, fence);
    if (!volume.placement) {
      if (volume.state === 'Creating') return this.place(volume, fence);
      return 'done'; // Failed before placement: nothing to serve
    }

    const replicaSet = this.store.replicaSet(volumeUUID);
    if (replicaSet) {
      this.timeFailover(volumeUUID, replicaSet.record);
      const failover = await this.failover(volume, replicaSet.record, replicaSet.revision);
      if (failover !== 'none') return failover;
      const announced = await this.announceProtection(volume, replicaSet.record, replicaSet.revision);
      if (announced !== 'none') return announced;
      const rebuild = await this.announceRebuild(volume, replicaSet.record, replicaSet.revision);
      if (rebuild !== 'none') return rebuild;
      const reverted = await this.revertReplacedCopies(volume, replicaSet.record, replicaSet.revision, fence);
      if (reverted !== 'none') return reverted;
      const replaced = await this.replaceLostCopies(volume, replicaSet.record, replicaSet.revision, fence);
      if (replaced !== 'none') return replaced;
    }
    const assignmentWrites = this.assignmentChanges(volume);
    if (assignmentWrites.length > 0) {
      const handedOver = this.handOverEvent(volume, replicaSet?.record);
      const ok = await this.commit([fence], assignmentWrites, handedOver);
      // The hand-over committed before this leader saw it: it started at its own record's time.
      if (ok && handedOver) this.failedOver(volume.UUID, 'planned', replicaSet!.record.epoch, Math.min(this.now(), Date.parse(replicaSet!.record.updatedAt) || this.now()));
      return ok ? 'done' : 'retry';
    }
    const snapshotsDone = await this.reconcileSnapshots(volume);
    if (snapshotsDone === 'retry') return 'retry';
    return this.reconcileServing(volume, fence);
  }

  /** Volume record gone: drop any assignment and status left for it. */
  private async removeOrphans(volumeUUID: string): Promise<'done' | 'retry'> {
    const writes: Write[] = this.store.assignedNodes(volumeUUID).map((nodeUUID) => ({ removeAssignment: { nodeUUID, volumeUUID } }));
    if (this.store.replicaSet(volumeUUID)) writes.push({ removeReplicaSet: volumeUUID });
    if (writes.length === 0) return 'done';
    await this.commit([{ volume: volumeUUID, revision: '0' }], writes);
    return 'done';
  }

  private async place(volume: VolumeRecord, fence: Guard): Promise<'done' | 'retry'> {
    let onlyNodes: string[] | undefined;
    if (volume.sourceSnapshotUUID) {
      const snapshot = this.store.snapshot(volume.sourceSnapshotUUID);
      const source = snapshot && this.store.volume(snapshot.sourceVolumeUUID)?.record;
      if (!snapshot || !source?.placement) {
        return this.fail(volume, fence, `clone source snapshot ${volume.sourceSnapshotUUID} or its volume no longer exists`);
      }
      onlyNodes = source.placement.nodeList;
    }
    const result = chooseNodes(
      {
        replicaCount: volume.replicaCount,
        sizeBytes: BigInt(volume.sizeBytes),
        placementRestrictions: volume.placementRestrictions,
        ...(onlyNodes ? { onlyNodes } : {}),
        clusterUUID: this.options.clusterUUID,
        overcommitRatio: this.options.overcommitRatio,
      },
      this.passCandidates ??= this.candidates(),
    );
    if (!result.ok) {
      if (!result.retryable) return this.fail(volume, fence, `cannot place volume: ${result.reason}`);
      if (this.expired(volume)) {
        const unreported = result.awaitingPoolReport.length > 0 ? `; node(s) ${result.awaitingPoolReport.join(', ')} never reported their storage pool` : '';
        const down = result.poolsDown.map((d) => `; node ${d.UUID}: ${d.reason}`).join('');
        return this.fail(volume, fence, `cannot place volume within ${this.options.creatingTimeoutMs / 1000} s: ${result.reason}${unreported}${down}`);
      }
      // Wait for nodes or their pool reports: re-checked when nodes, presence, devices or pools
      // change, and periodically (for the timeout). Why is recorded once, for cluster health.
      if (volume.waitingFor === result.reason) return 'done';
      const waiting: VolumeRecord = { ...volume, waitingFor: result.reason };
      return (await this.commit([fence], [{ volume: waiting }])) ? 'done' : 'retry';
    }
    const nsid = this.allocate('nsid', this.pendingNsids, 1, MAX_NSID);
    const port = this.allocate('port', this.pendingPorts, this.options.volumePorts.min, this.options.volumePorts.max);
    if (nsid === undefined) return this.fail(volume, fence, 'no namespace id is free');
    if (port === undefined) return this.fail(volume, fence, `no volume port is free in ${this.options.volumePorts.min}-${this.options.volumePorts.max}`);

    const { waitingFor: _placedNow, ...unwaiting } = volume;
    const placed: VolumeRecord = { ...unwaiting, placement: { nodeList: result.nodeList, primaryNodeUUID: result.primaryNodeUUID, nsid, port } };
    const writes: Write[] = [{ volume: placed }, { nsid, port, volumeUUID: volume.UUID }];
    const guards: Guard[] = [fence, { nsid, revision: '0' }, { port, revision: '0' }];
    // A replicated volume starts with every copy in sync: its backings are all new (all zeros),
    // and its primary creates the mirror over all of them before it serves anything.
    let replicaSet: ReplicaSetRecord | undefined;
    if (volume.replicaCount > 1) {
      replicaSet = { volumeUUID: volume.UUID, epoch: 1, primaryNodeUUID: result.primaryNodeUUID, inSync: [...result.nodeList], reason: 'created', epochReason: 'created', hostSizeBytes: volume.sizeBytes, announced: 'Unknown', updatedAt: new Date(this.now()).toISOString() };
      writes.push({ replicaSet, volumeUUID: volume.UUID });
      guards.push({ replicaSet: volume.UUID, revision: '0' });
    }
    writes.push(...result.nodeList.map((node) => ({ assignment: this.assignment(placed, node, replicaSet), nodeUUID: node, volumeUUID: volume.UUID })));
    // Reserve before committing: placements running concurrently must see this allocation.
    this.pendingNsids.add(nsid);
    this.pendingPorts.add(port);
    const reserve = (sign: bigint) => {
      this.passCandidates = this.passCandidates?.map((c) =>
        result.nodeList.includes(c.UUID) ? { ...c, allocatedBytes: c.allocatedBytes + sign * BigInt(volume.sizeBytes) } : c,
      );
    };
    reserve(1n);
    let ok = false;
    try {
      ok = await this.commit(guards, writes);
    } finally {
      if (!ok) {
        this.pendingNsids.delete(nsid);
        this.pendingPorts.delete(port);
        reserve(-1n);
      }
    }
    if (!ok) return 'retry';
    this.options.logger.info({ volumeUUID: volume.UUID, nodeList: result.nodeList, nsid, port }, 'volume placed');
    return 'done';
  }

  /** Writes or removes assignments so every node holds exactly what the volume says. */
  private assignmentChanges(volume: VolumeRecord): Write[] {
    const writes: Write[] = [];
    const nodes = new Set(volume.placement!.nodeList);
    for (const node of nodes) {
      const want = this.assignment(volume, node);
      const have = this.store.assignment(node, volume.UUID);
      if (!have || !sameAssignment(have, want)) writes.push({ assignment: want, nodeUUID: node, volumeUUID: volume.UUID });
    }
    for (const node of this.store.assignedNodes(volume.UUID)) {
      if (!nodes.has(node)) writes.push({ removeAssignment: { nodeUUID: node, volumeUUID: volume.UUID } });
    }
    return writes;
  }

  private assignment(volume: VolumeRecord, node: string, replicaSet = this.store.replicaSet(volume.UUID)?.record): VolumeAssignment {
    const nodeOf = (uuid: string) => this.store.node(uuid)?.record;
    const replication = replicationFor(volume, replicaSet, this.options.clusterSubsystemNQN, nodeOf);
    const qos = volumeQos(volume, this.store.project(volume.projectName), (uuid) => this.store.policy(uuid));
    return assignmentFor(volume, node, this.options.clusterSubsystemNQN, this.store.snapshotsOf(volume.UUID).map((s) => s.record), replication, qos);
  }

  /**
   * A primary that handed its volume over moved the replica set itself (docs/replication.md,
   * "Planned failover"): its VolumePrimaryChanged goes with the first assignments of that epoch.
   */
  private handOverEvent(volume: VolumeRecord, set: ReplicaSetRecord | undefined): EventInput | undefined {
    // How the epoch began, not the last change: the new primary may already have recorded a copy
    // out of sync within it (which rewrites `reason`).
    if (!(set?.epochReason ?? set?.reason)?.startsWith(HANDED_OVER)) return undefined;
    const before = volume.placement!.nodeList
      .map((node) => this.store.assignment(node, volume.UUID)?.replication)
      .find((r) => r && r.epoch < set.epoch && r.primaryNodeUUID !== set.primaryNodeUUID);
    if (!before) return undefined;
    return this.event(volume, 'VolumePrimaryChanged', `volume ${volume.name}: primary moved from node ${before.primaryNodeUUID} to ${set.primaryNodeUUID} (epoch ${set.epoch}, handed over)`);
  }

  /**
   * Unplanned failover: the primary's agent is gone (its presence lease expired or was revoked, so
   * it can no longer renew it and has fenced itself: docs/replication.md) and an in-sync copy is
   * alive: that copy becomes the primary in a new epoch. Never a copy out of sync: with none
   * alive the volume waits, NotAvailable. The lost primary, and any other copy whose node is not
   * Active, leave the in-sync set in the same transaction: the new primary then neither waits for
   * nor dials them on the failover's critical path (a dead server's address does not refuse a
   * connection, it lets it time out). Safe: every write acknowledged so far is on every in-sync
   * copy, the candidate's included; those copies rejoin by bitmap resync when they return.
   */
  private async failover(volume: VolumeRecord, set: ReplicaSetRecord, revision: string): Promise<'none' | 'done' | 'retry'> {
    if (volume.state === 'Deleting' || volume.state === 'Failed' || volume.state === 'Creating') return 'none';
    const active = this.activeNodes();
    if (active.has(set.primaryNodeUUID)) return 'none';
    const candidate = volume.placement!.nodeList.find((n) => n !== set.primaryNodeUUID && set.inSync.includes(n) && active.has(n));
    if (!candidate) return 'none';
    const why = `primary ${set.primaryNodeUUID} lost: promoted in-sync copy on ${candidate}`;
    const next: ReplicaSetRecord = {
      ...set,
      epoch: set.epoch + 1,
      primaryNodeUUID: candidate,
      inSync: set.inSync.filter((n) => n === candidate || (n !== set.primaryNodeUUID && active.has(n))),
      reason: why,
      epochReason: why,
      updatedAt: new Date(this.now()).toISOString(),
    };
    // Committed only while the old primary's server has no presence key: an agent that registered
    // again meanwhile (its lease had expired) reads the replica set after that, so it either sees
    // this promotion or makes it fail here (docs/replication.md, "Fencing").
    const oldServer = this.store.node(set.primaryNodeUUID)?.record.serverUUID;
    const guards: Guard[] = [{ replicaSet: volume.UUID, revision }];
    // A node stopped by an administrator (docs/node-operations.md) left its server's presence key
    // after handing the volume over, while the agent keeps the key for its other nodes: then the
    // promotion compares that key's revision, whose record does not list the old primary.
    const oldPresence = oldServer ? this.store.presence(oldServer) : undefined;
    if (oldServer && oldPresence) guards.push({ presence: oldServer, revision: oldPresence.revision });
    else if (oldServer) guards.push({ presence: oldServer, revision: '0' });
    const event = this.event(volume, 'VolumePrimaryChanged', `volume ${volume.name}: primary moved from node ${set.primaryNodeUUID} to ${candidate} (epoch ${next.epoch})`);
    const ok = await this.commit(guards, [{ replicaSet: next, volumeUUID: volume.UUID }], event);
    if (ok) this.options.logger.warn({ volumeUUID: volume.UUID, from: set.primaryNodeUUID, to: candidate, epoch: next.epoch }, 'volume failed over');
    if (ok) this.failedOver(volume.UUID, 'unplanned', next.epoch, this.absentSince.get(set.primaryNodeUUID) ?? this.now());
    return ok ? 'done' : 'retry';
  }

  private failedOver(volumeUUID: string, kind: FailoverKind, epoch: number, since: number): void {
    failovers.labels(kind).inc();
    this.failingOver.set(volumeUUID, { kind, epoch, since });
  }

  /**
   * A failover ends when the new primary reports it serves the volume as the primary: Served, with
   * the copies it mirrors to (a replica reports none, and a copy is in sync again, so promotable,
   * only after its node reported as a replica): strata_volume_failover_duration_seconds. A later
   * failover replaces an unfinished one.
   */
  private timeFailover(volumeUUID: string, set: ReplicaSetRecord): void {
    const pending = this.failingOver.get(volumeUUID);
    if (!pending) return;
    if (set.epoch !== pending.epoch) {
      this.failingOver.delete(volumeUUID);
      return;
    }
    const status = this.store.status(volumeUUID, set.primaryNodeUUID);
    if (status?.state !== 'Served' || !status.replicaLegs) return;
    failoverDuration.labels(pending.kind).observe(Math.max(0, this.now() - pending.since) / 1000);
    this.failingOver.delete(volumeUUID);
  }

  /** Which nodes are Inactive, and since when. */
  private trackAbsence(): void {
    const active = this.activeNodes();
    const now = this.now();
    for (const node of this.store.nodeUUIDs()) {
      if (active.has(node)) this.absentSince.delete(node);
      else if (!this.absentSince.has(node)) this.absentSince.set(node, now);
    }
  }

  /**
   * A copy whose node has been Inactive longer than the permanent-failure timeout, and that is
   * out of sync already (the primary recorded it so when it lost it), is re-created on another
   * node: the nodeList names the new node in its place (with a controller-ID window no node of the
   * volume had: placementWithNodes), its assignment follows, and the primary resynchronizes it in full, then records it
   * in sync. Not with the fail-in-place flag on: then the volume waits for its node.
   *
   * A replace moves the source's copy even while the replica set still calls it in sync (its
   * agent stopped but its kernel still serves the export, so the primary never lost it), as long
   * as another in-sync copy is alive: the copy leaves the in-sync set in the same transaction that
   * takes it out of the node list, so the primary's agent drops its leg only once that is durable.
   */
  private async replaceLostCopies(volume: VolumeRecord, set: ReplicaSetRecord, setRevision: string, fence: Guard): Promise<'none' | 'done' | 'retry'> {
    const timeout = this.options.permanentFailureTimeoutMs ?? 0;
    if (volume.state !== 'Available') return 'none';
    // An administrator's replace (docs/node-operations.md) names the node that takes the copies,
    // at once and whatever fail-in-place says; otherwise a node gone for good is replaced by placement.
    const replacing = this.replacing();
    const automatic = timeout > 0 && !this.featureFlag('fail-in-place');
    const nodeList = volume.placement!.nodeList;
    const now = this.now();
    const replaceable = (n: string) => (set.inSync.includes(n) ? this.canGiveBack(set, n) : n !== set.primaryNodeUUID);
    const lost = nodeList.filter((n) =>
      replacing.has(n)
        ? replaceable(n)
        : n !== set.primaryNodeUUID && !set.inSync.includes(n) && automatic && now - (this.absentSince.get(n) ?? now) >= timeout,
    );
    if (lost.length === 0) return 'none';
    const candidates = (this.passCandidates ??= this.candidates());
    const next = [...nodeList];
    for (const node of lost) {
      const target = replacing.get(node);
      if (target !== undefined) {
        if (!next.includes(target)) next[next.indexOf(node)] = target;
        continue;
      }
      const others = next.filter((n) => n !== node).map((n) => candidates.find((c) => c.UUID === n)).filter((c): c is NodeCandidate => c !== undefined);
      const replacement = chooseReplacement({ sizeBytes: BigInt(volume.sizeBytes), overcommitRatio: this.options.overcommitRatio }, candidates, others);
      if (!replacement) continue;
      next[next.indexOf(node)] = replacement.UUID;
    }
    if (next.every((n, i) => n === nodeList[i])) return 'none';
    const moved: VolumeRecord = { ...volume, placement: placementWithNodes(volume.placement!, next) };
    const gone = lost.filter((n) => !next.includes(n));
    const why = gone.every((n) => replacing.has(n)) ? 'replaced by an administrator' : `Inactive over ${timeout / 1000} s`;
    const description = `volume ${volume.name}: copies on node(s) ${gone.join(', ')} (${why}) re-created on ${next.filter((n) => !nodeList.includes(n)).join(', ')}`;
    const guards: Guard[] = [fence];
    const writes: Write[] = [{ volume: moved }];
    if (gone.some((n) => set.inSync.includes(n))) {
      guards.push({ replicaSet: volume.UUID, revision: setRevision });
      writes.push({ replicaSet: this.setWithout(set, gone), volumeUUID: volume.UUID });
    }
    const ok = await this.commit(guards, writes, this.event(volume, 'VolumeReplicaReplaced', description));
    if (ok) {
      this.passCandidates = undefined;
      this.options.logger.warn({ volumeUUID: volume.UUID, from: nodeList, to: next }, 'lost copies re-created on other nodes');
    }
    return ok ? 'done' : 'retry';
  }

  /** Replace commands not ended yet (moving copies, or failing while they go back). */
  private openReplaces(): { record: NodeCommandRecord & { targetNodeUUID: string }; revision: string }[] {
    const open: { record: NodeCommandRecord & { targetNodeUUID: string }; revision: string }[] = [];
    for (const { record, revision } of this.store.nodeCommands()) {
      if (record.kind === 'replace' && record.targetNodeUUID && !record.completedAt && !record.failure) open.push({ record: { ...record, targetNodeUUID: record.targetNodeUUID }, revision });
    }
    return open;
  }

  /** Replaces moving copies: source node → target node. */
  private replacing(): Map<string, string> {
    return new Map(this.openReplaces().filter((c) => !c.record.failing).map((c) => [c.record.nodeUUID, c.record.targetNodeUUID]));
  }

  /** Failing replaces whose moved copies go back: target node → source node. */
  private reverting(): Map<string, string> {
    return new Map(this.openReplaces().filter((c) => c.record.failing).map((c) => [c.record.targetNodeUUID, c.record.nodeUUID]));
  }

  /**
   * A copy on the target of a failing replace goes back to the source (the target's slot in the
   * nodeList names the source again, the target leaves the in-sync set; assignments follow and the
   * target's agent removes its copy). Every copy the target holds of a volume the source is not in
   * came from the replace: the target was Unattached when it was accepted, and Unattached nodes
   * take no copies otherwise. Never a copy the volume depends on (the primary, or its only live
   * in-sync copy): that one stays (failedReplace says so).
   */
  private async revertReplacedCopies(volume: VolumeRecord, set: ReplicaSetRecord, setRevision: string, fence: Guard): Promise<'none' | 'done' | 'retry'> {
    const reverting = this.reverting();
    if (reverting.size === 0) return 'none';
    const nodeList = volume.placement!.nodeList;
    const next = [...nodeList];
    for (const [target, source] of reverting) {
      if (nodeList.includes(target) && !nodeList.includes(source) && this.canGiveBack(set, target)) next[next.indexOf(target)] = source;
    }
    const removed = nodeList.filter((n) => !next.includes(n));
    if (removed.length === 0) return 'none';
    const nextSet = this.setWithout(set, removed);
    const moved: VolumeRecord = { ...volume, placement: placementWithNodes(volume.placement!, next) };
    const description = `volume ${volume.name}: copies on node(s) ${removed.join(', ')} go back to node(s) ${next.filter((n) => !nodeList.includes(n)).join(', ')} (the node replace failed)`;
    const ok = await this.commit(
      [fence, { replicaSet: volume.UUID, revision: setRevision }],
      [{ volume: moved }, { replicaSet: nextSet, volumeUUID: volume.UUID }],
      this.event(volume, 'VolumeReplicaReplaced', description),
    );
    if (ok) {
      this.passCandidates = undefined;
      this.replacesDue = true;
      this.options.logger.warn({ volumeUUID: volume.UUID, from: nodeList, to: next }, 'copies of a failed node replace moved back');
    }
    return ok ? 'done' : 'retry';
  }

  /** The replica set without the copies on `removed` (they leave the volume's node list): out of the in-sync set and the announcements. */
  private setWithout(set: ReplicaSetRecord, removed: readonly string[]): ReplicaSetRecord {
    const without = (list: string[] | undefined) => list?.filter((n) => !removed.includes(n));
    return {
      ...set,
      inSync: without(set.inSync)!,
      ...(set.seenOutOfSync ? { seenOutOfSync: without(set.seenOutOfSync) } : {}),
      ...(set.announcedResyncing ? { announcedResyncing: without(set.announcedResyncing) } : {}),
      updatedAt: new Date(this.now()).toISOString(),
    };
  }

  /** Whether the volume can do without its copy on `node`: not its primary, and another in-sync copy is alive. */
  private canGiveBack(set: ReplicaSetRecord, node: string): boolean {
    const active = this.activeNodes();
    return set.primaryNodeUUID !== node && set.inSync.some((n) => n !== node && active.has(n));
  }

  /**
   * Moves every open replace on. A replace that can no longer finish (failedReplace says why) is
   * marked failing: no more copies move, those that did go back (revertReplacedCopies), then it
   * ends failed. A replace is done once no volume has a copy on the source any more and every copy
   * moved to the target is in sync (its full resync finished): then the source is detached
   * (Unattached: it takes no volumes, and stays stopped), the target attached (it takes new
   * volumes), the command completed, with NodeReplaced, in one fenced transaction.
   */
  private async progressReplaces(): Promise<void> {
    for (const command of this.openReplaces()) {
      const { nodeUUID: source, targetNodeUUID: target } = command.record;
      const commandGuard: Guard = { nodeCommand: source, revision: command.revision };
      if (command.record.failing) {
        await this.endFailedReplace(command);
        continue;
      }
      const failure = this.replaceFailure(command.record);
      if (failure) {
        const failing: NodeCommandRecord = { ...command.record, failing: failure };
        if (await this.commit([commandGuard], [{ nodeCommand: failing }])) {
          this.options.logger.warn({ source, target, failure }, 'node replace failing: its moved copies go back');
        }
        continue;
      }
      let pending = false;
      for (const volume of this.store.volumes()) {
        const nodeList = volume.placement?.nodeList ?? [];
        if (nodeList.includes(source)) pending = true;
        else if (nodeList.includes(target) && volume.replicaCount > 1) {
          const set = this.store.replicaSet(volume.UUID)?.record;
          if (set && !set.inSync.includes(target)) pending = true;
        }
        if (pending) break;
      }
      if (pending) continue;
      const sourceNode = this.store.node(source);
      const targetNode = this.store.node(target);
      const guards: Guard[] = [commandGuard];
      const writes: Write[] = [{ nodeCommand: { ...command.record, completedAt: new Date(this.now()).toISOString() } }];
      if (sourceNode) {
        guards.push({ node: source, revision: sourceNode.revision });
        writes.push({ node: { ...sourceNode.record, unattached: true } });
      }
      if (targetNode) {
        const { unattached: _attached, ...attached } = targetNode.record;
        guards.push({ node: target, revision: targetNode.revision });
        writes.push({ node: attached });
      }
      const event = catalogued('NodeReplaced', {
        component: { kind: 'node', ID: source, Name: sourceNode?.record.name ?? '' },
        description: `node ${this.nodeName(source)} was replaced by node ${this.nodeName(target)}: every copy it held is in sync on the target; the source is detached`,
      });
      // A lost race is looked at again by the periodic pass (every 2 s while a replace runs).
      if (await this.commit(guards, writes, event)) this.options.logger.info({ source, target }, 'node replaced');
    }
  }

  /**
   * Why a replace can no longer finish, or undefined while it can: its target is gone (deleted,
   * Inactive past the grace, attached meanwhile), already holds a copy of a volume the source
   * holds, has no room for the copies still to move, or the replace ran out of time.
   */
  private replaceFailure(command: NodeCommandRecord & { targetNodeUUID: string }): string | undefined {
    const { nodeUUID: source, targetNodeUUID: target } = command;
    const targetNode = this.store.node(target)?.record;
    if (!targetNode) return `target node ${target} no longer exists`;
    if (!targetNode.unattached) return `target node ${this.nodeName(target)} is no longer Unattached (it takes new volumes)`;
    const now = this.now();
    const grace = this.options.replaceTargetGraceMs ?? DEFAULT_REPLACE_TARGET_GRACE_MS;
    const absent = this.absentSince.get(target);
    if (absent !== undefined && now - absent >= grace) return `target node ${this.nodeName(target)} has been Inactive for over ${grace / 1000} s (its agent is not connected)`;
    const remaining = [...this.store.volumes()]
      .filter((v) => v.state !== 'Deleting' && v.placement?.nodeList.includes(source));
    const holding = remaining.filter((v) => v.placement!.nodeList.includes(target));
    if (holding.length > 0) return `target node ${this.nodeName(target)} already holds a copy of volume(s) ${holding.map((v) => `${v.projectName}/${v.name} (${v.UUID})`).join(', ')}`;
    const candidate = this.candidates(target)[0];
    // Room is only known once the target's pool reported; the timeout bounds the wait for it.
    if (candidate && !candidate.awaitingPoolReport && remaining.length > 0) {
      const needed = remaining.reduce((sum, v) => sum + BigInt(v.sizeBytes), 0n);
      const room = roomOn(candidate, this.options.overcommitRatio);
      if (needed > room) return `no capacity on target node ${this.nodeName(target)} for the copies of ${remaining.length} volume(s): ${needed} bytes needed, ${room < 0n ? 0n : room} free`;
    }
    const timeout = this.options.replaceTimeoutMs ?? 0;
    if (timeout > 0 && now - Date.parse(command.requestedAt) >= timeout) {
      return `not finished within ${timeout / 1000} s (${remaining.length} volume(s) still have a copy on the source; copies moved to the target may still be resynchronizing)`;
    }
    return undefined;
  }

  /**
   * A failing replace ends once no copy it moved is left on the target (each went back to the
   * source): the command records the failure, with NodeReplaceFailed. The target is Unattached
   * again, holding nothing; a copy it keeps (its volume's primary or only live in-sync copy) makes
   * it a member of that volume, so it is attached instead, and the failure says so. The source is
   * as before the replace: Inactive, and stopped should its agent return (a start serves it).
   */
  private async endFailedReplace(command: { record: NodeCommandRecord & { targetNodeUUID: string }; revision: string }): Promise<void> {
    const { nodeUUID: source, targetNodeUUID: target, failing, ...rest } = command.record;
    const kept: string[] = [];
    for (const volume of this.store.volumes()) {
      const nodeList = volume.placement?.nodeList ?? [];
      if (volume.state === 'Deleting' || !nodeList.includes(target) || nodeList.includes(source)) continue;
      const set = this.store.replicaSet(volume.UUID)?.record;
      if (set && this.canGiveBack(set, target)) return; // still going back
      kept.push(`${volume.projectName}/${volume.name} (${volume.UUID})`);
    }
    const failure = kept.length === 0 ? failing! : `${failing}; the target keeps its copies of volume(s) ${kept.join(', ')} (no other live in-sync copy), so it is attached`;
    const guards: Guard[] = [{ nodeCommand: source, revision: command.revision }];
    const writes: Write[] = [{ nodeCommand: { ...rest, nodeUUID: source, targetNodeUUID: target, failure, failedAt: new Date(this.now()).toISOString() } }];
    const targetNode = this.store.node(target);
    if (kept.length > 0 && targetNode?.record.unattached) {
      const { unattached: _attached, ...attached } = targetNode.record;
      guards.push({ node: target, revision: targetNode.revision });
      writes.push({ node: attached });
    }
    const event = catalogued('NodeReplaceFailed', {
      component: { kind: 'node', ID: source, Name: this.store.node(source)?.record.name ?? '' },
      description: `replace of node ${this.nodeName(source)} by node ${this.nodeName(target)} failed: ${failure} (command ${command.record.id})${kept.length === 0 ? '; every copy moved to the target went back to the source' : ''}`,
    });
    if (await this.commit(guards, writes, event)) this.options.logger.warn({ source, target, failure }, 'node replace failed');
  }

  /** `name (UUID)` of a node, for descriptions. */
  private nodeName(uuid: string): string {
    const name = this.store.node(uuid)?.record.name;
    return name ? `${name} (${uuid})` : uuid;
  }

  private featureFlag(name: string): boolean {
    return this.store.isFlagOn(name);
  }

  /**
   * VolumeRebuildStarted when the primary reports a copy resyncing, VolumeRebuildCompleted when a
   * copy seen out of sync is back in the in-sync set (also when its resync was too quick to be
   * seen running): once each, what was announced kept in the set.
   */
  private async announceRebuild(volume: VolumeRecord, set: ReplicaSetRecord, revision: string): Promise<'none' | 'done' | 'retry'> {
    const announced = set.announcedResyncing ?? [];
    const seen = set.seenOutOfSync ?? [];
    const outNow = volume.placement!.nodeList.filter((n) => !set.inSync.includes(n));
    const legs = this.store.statusOf(volume.UUID).get(set.primaryNodeUUID)?.replicaLegs ?? [];
    const completed = seen.find((n) => set.inSync.includes(n));
    const started = legs.find((l) => l.state === 'Resyncing' && outNow.includes(l.nodeUUID) && !announced.includes(l.nodeUUID));
    const newlyOut = outNow.filter((n) => !seen.includes(n));
    let next: ReplicaSetRecord;
    let event: EventInput | undefined;
    if (completed) {
      next = { ...set, seenOutOfSync: seen.filter((n) => n !== completed), announcedResyncing: announced.filter((n) => n !== completed) };
      event = this.event(volume, 'VolumeRebuildCompleted', `volume ${volume.name}: the copy on node ${completed} is in sync again`);
    } else if (started) {
      next = { ...set, seenOutOfSync: [...seen, ...newlyOut], announcedResyncing: [...announced, started.nodeUUID] };
      event = this.event(volume, 'VolumeRebuildStarted', `volume ${volume.name}: resynchronizing the copy on node ${started.nodeUUID} from the primary on ${set.primaryNodeUUID}`);
    } else if (newlyOut.length > 0) {
      next = { ...set, seenOutOfSync: [...seen, ...newlyOut] };
    } else {
      return 'none';
    }
    return (await this.commit([{ replicaSet: volume.UUID, revision }], [{ replicaSet: next, volumeUUID: volume.UUID }], event)) ? 'done' : 'retry';
  }

  /** VolumeDegraded / VolumeFullyProtected / VolumeNotAvailable once per change of protection. */
  private async announceProtection(volume: VolumeRecord, set: ReplicaSetRecord, revision: string): Promise<'none' | 'done' | 'retry'> {
    if (volume.state === 'Creating' || volume.state === 'Deleting' || volume.state === 'Failed') return 'none';
    const statusOf = this.store.statusOf(volume.UUID);
    const protection = protectionOf({ volume, replicaSet: set, statusOf, present: this.activeNodes() });
    if (protection === set.announced || protection === 'Unknown') return 'none';
    const name: EventName = protection === 'FullyProtected' ? 'VolumeFullyProtected' : protection === 'Degraded' ? 'VolumeDegraded' : 'VolumeNotAvailable';
    const live = set.inSync.filter((n) => this.activeNodes().has(n)).length;
    const event = this.event(volume, name, `volume ${volume.name} is ${protection}: ${live} of ${volume.replicaCount} copies in sync and alive, primary on node ${set.primaryNodeUUID}`);
    const next: ReplicaSetRecord = { ...set, announced: protection };
    return (await this.commit([{ replicaSet: volume.UUID, revision }], [{ replicaSet: next, volumeUUID: volume.UUID }], event)) ? 'done' : 'retry';
  }

  private async reconcileServing(volume: VolumeRecord, fence: Guard): Promise<'done' | 'retry'> {
    if (volume.state !== 'Creating' && volume.state !== 'Updating' && volume.state !== 'Rollback') return 'done';
    const reports = this.store.statusOf(volume.UUID);
    const nodes = volume.placement!.nodeList;
    const current = nodes.map((n) => reports.get(n)).filter((r) => r && r.generation >= volume.generation);
    const failed = current.find((r) => r!.state === 'Failed');
    if (failed) return this.fail(volume, fence, `node ${failed.nodeUUID}: ${failed.error}`);
    if (current.length === nodes.length && current.every((r) => r!.state === 'Served')) {
      const available: VolumeRecord = { ...volume, state: 'Available', rollbackSnapshotUUID: '', failureReason: '' };
      const event = volume.state === 'Creating' ? this.event(volume, 'VolumeAvailable', `volume ${volume.name} is served by ${nodes.length} node(s)`) : undefined;
      return (await this.commit([fence], [{ volume: available }], event)) ? 'done' : 'retry';
    }
    if (volume.state === 'Creating' && this.expired(volume)) {
      const missing = nodes.filter((n) => !current.some((r) => r!.nodeUUID === n));
      return this.fail(volume, fence, `not served within ${this.options.creatingTimeoutMs / 1000} s by node(s) ${missing.join(', ')}`);
    }
    return 'done';
  }

  private async reconcileDeleting(volume: VolumeRecord, fence: Guard): Promise<'done' | 'retry'> {
    const assigned = this.store.assignedNodes(volume.UUID);
    if (assigned.length > 0) {
      return (await this.commit([fence], assigned.map((nodeUUID) => ({ removeAssignment: { nodeUUID, volumeUUID: volume.UUID } })))) ? 'done' : 'retry';
    }
    // Gone once no Active node still reports holding it. An Inactive node's agent removes
    // anything it holds without an assignment when it returns.
    const active = this.activeNodes();
    const holding = [...this.store.statusOf(volume.UUID).values()].filter((r) => r.state !== 'Absent' && active.has(r.nodeUUID));
    if (holding.length > 0) return 'done';
    return (await this.commit([fence], [{ removeVolume: volume }], this.event(volume, 'VolumeDeleted', `volume ${volume.name} deleted`))) ? 'done' : 'retry';
  }

  /** Snapshot states from the nodes' reports (Creating → Available/Failed, Deleting → gone). */
  private async reconcileSnapshots(volume: VolumeRecord): Promise<'done' | 'retry'> {
    const active = this.activeNodes();
    const reports = [...this.store.statusOf(volume.UUID).values()];
    // A node that is gone cannot remove a snapshot now; its agent drops unassigned ones on return.
    const countingReports = reports.filter((r) => active.has(r.nodeUUID));
    for (const { record: snapshot, revision } of this.store.snapshotsOf(volume.UUID)) {
      const fence: Guard = { snapshot: snapshot.UUID, revision };
      let next: SnapshotRecord | null | undefined;
      if (snapshot.state === 'Creating') {
        const state = snapshotStateFromReports(snapshot, volume, reports);
        if (state === 'Available') next = { ...snapshot, state, failureReason: '' };
        else if (state === 'Failed') next = { ...snapshot, state, failureReason: snapshotFailureReason(snapshot, volume, reports) };
        else if (this.now() - Date.parse(snapshot.creationTime) > this.options.creatingTimeoutMs) {
          next = { ...snapshot, state: 'Failed', failureReason: `not taken on every node within ${this.options.creatingTimeoutMs / 1000} s` };
        }
      } else if (snapshot.state === 'Deleting' && isSnapshotGone(snapshot, countingReports)) {
        next = null;
      }
      if (next === undefined) continue;
      const write: Write = next === null ? { removeSnapshot: snapshot.UUID } : { snapshot: next };
      const what: EventName = next === null ? 'SnapshotDeleted' : next.state === 'Available' ? 'SnapshotAvailable' : 'SnapshotFailed';
      const event = this.event(volume, what, `snapshot ${snapshot.name} of volume ${volume.name}: ${next === null ? 'deleted' : next.state}${next?.failureReason ? ` (${next.failureReason})` : ''}`);
      if (!(await this.commit([fence], [write], event))) return 'retry';
    }
    return 'done';
  }

  private async fail(volume: VolumeRecord, fence: Guard, reason: string): Promise<'done' | 'retry'> {
    const failed: VolumeRecord = { ...volume, state: 'Failed', failureReason: reason };
    const event = this.event(volume, 'VolumeFailed', `volume ${volume.name} failed: ${reason}`);
    if (!(await this.commit([fence], [{ volume: failed }], event))) return 'retry';
    this.options.logger.warn({ volumeUUID: volume.UUID, reason }, 'volume failed');
    return 'done';
  }

  // ------------------------------------------------------------------------------------------

  /** Commits (batched with other reconciles' writes); an event, when given, is appended in the same transaction. */
  private async commit(guards: readonly Guard[], writes: readonly Write[], event?: EventInput): Promise<boolean> {
    const prepared = event ? await this.options.events.prepare(event) : null;
    return this.store.commit(guards, writes, prepared);
  }

  private expired(volume: VolumeRecord): boolean {
    return this.now() - Date.parse(volume.creationTime) > this.options.creatingTimeoutMs;
  }

  private activeNodes(): Set<string> {
    const active = new Set<string>();
    for (const presence of this.store.presences()) {
      for (const node of presence.nodeUUIDs) active.add(node);
    }
    return active;
  }

  /** Placement's candidates: the attached nodes; or `onlyNode` alone, attached or not. */
  private candidates(onlyNode?: string): NodeCandidate[] {
    const active = this.activeNodes();
    const allocated = new Map<string, bigint>();
    for (const record of this.store.volumes()) {
      if (!record.placement || record.state === 'Deleting') continue;
      for (const node of record.placement.nodeList) allocated.set(node, (allocated.get(node) ?? 0n) + BigInt(record.sizeBytes));
    }
    // Unattached nodes (a server added with extendCluster false) take no new volumes.
    const wanted = (node: NodeRecord) => (onlyNode === undefined ? !node.unattached : node.UUID === onlyNode);
    return [...this.store.nodes()].filter((node) => wanted(node)).map((node) => {
      const pool = this.store.pool(node.UUID);
      const base = {
        UUID: node.UUID,
        serverUUID: node.serverUUID,
        failureDomains: node.failureDomains,
        active: active.has(node.UUID),
        allocatedBytes: allocated.get(node.UUID) ?? 0n,
      };
      // The pool's measured capacity (after parity and filesystem overhead) and free space once
      // the node's agent has reported its pool. Only until that first report: the raw size of
      // the managed data devices that are present, an estimate that cannot rule the node out (its
      // devices may not be reported yet either). A node without data devices has no pool to
      // report, ever: its capacity of 0 is known.
      if (pool) {
        const measured = { ...base, capacityBytes: bytes(pool.capacityBytes), freeBytes: bytes(pool.freeBytes), awaitingPoolReport: false };
        // A pool reported down (Failed, no capacity) may be up again soon, e.g. a node's first
        // seconds after a reboot: placement waits for it rather than failing the volume.
        return pool.state === 'Failed' ? { ...measured, poolDown: pool.error || 'Failed' } : measured;
      }
      return {
        ...base,
        awaitingPoolReport: node.managedDeviceSerials.length > 0,
        capacityBytes: node.managedDeviceSerials.reduce((sum, serial) => {
          const device = this.store.device(serial);
          return device?.present ? sum + BigInt(device.sizeBytes) : sum;
        }, 0n),
      };
    });
  }

  /**
   * The lowest free number at or after the last one handed out (wrapping once), skipping numbers
   * taken in etcd or allocated here and not yet seen back through the watch.
   */
  private allocate(what: 'nsid' | 'port', pending: Set<number>, min: number, max: number): number | undefined {
    const inStore = (n: number) => (what === 'nsid' ? this.store.nsidTaken(n) : this.store.portTaken(n));
    for (const n of pending) if (inStore(n)) pending.delete(n);
    const taken = (n: number) => pending.has(n) || inStore(n);
    const start = Math.min(Math.max(this.allocationHints.get(what) ?? min, min), max);
    for (let i = 0, n = start; i <= max - min; i++, n = n === max ? min : n + 1) {
      if (!taken(n)) {
        this.allocationHints.set(what, n === max ? min : n + 1);
        return n;
      }
    }
    return undefined;
  }

  /** The catalogue gives each event its type, severity and reporting service. */
  private event(volume: VolumeRecord, eventName: EventName, description: string): EventInput {
    return catalogued(eventName, { description, component: { kind: 'volume', projectName: volume.projectName, volumes: [{ ID: volume.UUID, Name: volume.name }] } });
  }

}
