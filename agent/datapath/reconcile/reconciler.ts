// The data path's reconcile loop (domain layer): assignments in etcd → storage pool + kernel
// target → VolumeStatus reports.
//
// Level-triggered and serialized. A pass runs at start, on every change of the node's
// assignments (etcd watch from the revision read), and every resync interval (which also
// re-reads all assignments). Each pass: prepare each assigned volume's backing (create, grow,
// snapshots, rollback), read the whole configfs tree back, plan against what is really there,
// apply, read back again to verify, remove the backings of volumes no longer assigned, and
// publish a complete report. Because the plan is computed from the real tree, a pass
// interrupted anywhere (kill -9) is finished by the next one; the few things the tree cannot
// tell are written ahead to DataPathState.
//
// When etcd is unreachable the last known assignments stay in force: nothing is torn down
// because a read or a watch failed.
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';
import { parseRecord } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { Logger } from '../../../lib/logger.js';
import type { ClusterRecord, PresenceRecord, ReplicaSetRecord, VolumeAssignment } from '../../../lib/records.js';
import { mapLimit } from '../../../lib/concurrency.js';
import { sleep } from '../../../lib/retry.js';
import { resolveHostNqn, type ConnectedHostsProbe, type ConnectionsByPort } from './connected-hosts.js';
import type { PresentedHostsView } from '../../discovery/presented-hosts.js';
import type { DataPathState } from './datapath-state.js';
import { assignmentProblem, desiredExportOf, replicationExportOf, type ExportSettings } from './desired-state.js';
import { DEFAULT_REPLICATION_PORT, replicaBackingBytes, withReplicaSet } from '../../../lib/replication.js';
import { NotReadyYet, type ReplicaLegStatus, type ReplicaManager } from '../replication/replica-manager.js';
import type { WrittenCount } from '../replication/block-stack.js';
import { ipAclOf, type IpAcl } from '../kernel/ip-acl.js';
import type { IpAclEnforcer, WantedIpAcl } from '../kernel/ip-acl-enforcer.js';
import type { NvmetConfigfs } from '../kernel/nvmet-configfs.js';
import { volumeNqnPrefix } from '../../../lib/contract/nqn.js';
import { describeOp, objectOfOp, paths, type DesiredExport, type NvmetTree } from '../kernel/nvmet-model.js';
import { planNvmet, volumeOfNqn, withHostAuth } from '../kernel/nvmet-plan.js';
import { HOST_AUTH_DISABLED, hostKeysFor, hostKeyWrites, LOCKED_OUT_KEY, type HostAuthSource, type HostKeys } from '../kernel/host-auth.js';
import { replaceObjects, treeOf, workCopy, type WorkTree } from '../kernel/nvmet-simulator.js';
import type { StoragePool, VolumeUsage } from '../pool/storage-pool.js';
import type { ClusterFacts } from '../pool/node-pools.js';
import type { VolumeReportSnapshot, VolumeReportSource, VolumeStatusEntry } from './volume-report.js';
import { reconcilePassDuration, reconcilePasses, reconcilePhaseDuration } from '../../metrics/agent-metrics.js';

/** What the data path runs on, decided once at start. */
export type DataPathBackend =
  | { readonly kind: 'nvmet'; readonly configfs: NvmetConfigfs }
  /** No usable kernel target: every assigned volume is reported Failed with `reason`. */
  | { readonly kind: 'unavailable'; readonly reason: string };

export interface DataPathReconcilerOptions {
  readonly etcd: Etcd3;
  readonly nodeUUIDs: readonly string[];
  readonly backend: () => Promise<DataPathBackend>;
  /** Opens the storage pool of one node (called once per node, again after a failure). */
  readonly openPool: (nodeUUID: string, cluster: ClusterFacts) => Promise<StoragePool>;
  readonly state: DataPathState;
  readonly settings: ExportSettings;
  readonly connectedHosts?: ConnectedHostsProbe;
  /** The host NQNs hosts presented to this node's discovery controller, by address (names connected hosts). */
  readonly presentedHosts?: PresentedHostsView;
  /** The volume ports' IP ACLs (nftables). */
  readonly ipAcls: IpAclEnforcer;
  /** Replicated volumes (md raid1 over NVMe/TCP); without it they are reported Failed. */
  readonly replicas?: ReplicaManager;
  readonly resyncIntervalMs: number;
  /** In-band authentication (host-auth.ts); without it, no host entry gets a key. */
  readonly hostAuth?: HostAuthSource;
  /** Coalesces bursts of watch events into one pass. */
  readonly debounceMs?: number;
  readonly logger: Logger;
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

interface AssignmentEntry {
  readonly nodeUUID: string;
  readonly volumeUUID: string;
  /** undefined: the record could not be parsed. */
  readonly assignment: VolumeAssignment | undefined;
}

/** A volume whose backing is ready, kept until its assignment changes or a full pass. */
interface PreparedVolume {
  readonly entry: AssignmentEntry;
  /** The assignment it was prepared for (its JSON). */
  readonly fingerprint: string;
  readonly generation: number;
  readonly pool: StoragePool;
  /** The host path. */
  readonly desired: DesiredExport;
  /** More subsystems of the volume on this node: the replication export of a replica's copy. */
  readonly extra: readonly DesiredExport[];
  readonly ipAcl: WantedIpAcl;
  readonly snapshots: VolumeStatusEntry['snapshots'];
  readonly warning?: string;
  /** The backing file the pool made (a replicated volume's copy). */
  readonly backing: { readonly devicePath: string; readonly bufferedIo: boolean; readonly warning?: string };
  /** Last measured; undefined until measured. */
  usage?: VolumeUsage;
  /** Bytes written through a replicated volume's device while this node is its primary, as last measured. */
  written?: WrittenCount;
}

class PassPreempted extends Error {}

/** A volume waiting for something outside this node (a replica to come up) is tried again this soon. */
const NOT_READY_RETRY_MS = 1000;

/** Configfs operations applied between two turns of the event loop. */
const OPS_PER_TURN = 8;

/** Backings prepared (and usages measured) at the same time. */
const BACKINGS_PREPARED_AT_ONCE = 8;

/**
 * A full pass at least this many times its own duration apart: on a server with thousands of
 * volumes, where a full pass takes long, the periodic check stays a small part of the work.
 */
const FULL_PASS_SPACING = 10;

function failedStatus(e: AssignmentEntry, error: string): VolumeStatusEntry {
  return {
    volumeUUID: e.volumeUUID,
    nodeUUID: e.nodeUUID,
    generation: e.assignment?.generation ?? 0,
    state: 'Failed',
    error,
    snapshots: [],
    connectedHosts: [],
    logicalUsedBytes: '0',
    physicalUsedBytes: '0',
  };
}

/** Whether two assignments of a volume differ only in what a change of its replica set changes. */
function onlyReplicationChanged(a: VolumeAssignment, b: VolumeAssignment): boolean {
  const rest = (x: VolumeAssignment) => JSON.stringify({ ...x, role: '', anaState: '', replication: null });
  return a.replication != null && b.replication != null && rest(a) === rest(b);
}

function replicaLegsOf(legs: readonly ReplicaLegStatus[] | undefined): Pick<VolumeStatusEntry, 'replicaLegs'> {
  return legs ? { replicaLegs: legs.map((l) => ({ ...l })) } : {};
}

function userWrittenOf(written: WrittenCount | undefined): Pick<VolumeStatusEntry, 'userWrittenBytes' | 'userWrittenDevice'> {
  return written ? { userWrittenBytes: String(written.bytes), userWrittenDevice: written.device } : {};
}

export class DataPathReconciler implements VolumeReportSource {
  private backend: DataPathBackend | undefined;
  private cluster: ClusterFacts | undefined;
  /** node → volume → assignment entry; undefined until the first full read. */
  private assignments: Map<string, Map<string, AssignmentEntry>> | undefined;
  private readonly loadedRevision = new Map<string, bigint>();
  private readonly watchers = new Map<string, Watcher>();
  /** Replica sets whose epoch moved ahead of this node's assignments (a promotion in flight). */
  private readonly promotions = new Map<string, ReplicaSetRecord>();
  /** The replica-set and presence watches of replication. */
  private readonly replicaSetWatchers: Watcher[] = [];
  private watchBroken = false;
  private readonly pools = new Map<string, StoragePool>();
  private readonly poolErrors = new Map<string, string>();
  /** Volumes torn down by this process, reported Absent until a report listing them is acked. */
  private readonly absent = new Map<string, { nodeUUID: string; generation: number; sequence: number }>();
  private readonly lastNodeOf = new Map<string, { nodeUUID: string; generation: number }>();
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
  /** volume/node → its prepared backing and export. */
  private readonly prepared = new Map<string, PreparedVolume>();
  /** The kernel target as last read back, kept between passes. */
  private observed: WorkTree | undefined;
  /**
   * Nodes being stopped (docs/node-operations.md): their volumes' kernel objects stay exactly as
   * they are (no pass prepares or changes them) while their primaries are handed over.
   */
  private readonly frozenNodes = new Set<string>();
  /** Stopped nodes: their volumes are not served (host paths and replication exports leave); backings stay. */
  private readonly heldNodes = new Set<string>();
  /** Volumes of held nodes whose device-mapper device and mirror were taken down. */
  private readonly releasedHeld = new Set<string>();

  constructor(private readonly options: DataPathReconcilerOptions) {}

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
    this.frozenNodes.add(nodeUUID);
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
    const volumes = replicas.primaryVolumes().filter((v) => this.prepared.get(`${v}/${nodeUUID}`) !== undefined);
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
    this.heldNodes.add(nodeUUID);
    this.frozenNodes.delete(nodeUUID);
    await this.reconcileNow();
    return this.servedSubsystemsOf(nodeUUID);
  }

  /** Node start: the node's volumes are served again; resolves after a full pass with them. */
  async releaseNode(nodeUUID: string): Promise<PassSummary | undefined> {
    this.heldNodes.delete(nodeUUID);
    this.frozenNodes.delete(nodeUUID);
    for (const v of [...this.releasedHeld]) if (this.lastNodeOf.get(v)?.nodeUUID === nodeUUID) this.releasedHeld.delete(v);
    return this.reconcileNow();
  }

  /** Held from the agent's start (a node stopped before the agent restarted). */
  holdNodeAtStart(nodeUUID: string): void {
    this.heldNodes.add(nodeUUID);
  }

  /** The node's volumes' subsystems still in the kernel target as last read back. */
  private servedSubsystemsOf(nodeUUID: string): string[] {
    const prefix = this.cluster ? volumeNqnPrefix(this.cluster.subsystemNQN) : undefined;
    if (!prefix || !this.observed || !this.assignments) return [];
    const volumes = new Set(this.assignments.get(nodeUUID)?.keys() ?? []);
    return [...this.observed.subsystems.keys()].filter((nqn) => volumes.has(volumeOfNqn(nqn, prefix) ?? ''));
  }

  private fenced(d: DesiredExport): DesiredExport {
    return this.options.replicas?.isFenced(d.volumeUUID) ? { ...d, port: { ...d.port, anaState: 'inaccessible' } } : d;
  }

  private writeFencedAnaStates(): Promise<void> {
    return this.writeInaccessible((volumeUUID) => this.options.replicas?.isFenced(volumeUUID) === true);
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
  private async serveOptimizedNow(now: PreparedVolume, before: PreparedVolume): Promise<void> {
    if (this.backend?.kind !== 'nvmet' || !this.observed) return;
    const d = this.fenced(now.desired);
    if (d.port.anaState !== 'optimized' || before.desired.port.anaState === 'optimized') return;
    if (before.desired.port.id !== d.port.id || before.desired.namespace.devicePath !== d.namespace.devicePath) return;
    const port = this.observed.ports.get(d.port.id);
    const ns = this.observed.subsystems.get(d.nqn)?.namespaces.get(d.namespace.nsid);
    if (!port?.subsystems.has(d.nqn) || ns?.attrs['enable'] !== '1' || ns.attrs['device_path'] !== d.namespace.devicePath) return;
    await this.backend.configfs.apply({ op: 'write', path: paths.anaState(d.port.id, d.namespace.anaGroupId), value: 'optimized', volume: d.volumeUUID });
    this.options.logger.info({ volumeUUID: d.volumeUUID, port: d.port.id }, 'promoted: host path ANA-optimized');
  }

  /** Writes `inaccessible` to the ANA state of the host paths of the volumes chosen, straight to configfs. */
  private async writeInaccessible(chosen: (volumeUUID: string) => boolean): Promise<void> {
    if (this.backend?.kind !== 'nvmet') return;
    const configfs = this.backend.configfs;
    for (const p of this.prepared.values()) {
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
    for (const [volume, entry] of this.absent) {
      if (entry.sequence <= sequence) {
        this.absent.delete(volume);
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
    const record = parseRecord<ClusterRecord>(keys.cluster(), await this.options.etcd.get(keys.cluster()).string());
    return record ? { clusterUUID: record.UUID, subsystemNQN: record.subsystemNQN } : undefined;
  }

  private async loadAssignments(): Promise<void> {
    const next = new Map<string, Map<string, AssignmentEntry>>();
    const revisions = new Map<string, bigint>();
    for (const nodeUUID of this.options.nodeUUIDs) {
      const response = await this.options.etcd.getAll().prefix(keys.assignmentsPrefix(nodeUUID)).exec();
      const byVolume = new Map<string, AssignmentEntry>();
      for (const kv of response.kvs) {
        const entry = this.entryOf(nodeUUID, kv);
        if (entry) byVolume.set(entry.volumeUUID, entry);
      }
      next.set(nodeUUID, byVolume);
      revisions.set(nodeUUID, BigInt(response.header.revision));
    }
    this.assignments = next;
    for (const [node, rev] of revisions) this.loadedRevision.set(node, rev);
    if (this.watchers.size === 0 || this.watchBroken) await this.startWatchers(revisions);
  }

  private entryOf(nodeUUID: string, kv: IKeyValue): AssignmentEntry | undefined {
    const key = kv.key.toString('utf8');
    const volumeUUID = key.slice(keys.assignmentsPrefix(nodeUUID).length);
    if (!volumeUUID || volumeUUID.includes('/')) return undefined;
    try {
      const assignment = parseRecord<VolumeAssignment>(key, kv.value);
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
    const prefix = keys.replicaSetsPrefix();
    const watcher = this.options.etcd.watch().prefix(prefix).watcher();
    watcher.on('put', (kv: IKeyValue) => {
      const volumeUUID = kv.key.toString('utf8').slice(prefix.length);
      let set: ReplicaSetRecord | null;
      try {
        set = parseRecord<ReplicaSetRecord>(kv.key.toString('utf8'), kv.value);
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
      this.options.logger.info({ volumeUUID, epoch: set.epoch, primary: set.primaryNodeUUID }, 'replica set moved ahead of the assignment: serving it now');
      this.pendingChanges = true;
      this.givingWay?.abort(new PassPreempted());
      this.schedule(false, 0);
    });
    watcher.on('error', (err) => this.options.logger.debug({ err }, 'replica set watch failed; assignments carry the changes'));
    this.replicaSetWatchers.push(watcher);
    // A server registering again may bring back copies this node's mirrors miss.
    const presence = this.options.etcd.watch().prefix(keys.presencePrefix()).watcher();
    presence.on('put', (kv: IKeyValue) => {
      try {
        const record = parseRecord<PresenceRecord>(kv.key.toString('utf8'), kv.value);
        if (record) this.options.replicas?.rejoinSoon(record.nodeUUIDs);
      } catch {
        // not a presence record this agent understands: its copies are retried every rejoin interval
      }
    });
    presence.on('error', (err) => this.options.logger.debug({ err }, 'presence watch failed; copies are retried every rejoin interval'));
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
    for (const nodeUUID of this.options.nodeUUIDs) {
      const from = (revisions.get(nodeUUID) ?? 0n) + 1n;
      // watcher() starts connecting at once and keeps retrying while etcd is away; create()
      // would wait for the connection.
      const watcher = this.options.etcd.watch().prefix(keys.assignmentsPrefix(nodeUUID)).startRevision(String(from)).watcher();
      const onEvent = (kind: 'put' | 'delete') => (kv: IKeyValue) => {
        const rev = BigInt(kv.mod_revision);
        if (rev <= (this.loadedRevision.get(nodeUUID) ?? 0n)) return;
        const byVolume = this.assignments?.get(nodeUUID);
        if (!byVolume) return;
        const volumeUUID = kv.key.toString('utf8').slice(keys.assignmentsPrefix(nodeUUID).length);
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
      watcher.on('put', onEvent('put'));
      watcher.on('delete', onEvent('delete'));
      watcher.on('error', (err) => {
        // e.g. the start revision was compacted: the next resync reads everything again.
        this.options.logger.warn({ err, nodeUUID }, 'assignment watch failed; re-reading at the next resync');
        this.watchBroken = true;
      });
      this.watchers.set(nodeUUID, watcher);
    }
  }

  // --- The pass ----------------------------------------------------------------------------------

  private async pass(): Promise<PassSummary | undefined> {
    const log = this.options.logger;
    const started = Date.now();
    if (!this.backend) {
      this.backend = await this.options.backend();
      if (this.backend.kind === 'unavailable') {
        log.error({ reason: this.backend.reason }, 'the data path is unavailable: volumes assigned to this server are reported Failed');
      }
    }
    // Start, a failed pass, reconcileNow: a full pass, now. The periodic full pass gives way once
    // to assignment changes: pending ones go first, and ones that arrive while it reads the
    // kernel tree stop it there; after one pass for them it runs to the end.
    const required = this.resyncDue || !this.cluster || !this.assignments || !this.observed;
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
    const statuses: VolumeStatusEntry[] = [];
    for (const e of entries) this.lastNodeOf.set(e.volumeUUID, { nodeUUID: e.nodeUUID, generation: e.assignment?.generation ?? 0 });

    if (this.backend.kind === 'unavailable') {
      for (const e of entries) statuses.push(failedStatus(e, this.backend.reason));
      this.publish(statuses);
      return { operations: 0, failedOperations: 0, ipAclChanges: 0, served: 0, failed: statuses.length, removed: 0, full: true, prepared: 0 };
    }
    const configfs = this.backend.configfs;
    const state = this.options.state;
    const prefix = volumeNqnPrefix(cluster.subsystemNQN);
    // Milliseconds per step, in the pass's log line: where a slow pass spends its time.
    const phases: Record<string, number> = {};
    let lapStart = Date.now();
    const lap = (name: string) => {
      const now = Date.now();
      phases[name] = now - lapStart;
      reconcilePhaseDuration.labels(name).observe((now - lapStart) / 1000);
      lapStart = now;
    };
    const nqnOf = (volumeUUID: string) => `${prefix}${volumeUUID}`;

    // 1. Backings. Checks that span volumes run over all of them; the pool work runs only for
    // volumes whose assignment changed since it was last prepared (every volume in a full pass).
    // Volumes whose kernel objects (host path and replication export alike) stay exactly as they are.
    const keptVolumes = new Set<string>();
    const results = new Map<string, VolumeStatusEntry>();
    const seen = new Map<string, string>();
    const portTaken = new Map<number, string>();
    const valid: { key: string; entry: AssignmentEntry; assignment: VolumeAssignment; fingerprint: string }[] = [];
    for (const e of entries) {
      const key = `${e.volumeUUID}/${e.nodeUUID}`;
      const a = e.assignment;
      // A stopped node serves nothing (its backings stay: the volume is still assigned); a node
      // being stopped keeps its volumes' kernel objects exactly as they are.
      if (this.heldNodes.has(e.nodeUUID)) continue;
      if (this.frozenNodes.has(e.nodeUUID)) {
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
          : (assignmentProblem(a, cluster, this.options.settings) ??
            (portTaken.has(a.port) ? `port ${a.port} is also assigned to volume ${portTaken.get(a.port)}` : undefined));
      if (problem) {
        results.set(key, failedStatus(e, problem));
        keptVolumes.add(e.volumeUUID);
        continue;
      }
      portTaken.set(a.port, a.volumeUUID);
      valid.push({ key, entry: e, assignment: a, fingerprint: JSON.stringify(a) });
    }
    const validKeys = new Set(valid.map((v) => v.key));
    // What changes this pass: volumes prepared afresh, and volumes prepared before that are gone
    // or no longer valid. In an incremental pass only their kernel objects are read back.
    const touchedVolumes = new Set<string>();
    const previousPorts = new Map<string, number>();
    for (const [key, p] of this.prepared) {
      if (validKeys.has(key) || this.frozenNodes.has(p.entry.nodeUUID)) continue;
      this.prepared.delete(key);
      touchedVolumes.add(p.desired.volumeUUID);
      previousPorts.set(p.desired.volumeUUID, p.desired.port.id);
    }
    const toPrepare = valid.filter((v) => full || this.prepared.get(v.key)?.fingerprint !== v.fingerprint);
    for (const v of toPrepare) {
      const before = this.prepared.get(v.key);
      if (before) previousPorts.set(v.entry.volumeUUID, before.desired.port.id);
    }
    // What was prepared before stays until this pass prepares it again: a full pass that gives
    // way leaves every volume as the last pass left it.
    // A periodic full pass gives way to assignment changes that arrive before it changes
    // anything (while it checks backings or reads the tree, its long steps): the watch aborts
    // it, the changes get a pass of their own, then the full pass runs again, to the end.
    const preempt = preemptible ? new AbortController() : undefined;
    this.givingWay = preempt;
    const preempted = () => preempt?.signal.aborted === true;
    let notReady = false;
    await mapLimit(toPrepare, BACKINGS_PREPARED_AT_ONCE, async (v) => {
      if (preempted()) return;
      try {
        // A promotion or demotion (only the replica set's part changed) in an incremental pass:
        // the pool work stands as it was; only the block stack changes (the failover's critical path).
        const before = this.prepared.get(v.key);
        const poolWorkDone = !full && before?.entry.assignment && onlyReplicationChanged(before.entry.assignment, v.assignment) ? before : undefined;
        const prepared = await this.prepareVolume(v.entry, v.assignment, v.fingerprint, cluster, poolWorkDone);
        this.prepared.set(v.key, prepared);
        touchedVolumes.add(v.entry.volumeUUID);
        if (poolWorkDone) await this.serveOptimizedNow(prepared, poolWorkDone);
      } catch (err) {
        this.prepared.delete(v.key);
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
    if (notReady) this.schedule(false, NOT_READY_RETRY_MS);
    if (preempted()) return this.givenWay(phases);
    const preparedNow = valid.map((v) => this.prepared.get(v.key)).filter((p): p is PreparedVolume => p !== undefined);

    lap('prepare');
    // 2a. IP ACLs, before the exports change: a new port is filtered before nvmet listens on it.
    // A volume whose ACL cannot be enforced keeps its export exactly as it is (a new one is not
    // created) and is reported Failed.
    const wantedIpAcls = new Map<number, WantedIpAcl>(preparedNow.map((p) => [p.desired.port.id, p.ipAcl]));
    const ipAclPass = await this.options.ipAcls.enforce(wantedIpAcls);
    const desired: DesiredExport[] = [];
    const auth = this.options.hostAuth?.current() ?? HOST_AUTH_DISABLED;
    const volumeHosts = new Set<string>();
    for (const p of preparedNow) {
      if (ipAclPass.failed.has(p.desired.volumeUUID)) keptVolumes.add(p.desired.volumeUUID);
      else {
        const hostPath = withHostAuth(this.fenced(p.desired), auth);
        for (const h of hostPath.allowedHosts) volumeHosts.add(h);
        desired.push(hostPath, ...p.extra);
      }
    }
    const hostKeys = (host: string): HostKeys | undefined => (volumeHosts.has(host) ? hostKeysFor(auth, host, LOCKED_OUT_KEY) : undefined);

    lap('ipAcl');
    // 2b. Kernel target: the whole tree in a full pass; otherwise the objects of the volumes
    // that change, over the tree kept from earlier passes (which the periodic full pass checks).
    if (full || !this.observed) {
      try {
        this.observed = workCopy(await configfs.read(preempt?.signal));
      } catch (err) {
        if (!(err instanceof PassPreempted)) throw err;
        return this.givenWay(phases);
      } finally {
        this.givingWay = undefined;
      }
    } else {
      // Strata subsystems nobody wants (left by a failed teardown): read back before removing.
      const wanted = new Set(desired.map((d) => d.nqn));
      for (const nqn of this.observed.subsystems.keys()) {
        const volumeUUID = volumeOfNqn(nqn, prefix);
        if (volumeUUID && !keptVolumes.has(volumeUUID) && !wanted.has(nqn)) touchedVolumes.add(volumeUUID);
      }
      const ports = new Set<number>();
      for (const d of desired) if (touchedVolumes.has(d.volumeUUID)) ports.add(d.port.id);
      for (const volumeUUID of touchedVolumes) {
        const old = previousPorts.get(volumeUUID);
        if (old !== undefined) ports.add(old);
        for (const port of this.observed.ports.values()) {
          if ([...port.subsystems].some((nqn) => volumeOfNqn(nqn, prefix) === volumeUUID)) ports.add(port.id);
        }
      }
      const subsystems = [...touchedVolumes].flatMap((v) => this.nqnsOf(v, prefix, desired));
      replaceObjects(this.observed, await configfs.readObjects({ subsystems, ports }));
    }
    const tree = treeOf(this.observed);
    const keep = new Set([...tree.subsystems.keys()].filter((nqn) => keptVolumes.has(volumeOfNqn(nqn, prefix) ?? '')));
    for (const v of keptVolumes) keep.add(nqnOf(v));
    const owned = {
      subsystemPrefix: prefix,
      portIdMin: this.options.settings.portIdMin,
      portIdMax: this.options.settings.portIdMax,
      ...(this.options.replicas ? { replicationPortId: this.options.settings.replicationPort ?? DEFAULT_REPLICATION_PORT } : {}),
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
    lap('read');
    const plan = planNvmet({
      desired,
      observed: tree,
      owned,
      keep,
      pendingRelink: state.pendingRelink,
      pendingRevalidate: state.pendingRevalidate,
      hostKeys,
    });
    if (plan.createdHosts.length > 0 || plan.relinked.some((n) => !state.pendingRelink.has(n))) {
      for (const h of plan.createdHosts) state.ownedHosts.add(h);
      for (const n of plan.relinked) state.pendingRelink.add(n);
      state.save(); // ahead of acting: a crash must not forget a host entry or a revocation
      stateChanged = false;
    }
    lap('plan');
    const opFailures = new Map<string, string>();
    const failedPaths = new Set<string>();
    let failedOperations = 0;
    for (const [index, op] of plan.ops.entries()) {
      if (this.stopped) break;
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
    lap('apply');
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
      replaceObjects(this.observed, await configfs.readObjects({ subsystems, ports }));
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
    lap('readBack');
    const after = plan.ops.length > 0 ? treeOf(this.observed) : tree;
    for (const h of [...state.ownedHosts]) {
      if (!after.hosts.has(h)) {
        state.ownedHosts.delete(h);
        stateChanged = true;
      }
    }
    for (const [volumeUUID, mark] of [...state.rollbacksDone]) {
      const stillPending = entries.some((e) => e.volumeUUID === volumeUUID && e.assignment && `${e.assignment.generation}:${e.assignment.rollbackSnapshotUUID}` === mark);
      if (!stillPending) {
        state.rollbacksDone.delete(volumeUUID);
        stateChanged = true;
      }
    }
    if (stateChanged) state.save();
    // IP ACLs of ports that are gone from the kernel target now and wanted by no volume.
    await this.options.ipAcls.release(new Set(wantedIpAcls.keys()), new Set(after.ports.keys()));

    // 3. Verify: what is still not as desired after applying.
    const remaining = planNvmet({ desired, observed: after, owned, keep }).ops;
    const notConverged = new Map<string, string>();
    for (const op of remaining) if (op.volume && !notConverged.has(op.volume)) notConverged.set(op.volume, describeOp(op));
    // A volume that did not converge is prepared and read back again by the next pass.
    for (const volumeUUID of [...notConverged.keys(), ...opFailures.keys()]) {
      const e = entries.find((x) => x.volumeUUID === volumeUUID);
      if (e) this.prepared.delete(`${e.volumeUUID}/${e.nodeUUID}`);
    }

    // Volumes of stopped nodes whose exports are gone: their device-mapper device and mirror go too.
    for (const e of entries) {
      if (!this.heldNodes.has(e.nodeUUID) || this.releasedHeld.has(e.volumeUUID) || !this.options.replicas) continue;
      if ([...after.subsystems.keys()].some((nqn) => volumeOfNqn(nqn, prefix) === e.volumeUUID)) continue;
      try {
        await this.options.replicas.release(e.volumeUUID);
        this.releasedHeld.add(e.volumeUUID);
      } catch (err) {
        log.warn({ err, volumeUUID: e.volumeUUID, nodeUUID: e.nodeUUID }, 'taking down the stopped node\'s volume failed; retrying at the next pass');
      }
    }

    lap('verify');
    // 4. Backings of volumes no longer assigned (only once their export is gone). Every node's
    // pool is looked at, also of nodes that have no assignment left.
    for (const nodeUUID of this.options.nodeUUIDs) await this.poolOf(nodeUUID, cluster).catch(() => undefined);
    const assigned = new Set(entries.map((e) => e.volumeUUID));
    let removed = 0;
    const teardown = new Map<string, { nodeUUID: string; error: string }>();
    for (const [nodeUUID, pool] of this.pools) {
      let volumes: string[];
      try {
        volumes = await pool.listVolumes();
      } catch (err) {
        log.warn({ err, nodeUUID }, 'listing the pool failed');
        continue;
      }
      for (const volumeUUID of volumes) {
        if (assigned.has(volumeUUID)) continue;
        if (after.subsystems.has(nqnOf(volumeUUID))) {
          teardown.set(volumeUUID, { nodeUUID, error: opFailures.get(volumeUUID) ?? 'its export could not be removed yet' });
          continue;
        }
        try {
          await this.options.replicas?.release(volumeUUID);
          await pool.removeVolume(volumeUUID);
          removed += 1;
          log.info({ volumeUUID, nodeUUID }, 'volume backing removed');
          this.markAbsent(volumeUUID, nodeUUID);
        } catch (err) {
          teardown.set(volumeUUID, { nodeUUID, error: `removing the backing failed: ${(err as Error).message}` });
        }
      }
    }
    for (const nqn of tree.subsystems.keys()) {
      const volumeUUID = volumeOfNqn(nqn, prefix);
      if (!volumeUUID || assigned.has(volumeUUID) || teardown.has(volumeUUID)) continue;
      if (after.subsystems.has(nqn)) {
        const nodeUUID = this.lastNodeOf.get(volumeUUID)?.nodeUUID ?? (this.options.nodeUUIDs[0] as string);
        teardown.set(volumeUUID, { nodeUUID, error: opFailures.get(volumeUUID) ?? 'its export could not be removed yet' });
      } else if (!this.absent.has(volumeUUID)) {
        this.markAbsent(volumeUUID, this.lastNodeOf.get(volumeUUID)?.nodeUUID ?? (this.options.nodeUUIDs[0] as string));
      }
    }

    lap('teardown');
    // 5. Statuses. Usage is measured again for volumes prepared now, in full passes and in the
    // interval's refresh (the pool keeps a measurement for a while); otherwise a volume reports
    // its last one. Connected hosts are listed in every pass.
    let connections: ConnectionsByPort = new Map();
    if (this.options.connectedHosts && desired.length > 0) {
      try {
        connections = await this.options.connectedHosts.connectionsByPort();
      } catch (err) {
        log.debug({ err }, 'listing connected hosts failed');
      }
    }
    const desiredByVolume = new Map(desired.map((d) => [d.volumeUUID, d]));
    await mapLimit(preparedNow, BACKINGS_PREPARED_AT_ONCE, async (p) => {
      const again = full || refresh || touchedVolumes.has(p.desired.volumeUUID);
      // Bytes written, on the same rhythm as usage (a new count is a new report): read while this
      // node is the primary (a map lookup otherwise), dropped the moment it no longer is.
      const replicas = this.options.replicas;
      if (!replicas?.legStatus(p.desired.volumeUUID)) p.written = undefined;
      else if (again || !p.written) {
        try {
          p.written = await replicas.writtenBytes(p.desired.volumeUUID);
        } catch (err) {
          log.debug({ err, volumeUUID: p.desired.volumeUUID }, 'reading bytes written failed');
        }
      }
      if (!again && p.usage) return;
      try {
        p.usage = await p.pool.usage(p.desired.volumeUUID);
      } catch (err) {
        log.debug({ err, volumeUUID: p.desired.volumeUUID }, 'reading usage failed');
      }
    });
    for (const p of preparedNow) {
      const e = p.entry;
      const d = desiredByVolume.get(e.volumeUUID);
      const error = ipAclPass.failed.get(e.volumeUUID) ?? opFailures.get(e.volumeUUID) ?? (notConverged.has(e.volumeUUID) ? `the kernel target does not match after applying: ${notConverged.get(e.volumeUUID)}` : undefined);
      results.set(`${e.volumeUUID}/${e.nodeUUID}`, {
        volumeUUID: e.volumeUUID,
        nodeUUID: e.nodeUUID,
        generation: p.generation,
        state: error ? 'Failed' : 'Served',
        error: error ?? p.warning ?? '',
        snapshots: p.snapshots,
        connectedHosts: error || !d ? [] : (connections.get(d.port.id) ?? []).map((address) => resolveHostNqn(address, d, this.options.presentedHosts)),
        logicalUsedBytes: String(p.usage?.logicalUsed ?? 0n),
        physicalUsedBytes: String(p.usage?.physicalUsed ?? 0n),
        ...replicaLegsOf(this.options.replicas?.legStatus(e.volumeUUID)),
        ...userWrittenOf(p.written),
      });
    }
    for (const e of entries) {
      const s = results.get(`${e.volumeUUID}/${e.nodeUUID}`);
      if (s) statuses.push(s);
    }
    for (const [volumeUUID, t] of teardown) {
      statuses.push({
        ...failedStatus({ volumeUUID, nodeUUID: t.nodeUUID, assignment: undefined }, `teardown incomplete: ${t.error}`),
        generation: this.lastNodeOf.get(volumeUUID)?.generation ?? 0,
      });
    }
    lap('status');
    this.publish(statuses);

    const summary: PassSummary = {
      operations: plan.ops.length,
      failedOperations,
      ipAclChanges: ipAclPass.changes,
      served: statuses.filter((s) => s.state === 'Served').length,
      failed: statuses.filter((s) => s.state === 'Failed').length,
      removed,
      full,
      prepared: toPrepare.length,
    };
    if (full) this.periodicFullYielded = false;
    lap('publish');
    const timing = { ms: Date.now() - started, phases };
    reconcilePassDuration.labels(full ? 'full' : 'incremental').observe(timing.ms / 1000);
    if (plan.ops.length > 0 || removed > 0 || failedOperations > 0 || ipAclPass.changes > 0) log.info({ ...summary, ...timing }, 'data path reconciled');
    else log.debug({ ...summary, ...timing }, 'data path pass');
    return summary;
  }

  /** Pool work for one volume: backing, growth, snapshots, rollback (taken from `poolWorkDone` when given), then the block stack. */
  private async prepareVolume(entry: AssignmentEntry, a: VolumeAssignment, fingerprint: string, cluster: ClusterFacts, poolWorkDone?: PreparedVolume): Promise<PreparedVolume> {
    const { pool, backing, snapshots } = poolWorkDone ?? (await this.preparePool(entry, a, cluster));
    const replication = a.replication ?? null;
    let hostPath: { devicePath: string; bufferedIo: boolean } = backing;
    const extra: DesiredExport[] = [];
    if (replication) {
      if (!this.options.replicas) throw new Error('this agent does not serve replicated volumes');
      const served = await this.options.replicas.serve({ volumeUUID: a.volumeUUID, nodeUUID: entry.nodeUUID, sizeBytes: BigInt(a.sizeBytes), replication, backing });
      hostPath = { devicePath: served.hostDevicePath, bufferedIo: false };
      if (served.replicationExport) extra.push(replicationExportOf(a, served.replicationExport, backing, this.options.settings));
    }
    return {
      entry,
      fingerprint,
      pool,
      backing,
      generation: a.generation,
      desired: desiredExportOf(a, hostPath, cluster, this.options.settings),
      extra,
      ipAcl: { volumeUUID: a.volumeUUID, acl: ipAclOf(Array.isArray(a.ipAcl) ? a.ipAcl : []) as IpAcl },
      snapshots,
      ...(backing.warning ? { warning: backing.warning } : {}),
    };
  }

  private async preparePool(entry: AssignmentEntry, a: VolumeAssignment, cluster: ClusterFacts): Promise<Pick<PreparedVolume, 'pool' | 'backing' | 'snapshots'>> {
    const state = this.options.state;
    const log = this.options.logger;
    const nqn = `${volumeNqnPrefix(cluster.subsystemNQN)}${a.volumeUUID}`;
    const pool = await this.poolOf(entry.nodeUUID, cluster);
    const size = BigInt(a.sizeBytes);
    const spec = { compression: a.compression, sectorSize: a.sectorSize, ...(a.cloneFromSnapshotUUID ? { cloneFromSnapshot: a.cloneFromSnapshotUUID } : {}) };
    const replication = a.replication ?? null;
    const backing = await pool.ensureVolume(a.volumeUUID, replication ? replicaBackingBytes(size) : size, spec, () => {
      if (state.pendingRevalidate.has(nqn)) return;
      state.pendingRevalidate.add(nqn); // written ahead: the namespace must learn the new size
      state.save();
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

  /** The subsystems of a volume on this node: desired now, or present in the kernel tree. */
  private nqnsOf(volumeUUID: string, prefix: string, desired: readonly DesiredExport[]): string[] {
    const nqns = new Set([`${prefix}${volumeUUID}`]);
    for (const d of desired) if (d.volumeUUID === volumeUUID) nqns.add(d.nqn);
    for (const nqn of this.observed?.subsystems.keys() ?? []) if (volumeOfNqn(nqn, prefix) === volumeUUID) nqns.add(nqn);
    return [...nqns];
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

  private markAbsent(volumeUUID: string, nodeUUID: string): void {
    // The sequence of the report that first lists it is filled in by publish().
    this.absent.set(volumeUUID, { nodeUUID, generation: this.lastNodeOf.get(volumeUUID)?.generation ?? 0, sequence: Number.MAX_SAFE_INTEGER });
  }

  private async poolOf(nodeUUID: string, cluster: ClusterFacts): Promise<StoragePool> {
    const existing = this.pools.get(nodeUUID);
    if (existing) return existing;
    try {
      const pool = await this.options.openPool(nodeUUID, cluster);
      this.pools.set(nodeUUID, pool);
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
    for (const [volumeUUID, a] of this.absent) {
      if (listed.has(volumeUUID)) {
        this.absent.delete(volumeUUID); // assigned again
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
    for (const a of this.absent.values()) if (a.sequence === Number.MAX_SAFE_INTEGER) a.sequence = this.sequence;
    this.report = { sequence: this.sequence, complete: true, volumes, takenAt: new Date().toISOString() };
    for (const l of this.listeners) l(this.report);
  }
}

export type { NvmetTree };
