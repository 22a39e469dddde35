// Replication on one node (domain layer over the BlockStack driver; docs/replication.md).
//
// The reconciler calls serve() for every replicated volume it prepares: on the primary it builds
// the md raid1 over the local copy and the in-sync replicas and points the host path at it; on a
// replica it makes sure the host path serves nothing and hands back the replication export.
//
// A monitor runs on the primary between passes, because a replica can fail at any moment:
// - an in-sync leg whose connection is lost (or that md marked faulty) is taken out of the
//   in-sync set in etcd FIRST, and only then failed out of md and disconnected. Until then its
//   I/O waits (ctrl_loss_tmo -1), so no write is acknowledged without it unless etcd already says
//   it is out of sync: the invariant that makes promotion safe;
// - an out-of-sync leg that is reachable again is connected and re-added (md copies what its
//   bitmap marks dirty), and put back into the in-sync set once md says it is in sync.
// If etcd answers that this node is no longer the epoch's primary, the host path is switched to
// the fence (block-stack.ts) at once: two primaries never accept writes for one volume.
//
// QoS (docs/decisions.md, "QoS is enforced by a ublk server of ours"): a primary whose assignment
// has limits serves the host through a strata-ublk server over the array (the QoS stage,
// kernel/qos-stage.ts, handed in by datapath.ts as QosServers): the server is started first,
// then the device-mapper table is reloaded onto its device (a flush suspend, the swap, a resume:
// hosts see a pause, no error). New limits only go to the running server; limits removed reload
// the table onto the array first, then stop the server. Replicas ignore the limits (their fence
// serves nothing). Where the server cannot run (no ublk in the kernel), the volume is served
// straight from the array and the report says the policy is not enforced, and why.
import { KeyedSerializer } from '../../../lib/concurrency.js';
import type { Logger } from '../../../lib/logger.js';
import type { ReplicaSetWriter } from '../../../lib/etcd/replica-set-store.js';
import { DeadlineExceeded, retry, withDeadline } from '../../../lib/retry.js';
import { stopwatch } from '../../../lib/stopwatch.js';
import { nodeHostNQN, replicaBackingBytes, replicationSubsystemNQN } from '../../../lib/replication.js';
import type { AssignmentReplication, VolumeQosStatus } from '../../../lib/records.js';
import { notConnected, REPLICATED_BLOCK_BYTES, type ArrayState, type BlockStack, type LegDevice, type LegTarget, type StackSnapshot, type WrittenCount } from './block-stack.js';
import { QosPath, type HostPathInput, type QosServers } from './qos-path.js';
import { resyncCompleted, resyncStarted } from '../../metrics/agent-metrics.js';

/**
 * The volume cannot be served here yet for a reason outside this node that passes by itself (a
 * replica not exporting its copy yet, an assignment older than etcd's word): not a failure.
 */
export class NotReadyYet extends Error {}

/** What a primary reports about each copy (VolumeStatus.replicaLegs). */
export interface ReplicaLegStatus {
  readonly nodeUUID: string;
  /** InSync; Resyncing (md copies to it); OutOfSync (reachable, not yet re-added); Unreachable. */
  readonly state: 'InSync' | 'Resyncing' | 'OutOfSync' | 'Unreachable';
  /** 0-100 while Resyncing (md's sync_completed), 100 when InSync, 0 otherwise. */
  readonly syncPercent: number;
}

export interface ServeInput extends HostPathInput {
  readonly replication: AssignmentReplication;
}

export type { QosServers } from './qos-path.js';

export interface ServeResult {
  /** What the volume's host-path namespace points at. */
  readonly hostDevicePath: string;
  /** On a replica node: export the backing to the primary (subsystem NQN, admitted host). */
  readonly replicationExport?: { readonly nqn: string; readonly primaryHostNQN: string };
  /**
   * On a primary whose volume grew: why the host path still shows the size the mirror had (a
   * copy that does not show its grown backing yet, a resync md must finish first). The volume is
   * served meanwhile; the reconciler tries again soon and does not report the generation done.
   */
  readonly growing?: string;
  /**
   * On a replica of a grown volume: why its path still shows the previous size (the primary's path
   * does not serve the new one yet). The generation is not done here; the assignment that carries
   * the primary's recorded size brings the next pass, so nothing is retried meanwhile.
   */
  readonly awaiting?: string;
}

/**
 * The size a path that serves nothing (a replica's fence) shows: what the replica set says the
 * primary's path serves, never more than the volume; the volume's size for a set without it.
 */
function fenceBytes(input: ServeInput): bigint {
  const recorded = input.replication.hostSizeBytes;
  if (recorded === undefined) return input.sizeBytes;
  const bytes = BigInt(recorded);
  return bytes < input.sizeBytes ? bytes : input.sizeBytes;
}

export interface ReplicaManagerOptions {
  readonly stack: BlockStack;
  readonly writer: ReplicaSetWriter;
  readonly clusterSubsystemNQN: () => string | undefined;
  readonly logger: Logger;
  /** How often the primary looks at its legs. */
  readonly monitorIntervalMs: number;
  /** A leg whose connection is down this long is taken out of the in-sync set. */
  readonly legLossGraceMs: number;
  /** Reconnect attempts to an out-of-sync replica at most this often. */
  readonly rejoinIntervalMs: number;
  /** How long a promotion keeps trying an in-sync copy that refuses it (default 3 s; 0: once). */
  readonly promotionLegWaitMs?: number;
  /**
   * How long one connection attempt of a promotion may take (default 5 s) before the copy counts
   * as unreachable. The kernel's own bound is its admin timeout, 60 s: a copy whose node answers
   * TCP but not NVMe (a hung target, a node dying as it is dialled) held a promotion, and so the
   * host's I/O, for that minute once. A promotion with a copy that dies meanwhile takes at most
   * about promotionLegWaitMs + this.
   */
  readonly promotionConnectTimeoutMs?: number;
  /** The QoS stage; without it a volume with limits is served unthrottled and reported NotEnforced. */
  readonly qos?: QosServers;
}

const DEFAULT_PROMOTION_LEG_WAIT_MS = 3000;
const DEFAULT_PROMOTION_CONNECT_TIMEOUT_MS = 5000;
const PROMOTION_LEG_RETRY_MS = 100;

interface PrimaryVolume {
  input: ServeInput;
  /** Copies in sync as this node last knew (assignment, then its own durable changes). */
  inSync: Set<string>;
  /** nodeUUID → when its connection was first seen down. */
  downSince: Map<string, number>;
  lastRejoinAttempt: Map<string, number>;
  legs: ReplicaLegStatus[];
  /** etcd said another node is the primary at this epoch (or later): never serve it again. */
  fencedAtEpoch: number | undefined;
  /** Why the assignment's limits are not enforced here, undefined when they are (or there are none). */
  qosProblem: string | undefined;
  /** What the host path shows: the assignment's size, or less while the mirror has not grown to it yet. */
  servedBytes: bigint;
}

export class ReplicaManager {
  private readonly primaries = new Map<string, PrimaryVolume>();
  private readonly locks = new KeyedSerializer();
  private readonly listeners = new Set<() => void>();
  private timer: NodeJS.Timeout | undefined;
  private monitoring: Promise<void> | undefined;
  /** The membership lease may expire (or did): no volume is served as a primary meanwhile. */
  private leaseFenced = false;
  /** Volumes handed over by a planned stop whose mirror still runs here. */
  private readonly handedOver = new Set<string>();
  /** node → until when its out-of-sync copies are tried at every look instead of every rejoinIntervalMs. */
  private readonly rejoinEager = new Map<string, number>();
  /**
   * Volumes this node serves as a replica, by the backing file their mirror parts were taken
   * down for: a replica's pass then only checks its loop device instead of looking for a mirror
   * over every loop device of the node (a scan per volume per pass).
   */
  private readonly replicaOf = new Map<string, string>();

  private readonly qosPath: QosPath;

  constructor(private readonly options: ReplicaManagerOptions) {
    this.qosPath = new QosPath({ stack: options.stack, qos: options.qos, logger: options.logger });
  }

  start(): void {
    this.timer ??= setInterval(() => {
      if (!this.monitoring) this.monitoring = this.monitor().finally(() => (this.monitoring = undefined));
    }, this.options.monitorIntervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.monitoring;
  }

  /**
   * A server came back (its presence key is there again): its nodes' copies may be exported again
   * within its first pass, so their out-of-sync copies are tried at every look (each monitor
   * interval) for a while, and re-added as soon as they answer, not at the next rejoin interval.
   */
  rejoinSoon(nodeUUIDs: readonly string[]): void {
    const until = Date.now() + REJOIN_EAGER_MS;
    for (const n of nodeUUIDs) this.rejoinEager.set(n, until);
    this.kick();
  }

  private kick(): void {
    if (this.timer && !this.monitoring) this.monitoring = this.monitor().finally(() => (this.monitoring = undefined));
  }

  /** Called when leg states change (the reconciler then publishes a new report). */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Whether the host path of this volume must not be served here now: the lease is overdue or
   * lost, or etcd answered that another node is the epoch's primary. The reconciler keeps such a
   * volume's port ANA-inaccessible, so hosts queue and retry on another path.
   */
  isFenced(volumeUUID: string): boolean {
    const state = this.primaries.get(volumeUUID);
    return state !== undefined && (this.leaseFenced || isFencedAt(state));
  }

  /** Volumes this node serves as their primary. */
  primaryVolumes(): string[] {
    return [...this.primaries.keys()];
  }

  /** The lease is overdue: stop serving every primary until it is renewed or proven safe again. */
  fenceAll(): void {
    this.leaseFenced = true;
  }

  /** The same lease was renewed: it never expired, so no other copy can have been promoted. */
  unfenceRenewed(): void {
    this.leaseFenced = false;
  }

  /**
   * Registered again with a new lease (the old one expired): a primary serves again only if etcd
   * still names this node the primary of the epoch it served (read after the new presence key
   * exists, so no promotion can commit from now on: the leader's promotion requires the old
   * primary's presence to be absent).
   */
  async unfenceRegistered(read: (volumeUUID: string) => Promise<{ epoch: number; primaryNodeUUID: string } | undefined>): Promise<void> {
    for (const [volumeUUID, state] of this.primaries) {
      const set = await read(volumeUUID);
      if (!set || set.epoch !== state.input.replication.epoch || set.primaryNodeUUID !== state.input.nodeUUID) {
        await this.locked(volumeUUID, () => this.fence(state));
      }
    }
    this.leaseFenced = false;
  }

  /**
   * Planned stop, first half: after the host path is inaccessible, the device-mapper device is
   * switched to the fence (the reload suspends it first, which waits for the writes in
   * flight: they reach every copy). Nothing writes through this node any more. The mirror goes
   * read-only (its last superblock reaches every copy alike), and md writes nothing after. When it
   * could not (or with one copy left, where it is skipped), the replicas' connections go first
   * (nothing this node's mirror still writes, its superblock on stop included, can reach a copy
   * another primary may already use); a read-only mirror's go after the move, off the hosts'
   * critical path. The primary moves, by this node itself,
   * to an in-sync copy whose server is alive (epoch + 1, this copy out of the in-sync set): the new
   * primary's agent promotes it on that change, without waiting for this lease to go. When no
   * copy can take it, the leader's failover does once the lease is revoked. Returns the new primary.
   */
  async handOver(volumeUUID: string): Promise<string | undefined> {
    return this.locked(volumeUUID, async () => {
      const state = this.primaries.get(volumeUUID);
      if (!state) return undefined;
      const { stack, writer, logger } = this.options;
      const { replication, nodeUUID } = state.input;
      const lap = stopwatch();
      await this.stopServing(volumeUUID, state.servedBytes);
      lap('fence');
      this.primaries.delete(volumeUUID);
      this.handedOver.add(volumeUUID);
      const candidates = replication.legs.map((l) => l.nodeUUID).filter((n) => n !== nodeUUID && state.inSync.has(n));
      // Only copies that will be mirrored together again can disagree about md's last superblock:
      // with one in-sync copy left, the new primary's mirror is that copy alone, and the freeze
      // (a superblock and bitmap write to every leg: 0.5 s under emulation) would only slow the
      // hand-over.
      const frozen = candidates.length > 1 && (await this.freezeMirror(state));
      if (candidates.length > 1) lap('freeze');
      // With one copy left, its leg (and any other remote one) is marked faulty in md instead: a
      // sysfs write, where deleting the connection first took 77-209 ms of the hosts' pause in the
      // lab. md writes nothing to a faulty member, so the copy is cut off from this mirror as
      // surely as by its connection's deletion, which then goes while the primary moves. The
      // fence above drained every host write: none is acknowledged without that copy.
      const cutOff = !frozen && candidates.length === 1 && (await this.failRemoteLegs(state));
      if (cutOff) lap('fail');
      // A read-only mirror, or one whose remote legs are faulty, writes nothing more to the
      // copies, so its connections go while the primary moves: the hosts wait for the longer of
      // the two, not their sum. Started before the move, they go while healthy (a connection each
      // copy's node has cut since, as it admitted the new primary, takes the kernel up to 10 s to
      // delete). Otherwise they go first: md could still write to a copy the new primary uses.
      const disconnecting = stack.disconnectAll(replicationSubsystemNQN(this.requireCluster(), volumeUUID, ''));
      // Handled below, after the move: a failure meanwhile is not an unhandled rejection.
      disconnecting.catch(() => undefined);
      if (!frozen && !cutOff) {
        await disconnecting;
        lap('disconnect');
      }
      const moved = await writer.handOver(volumeUUID, replication.epoch, nodeUUID, candidates).catch((err: unknown) => {
        logger.warn({ err, volumeUUID }, 'moving the primary failed; the leader promotes a copy once the lease is revoked');
        return undefined;
      });
      let ms = lap('move');
      if (frozen || cutOff) {
        await disconnecting.catch((err: unknown) => logger.warn({ err, volumeUUID }, "deleting the mirror's connections to its copies failed; the mirror's stop deletes them"));
        ms = lap('disconnect');
      }
      const to = moved?.outcome === 'moved' ? moved.primaryNodeUUID : undefined;
      logger.info({ volumeUUID, to, epoch: moved?.outcome === 'moved' ? moved.epoch : undefined, outcome: moved?.outcome, ms }, 'handed over: this node writes nothing more to the volume');
      return to;
    });
  }

  /**
   * Before a hand-over deletes its replicas' connections: the mirror goes read-only, so md writes
   * its last superblock to every copy while all are connected, and none after. Left running, md
   * wrote one as the first connection went (the array turning clean after the fence, or the
   * leg's failure recorded) to the copy still connected; the new primary's md then found the
   * other copy's superblock older, left that leg out, and the copy was recorded out of sync
   * (CI on 6.1; docs/replication.md). The QoS server, which holds the array open, stops first
   * (the fence no longer points at it). Best effort: a mirror that cannot be frozen is handed
   * over as before.
   */
  private async freezeMirror(state: PrimaryVolume): Promise<boolean> {
    const { stack, qos, logger } = this.options;
    const { volumeUUID } = state.input;
    try {
      await qos?.stop(volumeUUID);
      const loop = await stack.loopOf(state.input.backing.devicePath);
      const array = loop ? await stack.arrayOf(loop) : undefined;
      if (!array) return false;
      await stack.freezeArray(array);
      return true;
    } catch (err) {
      logger.warn({ err, volumeUUID }, 'the mirror could not be made read-only before the hand-over: a copy may be recorded out of sync and resync');
      return false;
    }
  }

  /**
   * Before a hand-over to the one copy left: every remote leg of the mirror is marked faulty in md
   * (the local leg, in sync, stays), so md writes nothing more to the copy the new primary
   * assembles on: not the superblock of the array turning clean after the fence, not a bitmap
   * page, not its stop's. Best effort: false (the connections then go before the move, as
   * before) when md does not show every remote leg faulty.
   */
  private async failRemoteLegs(state: PrimaryVolume): Promise<boolean> {
    const { stack, logger } = this.options;
    const { volumeUUID } = state.input;
    try {
      const loop = await stack.loopOf(state.input.backing.devicePath);
      const array = loop ? await stack.arrayOf(loop) : undefined;
      if (!loop || !array) return false;
      const failed = await stack.failLegsBut(array, loop);
      if (!failed) logger.warn({ volumeUUID, array }, "md did not mark the mirror's remote legs faulty: their connections go before the primary moves");
      return failed;
    } catch (err) {
      logger.warn({ err, volumeUUID }, "the mirror's remote legs could not be marked faulty: their connections go before the primary moves");
      return false;
    }
  }

  /**
   * Second half, once the lease is revoked (off the hosts' critical path: the new primary serves
   * meanwhile): the mirror, left with the local leg alone, stops; then the loop device goes.
   */
  async finishHandOver(): Promise<void> {
    for (const volumeUUID of [...this.handedOver]) {
      await this.locked(volumeUUID, () => this.dismantlePrimary(volumeUUID, true)).catch((err: unknown) =>
        this.options.logger.warn({ err, volumeUUID }, 'stopping the handed-over mirror failed; the next start cleans up'),
      );
      this.handedOver.delete(volumeUUID);
    }
  }

  /** The primary's view of every copy, undefined when this node is not the volume's primary. */
  legStatus(volumeUUID: string): readonly ReplicaLegStatus[] | undefined {
    return this.primaries.get(volumeUUID)?.legs;
  }

  /**
   * What hosts wrote through the volume's device here, undefined when this node is not its
   * primary (a replica's fence serves no writes) or the device is not there. A fenced primary
   * still reports it: its device counted those writes.
   */
  async writtenBytes(volumeUUID: string): Promise<WrittenCount | undefined> {
    if (!this.primaries.has(volumeUUID)) return undefined;
    return this.options.stack.writtenBytes(volumeUUID);
  }

  serve(input: ServeInput): Promise<ServeResult> {
    return this.locked(input.volumeUUID, () => {
      // A pass that was running when the agent began to stop must not serve what it handed over.
      if (this.handedOver.has(input.volumeUUID)) throw new NotReadyYet(`volume ${input.volumeUUID} was handed over: this agent is stopping`);
      return input.replication.primaryNodeUUID === input.nodeUUID ? this.servePrimary(input) : this.serveReplica(input);
    });
  }

  /** Takes down whatever serves the volume on this node (after its namespace is gone, before its backing is). */
  release(volumeUUID: string): Promise<void> {
    return this.locked(volumeUUID, async () => {
      this.primaries.delete(volumeUUID);
      this.replicaOf.delete(volumeUUID);
      await this.options.stack.removeDm(volumeUUID);
      await this.dismantlePrimary(volumeUUID);
    });
  }

  // --- primary ------------------------------------------------------------------------------------

  private async servePrimary(input: ServeInput): Promise<ServeResult> {
    const { stack, logger } = this.options;
    const { volumeUUID, replication } = input;
    this.replicaOf.delete(volumeUUID);
    // Milliseconds per step of a start or a promotion, logged once the host path points at the mirror.
    const lap = stopwatch();
    let started: { readonly array: string; readonly legs: string[]; readonly created: boolean } | undefined;
    const inSync = new Set(replication.legs.filter((l) => l.inSync).map((l) => l.nodeUUID));
    const remotes = this.remoteTargets(input).filter((t) => inSync.has(t.nodeUUID));
    // A promotion (this node runs no mirror of the volume yet) dials its copies while its loop
    // device is made: both are on the failover's critical path, and neither needs the other.
    // Otherwise the mirror most likely runs already, and the copies are dialled only if it does not.
    const dialling = inSync.has(input.nodeUUID) && replication.epoch > 1 && !this.primaries.has(volumeUUID) ? this.dialInSyncCopies(input, remotes) : undefined;
    // Its own steps are laps of their own (loopFind, loopSize, loopGrow or loopAttach): the step
    // took 150-240 ms in every planned promotion in the lab, 18-45 in every unplanned one.
    const loop = await stack.ensureLoop(input.backing.devicePath, input.backing.bufferedIo, lap).catch(async (err: unknown) => {
      await dialling;
      throw err;
    });
    lap('loop');
    // Made before it is needed: fencing this primary or handing it over then swaps a table only.
    await stack.fenceTable(fenceBytes(input));
    if (!inSync.has(input.nodeUUID)) {
      // Only an in-sync copy may serve (the leader never promotes another): refuse.
      await this.stopServing(volumeUUID, fenceBytes(input));
      throw new Error(`this node's copy of volume ${volumeUUID} is not in sync: it cannot be the primary`);
    }
    let array = await stack.arrayOf(loop);
    // The mirror ran already (an agent restarted on its primary): the dialling ends before the
    // legs are looked at, so no connection is made while the checks below read or cut them.
    if (array) await dialling;
    else {
      const reached = await (dialling ?? this.dialInSyncCopies(input, remotes));
      lap('legs');
      // Only the first primary creates the mirror (a promotion, epoch 2 on, finds it made): the
      // superblock is looked for then only, one command less on a failover's critical path.
      const fresh = replication.epoch === 1 && !(await stack.hasSuperblock(loop));
      if (fresh && reached.length < remotes.length) {
        // A new volume's array is created whole: every copy must be there to start equal.
        throw new NotReadyYet(`waiting for replica(s) ${remotes.filter((r) => !reached.some((x) => x.target === r)).map((r) => r.nodeUUID).join(', ')} to create the volume's mirror`);
      }
      if (fresh) array = await stack.createArray(volumeUUID, loop, reached.map((r) => r.block));
      else {
        const assembled = await stack.assembleArray(volumeUUID, loop, reached.map((r) => r.block));
        if (assembled.fallback) logger.warn({ err: assembled.fallback, volumeUUID }, 'md could not assemble the mirror through sysfs: mdadm did');
        array = assembled.block;
      }
      lap(fresh ? 'create' : 'assemble');
      started = { array, legs: reached.map((r) => r.target.nodeUUID), created: fresh };
    }
    const state: PrimaryVolume = this.primaries.get(volumeUUID) ?? { input, inSync, downSince: new Map(), lastRejoinAttempt: new Map(), legs: [], fencedAtEpoch: undefined, qosProblem: undefined, servedBytes: fenceBytes(input) };
    state.input = input;
    state.inSync = inSync;
    this.primaries.set(volumeUUID, state);
    if (isFencedAt(state)) {
      // An assignment older than what etcd told us: wait for the one naming the new primary.
      await this.stopServing(volumeUUID, fenceBytes(input));
      throw new NotReadyYet(`another node is the primary of volume ${volumeUUID} since epoch ${state.fencedAtEpoch}; waiting for the new assignment`);
    }
    // Copies etcd calls in sync that the array does not hold in sync: out of the set first, then
    // (and only then) does the host path reach the array.
    const arrayState = await stack.readArray(array);
    // Every copy's connection, read once: for this check and for the legs' states reported (no
    // scan of the whole stack on a promotion's critical path; the monitor looks again within its
    // interval).
    const seen = new Map<string, LegDevice>();
    for (const target of this.remoteTargets(input)) seen.set(target.nodeUUID, await stack.leg(target));
    const missing: string[] = [];
    for (const target of remotes) {
      const leg = seen.get(target.nodeUUID);
      const member = leg?.block ? arrayState.members.find((m) => m.block === leg.block) : undefined;
      if (!member || !member.flags.includes('in_sync') || member.flags.includes('faulty')) missing.push(target.nodeUUID);
    }
    if (missing.length > 0) {
      if (!(await this.takeOutOfSync(state, missing, `not in the mirror when volume ${volumeUUID} started on its primary`))) {
        throw new Error(`this node is no longer the primary of volume ${volumeUUID}`);
      }
      for (const target of this.remoteTargets(input).filter((t) => missing.includes(t.nodeUUID))) seen.set(target.nodeUUID, await stack.leg(target));
    }
    lap('check');
    // A start or a promotion does not wait for a copy's rescan (the hosts wait for this pass):
    // it serves at the size the mirror has, and the next pass (a second later) grows it.
    const growth = await this.growMirror(state, loop, array, seen, started ? 0 : undefined);
    state.servedBytes = growth.bytes;
    await this.pointHostPath(state, array);
    const ms = lap('dm');
    if (started) logger.info({ volumeUUID, ...started, ms }, started.created ? 'replicated volume created' : 'replicated volume assembled');
    state.legs = this.legStates(state, arrayState, { leg: (t) => seen.get(t.nodeUUID) ?? notConnected(t.nodeUUID) });
    const growing = growth.waiting ?? (growth.bytes === input.sizeBytes ? await this.recordHostSize(input) : undefined);
    return { hostDevicePath: stack.hostDevicePath(volumeUUID), ...(growing ? { growing } : {}) };
  }

  /**
   * Once this primary's path serves the volume's whole size, the replica set says so (replicas'
   * fences grow to it only then: docs/replication.md, "Growing a replicated volume"). A set
   * written before it held the size gets it here too. A failed write is why the pass is tried again.
   */
  private async recordHostSize(input: ServeInput): Promise<string | undefined> {
    const { volumeUUID, replication, sizeBytes } = input;
    if (replication.hostSizeBytes === sizeBytes.toString()) return undefined;
    try {
      const outcome = await this.options.writer.recordHostSize(volumeUUID, replication.epoch, input.nodeUUID, sizeBytes);
      if (outcome === 'fenced') this.options.logger.warn({ volumeUUID, epoch: replication.epoch }, 'the replica set moved on: the served size is not recorded');
      return undefined;
    } catch (err) {
      this.options.logger.warn({ err, volumeUUID }, 'recording the size the host path serves failed');
      return `recording the size ${sizeBytes} bytes the primary serves failed: the replicas' paths keep the previous size`;
    }
  }

  /**
   * A grown volume (docs/replication.md, "Growing a replicated volume"): every copy's node grew
   * its backing, and each replica had its export re-read the size. Here the local loop device
   * takes its file's new size, each replica's namespace is rescanned until it shows its new size,
   * and only when every leg of the mirror is that large does md grow the array. Until then the
   * host path keeps the size the array has (no leg is failed for it): what hosts see never
   * exceeds what every copy holds. Everything is read from the kernel, so a crash at any step
   * is resumed by the next call, and a new primary over legs of mixed sizes (md assembles at the
   * size its superblocks record) grows the same way. Returns the size the host path may show.
   */
  private async growMirror(state: PrimaryVolume, loop: string, array: string, seen: ReadonlyMap<string, LegDevice>, rescanWaitMs?: number): Promise<{ bytes: bigint; waiting?: string }> {
    const { stack, logger } = this.options;
    const { volumeUUID, sizeBytes } = state.input;
    const arrayBytes = await stack.blockBytes(array);
    if (arrayBytes >= sizeBytes) return { bytes: sizeBytes };
    // The old size, in whole 4 KiB blocks (the array holds at least that much on every leg).
    const now = (arrayBytes / BLOCK) * BLOCK;
    const legBytes = replicaBackingBytes(sizeBytes);
    if ((await stack.blockBytes(loop)) < legBytes) await stack.growLoop(loop);
    const { members, syncAction } = await stack.readArray(array);
    const small: string[] = [];
    for (const member of members) {
      if (member.flags.includes('faulty')) continue;
      const remote = [...seen.values()].find((l) => l.block === member.block);
      const large = remote?.controller ? await stack.rescanLeg(remote.controller, member.block, legBytes, rescanWaitMs) : (await stack.blockBytes(member.block)) >= legBytes;
      if (!large) small.push(remote ? `node ${remote.nodeUUID}` : member.block);
    }
    if (small.length > 0) return { bytes: now, waiting: `the mirror grows to ${sizeBytes} bytes once every copy shows its grown backing; waiting for ${small.join(', ')}` };
    // md refuses to resize while it resyncs (EBUSY); a rebuilding copy finishes first.
    if (syncAction !== 'idle') return { bytes: now, waiting: `the mirror grows to ${sizeBytes} bytes once md's ${syncAction} is done` };
    await stack.growArray(array, sizeBytes);
    const grown = await stack.blockBytes(array);
    if (grown < sizeBytes) throw new Error(`md did not grow the mirror ${array} to ${sizeBytes} bytes (it has ${grown})`);
    logger.info({ volumeUUID, from: String(arrayBytes), to: String(sizeBytes) }, 'mirror grown: md resyncs the new tail');
    return { bytes: sizeBytes };
  }

  /**
   * The host path onto the array, or onto the QoS server's device over it when the assignment has
   * limits: the server first (a promotion starts it before the table points anywhere but the
   * fence), then the table; limits removed: the table back onto the array, then the server stops.
   * A server that cannot run leaves the volume served from the array, with the reason kept for the
   * report: a policy never takes a volume's I/O away.
   */
  private async pointHostPath(state: PrimaryVolume, array: string): Promise<void> {
    const { volumeUUID, nodeUUID, beforeGrowing, qos } = state.input;
    state.qosProblem = await this.qosPath.point({ volumeUUID, nodeUUID, sizeBytes: state.servedBytes, qos, ...(beforeGrowing ? { beforeGrowing } : {}) }, array);
  }

  /**
   * The QoS stage served a new device for the volume (the kernel had lost the old one): the
   * table moves onto it.
   */
  qosDeviceReplaced(volumeUUID: string): Promise<void> {
    return this.locked(volumeUUID, async () => {
      const state = this.primaries.get(volumeUUID);
      if (!state || isFencedAt(state) || this.leaseFenced) return;
      await this.qosPath.deviceReplaced(volumeUUID, state.servedBytes);
    });
  }

  /**
   * The primary's word on the assignment's QoS limits, undefined when this node is not the
   * volume's primary or there are none (qos-path.ts status: read back from the kernel now).
   */
  async qosStatus(volumeUUID: string): Promise<VolumeQosStatus | undefined> {
    const state = this.primaries.get(volumeUUID);
    if (!state) return undefined;
    const { nodeUUID, qos } = state.input;
    return this.qosPath.status({ volumeUUID, nodeUUID, sizeBytes: state.servedBytes, qos }, state.qosProblem);
  }

  /** Every in-sync copy at once (a promotion waits for the slowest, not for their sum): the ones reached, live, with their block devices. */
  private async dialInSyncCopies(input: ServeInput, remotes: readonly LegTarget[]): Promise<{ target: LegTarget; block: string }[]> {
    const connected = await Promise.all(
      remotes.map(async (target) => {
        if (!target.endpoint) return undefined;
        const leg = await this.connectInSyncLeg(input, target).catch((err: unknown) => {
          this.options.logger.warn({ err, volumeUUID: input.volumeUUID, replica: target.nodeUUID }, 'cannot reach a replica');
          return undefined;
        });
        return leg?.block && leg.controllerState === 'live' ? { target, block: leg.block } : undefined;
      }),
    );
    return connected.filter((r): r is { target: LegTarget; block: string } => r !== undefined);
  }

  /**
   * Connects an in-sync copy's leg. On a promotion (epoch 2 on) a copy that refuses is tried
   * again for a moment: its node relinks its export to the new primary on the same replica-set
   * change this node acts on, and this node often dials first. Recording such a copy out of sync
   * would leave a 3-copy volume with one copy until its resync, for a race of milliseconds. The
   * leader only promotes with copies of Active nodes in sync, so the wait rarely runs out.
   */
  private connectInSyncLeg(input: ServeInput, target: LegTarget): Promise<LegDevice> {
    const promotion = input.replication.epoch > 1;
    const timeoutMs = this.options.promotionConnectTimeoutMs ?? DEFAULT_PROMOTION_CONNECT_TIMEOUT_MS;
    const connect = async (): Promise<LegDevice> => {
      const connecting = this.options.stack.connectLeg(target, this.hostNQNOf(input));
      // A connection that arrives after the deadline is found by the check below (not a member:
      // recorded out of sync, disconnected) or by the monitor, which re-adds it through a resync.
      const leg = promotion ? await withDeadline(connecting, timeoutMs, `connecting to the replica on node ${target.nodeUUID} did not finish within ${timeoutMs} ms`) : await connecting;
      if (!leg.block || leg.controllerState !== 'live') throw new Error(`the replica's device did not appear (controller ${leg.controller ?? 'none'}, ${leg.controllerState || 'no state'})`);
      return leg;
    };
    const waitMs = this.options.promotionLegWaitMs ?? DEFAULT_PROMOTION_LEG_WAIT_MS;
    if (!promotion || waitMs <= 0) return connect();
    const started = Date.now();
    return retry(connect, {
      backoff: { initialMs: PROMOTION_LEG_RETRY_MS, maxMs: PROMOTION_LEG_RETRY_MS, jitter: 0 },
      // A copy that did not answer in time is not tried again: the next attempt would wait as long.
      retryIf: (err) => !(err instanceof DeadlineExceeded) && Date.now() - started + PROMOTION_LEG_RETRY_MS <= waitMs,
      onRetry: (err, _delay, n) => {
        if (n === 1) this.options.logger.info({ err, volumeUUID: input.volumeUUID, replica: target.nodeUUID, waitMs }, 'an in-sync replica refused the new primary: trying again while it relinks its export');
      },
    });
  }

  /**
   * Out of the in-sync set in etcd, then out of md and disconnected (which fails the I/O queued on
   * the lost connection; md has stopped waiting for that leg by then). False when fenced.
   */
  private async takeOutOfSync(state: PrimaryVolume, nodes: string[], reason: string): Promise<boolean> {
    const { volumeUUID, replication, nodeUUID } = state.input;
    const outcome = await this.options.writer.markOutOfSync(volumeUUID, replication.epoch, nodeUUID, nodes, reason);
    if (outcome === 'fenced') {
      await this.fence(state);
      return false;
    }
    for (const n of nodes) state.inSync.delete(n);
    this.options.logger.warn({ volumeUUID, replicas: nodes, reason }, 'replica(s) recorded out of sync');
    const stack = this.options.stack;
    const loop = await stack.loopOf(state.input.backing.devicePath);
    const array = loop ? await stack.arrayOf(loop) : undefined;
    // The connection goes first: that fails the writes waiting on it, md marks the leg faulty and
    // completes them on the other legs. mdadm cannot do that part: its --fail and --remove wait
    // behind those writes (seen in the lab: a minute, until their timeout).
    for (const target of this.remoteTargets(state.input).filter((t) => nodes.includes(t.nodeUUID))) {
      await stack.disconnectLeg(target).catch((err: unknown) => this.options.logger.warn({ err, volumeUUID }, 'disconnecting a replica failed'));
    }
    if (array) await stack.removeGoneLegs(array);
    return true;
  }

  /** The host path serves nothing from now on; a fence that could not be had is said in the log. */
  private async stopServing(volumeUUID: string, sizeBytes: bigint): Promise<void> {
    const fallback = await this.options.stack.stopServing(volumeUUID, sizeBytes);
    if (fallback) this.options.logger.error({ err: fallback, volumeUUID }, 'the replication fence cannot be made: the host path serves the error target (512-byte blocks) instead');
  }

  /** This node is not the primary of the epoch any more: stop serving the host at once. */
  private async fence(state: PrimaryVolume): Promise<void> {
    state.fencedAtEpoch = state.input.replication.epoch;
    await this.stopServing(state.input.volumeUUID, state.servedBytes);
    this.options.logger.error({ volumeUUID: state.input.volumeUUID, epoch: state.input.replication.epoch }, 'fenced: another node is the primary of this volume now; the host path serves errors');
  }

  /**
   * Stops the volume's mirror on this node, if it runs here: array, replica connections, loop.
   * `clean` (a planned hand-over): the array stops first, so every connected copy gets its final
   * superblock and bitmap. Otherwise (this node is no longer the primary, or the volume goes) the
   * connections go first: a copy that refuses this node now would hold md's last writes, and with
   * them the stop, for ever. `keepLoopOf`: the loop device over this backing file stays (a
   * replica's, made ahead of a promotion); any other of the volume's goes.
   */
  private async dismantlePrimary(volumeUUID: string, clean = false, keepLoopOf?: string): Promise<void> {
    const stack = this.options.stack;
    const loops = await stack.loopsOfVolume(volumeUUID);
    const legs = replicationSubsystemNQN(this.requireCluster(), volumeUUID, '');
    if (!clean) await stack.disconnectAll(legs);
    // The QoS server holds the array open (md would refuse to stop); the host path no longer
    // points at it (the fence, or no device at all), so its drain is quick.
    await this.options.qos?.stop(volumeUUID);
    const arrays = new Set<string>();
    for (const loop of loops) {
      const array = await stack.arrayOf(loop);
      if (array) {
        await stack.stopArray(array);
        arrays.add(loop);
      }
    }
    if (clean) await stack.disconnectAll(legs);
    const kept = keepLoopOf === undefined ? undefined : await stack.loopOf(keepLoopOf);
    for (const loop of loops) if (loop !== kept) await stack.detachLoop(loop);
    if (loops.some((loop) => loop !== kept || arrays.has(loop))) this.options.logger.info({ volumeUUID }, 'replicated volume stopped on this node');
  }

  // --- replica ------------------------------------------------------------------------------------

  private async serveReplica(input: ServeInput): Promise<ServeResult> {
    const stack = this.options.stack;
    // Was primary here (a failover moved it away while this node was cut off): stop serving the
    // host first, then take the mirror apart so the backing can be exported as a plain copy.
    // A grown volume's fence grows too (hosts see one size on every path); the replication
    // export's namespace re-reads the grown backing in the kernel pass that follows.
    const shown = fenceBytes(input);
    await stack.ensureDm(input.volumeUUID, await stack.fenceTable(shown), input.beforeGrowing);
    this.primaries.delete(input.volumeUUID);
    const backingFile = input.backing.devicePath;
    if (this.replicaOf.get(input.volumeUUID) !== backingFile) {
      await this.dismantlePrimary(input.volumeUUID, false, backingFile);
      this.replicaOf.set(input.volumeUUID, backingFile);
    }
    await this.warmLoop(input);
    const cluster = this.requireCluster();
    return {
      hostDevicePath: stack.hostDevicePath(input.volumeUUID),
      replicationExport: { nqn: replicationSubsystemNQN(cluster, input.volumeUUID, input.nodeUUID), primaryHostNQN: input.replication.primaryHostNQN },
      ...(shown < input.sizeBytes ? { awaiting: `the primary serves ${shown} of ${input.sizeBytes} bytes yet: this path shows that size until the primary's grows` } : {}),
    };
  }

  /**
   * A replica keeps a loop device over its backing (the replication export serves the file
   * itself; this device does no I/O until then): were this node promoted, its mirror is assembled
   * on it at once instead of first making it, 60-220 ms of a failover's pause measured in the lab.
   * Both open the file the same way (direct I/O unless it is compressed), so neither sees stale
   * data of the other. It goes when the volume leaves this node, the node is stopped, or the
   * backing file is replaced. Failing to make it costs only that time at a promotion.
   */
  private async warmLoop(input: ServeInput): Promise<void> {
    await this.options.stack.ensureLoop(input.backing.devicePath, input.backing.bufferedIo).catch((err: unknown) => {
      this.options.logger.warn({ err, volumeUUID: input.volumeUUID }, 'making the loop device ahead of a promotion failed: a promotion makes it');
    });
  }

  // --- the monitor --------------------------------------------------------------------------------

  private async monitor(): Promise<void> {
    let changed = false;
    if (this.primaries.size === 0) return;
    const view = await this.options.stack.snapshot();
    for (const volumeUUID of [...this.primaries.keys()]) {
      try {
        changed = (await this.locked(volumeUUID, () => this.watchLegs(volumeUUID, view))) || changed;
      } catch (err) {
        this.options.logger.warn({ err, volumeUUID }, 'checking replicas failed');
      }
    }
    if (changed) for (const l of this.listeners) l();
  }

  /**
   * One look at a primary's legs, from the interval's snapshot (the kernel is read again only
   * after this look changed something); true when what it reports changed.
   */
  private async watchLegs(volumeUUID: string, view: StackSnapshot): Promise<boolean> {
    const state = this.primaries.get(volumeUUID);
    if (!state || isFencedAt(state) || this.leaseFenced) return false;
    const { stack } = this.options;
    const loop = view.loopOf(state.input.backing.devicePath) ?? (await stack.loopOf(state.input.backing.devicePath));
    const array = loop ? await stack.arrayOf(loop) : undefined;
    if (!array) return false;
    const now = Date.now();
    let current = view;
    if (await this.dropUnassignedLegs(state, array, view)) current = await stack.snapshot();
    let arrayState = await stack.readArray(array);
    const lost: string[] = [];
    for (const target of this.remoteTargets(state.input)) {
      if (!state.inSync.has(target.nodeUUID)) continue;
      const leg = current.leg(target);
      const member = leg.block ? arrayState.members.find((m) => m.block === leg.block) : undefined;
      if (member?.flags.includes('faulty') || !member) {
        lost.push(target.nodeUUID);
      } else if (leg.controllerState !== 'live') {
        const since = state.downSince.get(target.nodeUUID) ?? now;
        state.downSince.set(target.nodeUUID, since);
        if (now - since >= this.options.legLossGraceMs) lost.push(target.nodeUUID);
      } else {
        state.downSince.delete(target.nodeUUID);
      }
    }
    if (lost.length > 0) {
      if (!(await this.takeOutOfSync(state, lost, `replica(s) ${lost.join(', ')} stopped answering the primary`))) return true;
      for (const n of lost) state.downSince.delete(n);
      arrayState = await stack.readArray(array);
      current = await stack.snapshot();
    }
    if (await this.rejoin(state, array, arrayState, now, current)) {
      arrayState = await stack.readArray(array);
      current = await stack.snapshot();
    }
    const legs = this.legStates(state, arrayState, current);
    const changed = JSON.stringify(legs) !== JSON.stringify(state.legs);
    state.legs = legs;
    return changed;
  }

  /**
   * Connections to copies of this volume on nodes its assignment no longer lists (a node replace,
   * or one that failed and gave its copies back, took that node out of the volume's node list and
   * its in-sync set in one transaction) go, and md's legs over them with them: such a copy may
   * still be served by a kernel whose agent stopped, so nothing else would take its leg out, and
   * its slot would turn the copy that replaces it into a spare that never syncs. True when it
   * dropped any.
   */
  private async dropUnassignedLegs(state: PrimaryVolume, array: string, view: StackSnapshot): Promise<boolean> {
    const { stack, logger } = this.options;
    const { volumeUUID } = state.input;
    const prefix = replicationSubsystemNQN(this.requireCluster(), volumeUUID, '');
    const assigned = new Set(this.remoteTargets(state.input).map((t) => t.nqn));
    const unassigned = view.connectedNQNs().filter((nqn) => nqn.startsWith(prefix) && !assigned.has(nqn));
    if (unassigned.length === 0) return false;
    // The connection first (it fails what waits on it), then the leg: as in takeOutOfSync.
    for (const nqn of unassigned) await stack.disconnectAll(nqn);
    await stack.removeGoneLegs(array);
    logger.warn({ volumeUUID, subsystems: unassigned }, 'copies no longer assigned to the volume dropped from its mirror');
    return true;
  }

  /** Out-of-sync copies that can be reached: connect, re-add, and once in sync, record it. True when it changed something. */
  private async rejoin(state: PrimaryVolume, array: string, arrayState: ArrayState, now: number, view: StackSnapshot): Promise<boolean> {
    const { stack, logger } = this.options;
    const { volumeUUID, replication, nodeUUID } = state.input;
    let acted = false;
    for (const target of this.remoteTargets(state.input)) {
      if (state.inSync.has(target.nodeUUID) || !target.endpoint) continue;
      let leg = view.leg(target);
      const member = leg.block ? arrayState.members.find((m) => m.block === leg.block) : undefined;
      if (member && member.flags.includes('in_sync') && !member.flags.includes('faulty') && arrayState.syncAction === 'idle') {
        acted = true;
        const outcome = await this.options.writer.markInSync(volumeUUID, replication.epoch, nodeUUID, target.nodeUUID, `replica ${target.nodeUUID} resynchronized`);
        if (outcome === 'fenced') await this.fence(state);
        else {
          state.inSync.add(target.nodeUUID);
          logger.info({ volumeUUID, replica: target.nodeUUID }, 'replica back in sync');
          resyncCompleted(volumeUUID, target.nodeUUID);
        }
        continue;
      }
      if (member && !member.flags.includes('faulty')) continue; // recovering
      if (member?.flags.includes('faulty')) {
        acted = true;
        await stack.removeGoneLegs(array);
        continue;
      }
      const eagerUntil = this.rejoinEager.get(target.nodeUUID) ?? 0;
      if (eagerUntil <= now) this.rejoinEager.delete(target.nodeUUID);
      const interval = now < eagerUntil ? 0 : this.options.rejoinIntervalMs;
      if (now - (state.lastRejoinAttempt.get(target.nodeUUID) ?? 0) < interval) continue;
      state.lastRejoinAttempt.set(target.nodeUUID, now);
      try {
        if (leg.controller && leg.controllerState !== 'live') continue; // reconnecting by itself
        acted = true;
        leg = await stack.connectLeg(target, this.hostNQNOf(state.input));
        if (!leg.block || leg.controllerState !== 'live') continue;
        await stack.addLeg(array, leg.block);
        logger.info({ volumeUUID, replica: target.nodeUUID }, 'replica re-added: resynchronizing what changed while it was away');
        resyncStarted(volumeUUID, target.nodeUUID);
      } catch (err) {
        logger.debug({ err, volumeUUID, replica: target.nodeUUID }, 'replica not reachable yet');
      }
    }
    return acted;
  }

  private legStates(state: PrimaryVolume, arrayState: ArrayState, view: Pick<StackSnapshot, 'leg'>): ReplicaLegStatus[] {
    const statuses: ReplicaLegStatus[] = [{ nodeUUID: state.input.nodeUUID, state: 'InSync', syncPercent: 100 }];
    for (const target of this.remoteTargets(state.input)) {
      const leg = view.leg(target);
      const member = leg.block ? arrayState.members.find((m) => m.block === leg.block) : undefined;
      if (state.inSync.has(target.nodeUUID)) statuses.push({ nodeUUID: target.nodeUUID, state: 'InSync', syncPercent: 100 });
      else if (member && !member.flags.includes('faulty') && arrayState.syncAction !== 'idle') {
        statuses.push({ nodeUUID: target.nodeUUID, state: 'Resyncing', syncPercent: Math.floor((arrayState.syncProgress ?? 0) * 100) });
      } else if (leg.controllerState === 'live') statuses.push({ nodeUUID: target.nodeUUID, state: 'OutOfSync', syncPercent: 0 });
      else statuses.push({ nodeUUID: target.nodeUUID, state: 'Unreachable', syncPercent: 0 });
    }
    return statuses.sort((a, b) => (a.nodeUUID < b.nodeUUID ? -1 : 1));
  }

  // ------------------------------------------------------------------------------------------------

  private remoteTargets(input: ServeInput): LegTarget[] {
    const cluster = this.requireCluster();
    return input.replication.legs
      .filter((l) => l.nodeUUID !== input.nodeUUID)
      .map((l) => ({ nodeUUID: l.nodeUUID, endpoint: l.endpoint, nqn: replicationSubsystemNQN(cluster, input.volumeUUID, l.nodeUUID) }));
  }

  private hostNQNOf(input: ServeInput): string {
    return nodeHostNQN(this.requireCluster(), input.nodeUUID);
  }

  private requireCluster(): string {
    const cluster = this.options.clusterSubsystemNQN();
    if (!cluster) throw new Error('the cluster is not known yet');
    return cluster;
  }

  /** One change at a time per volume: the reconciler's pass and the monitor share the devices. */
  private locked<T>(volumeUUID: string, work: () => Promise<T>): Promise<T> {
    return this.locks.run(volumeUUID, work);
  }
}

const BLOCK = BigInt(REPLICATED_BLOCK_BYTES);

/** How long after a server's return its copies are tried at every monitor look. */
const REJOIN_EAGER_MS = 120_000;

/** Fenced by etcd at the epoch this node still serves (a newer assignment lifts it). */
function isFencedAt(state: PrimaryVolume): boolean {
  return state.fencedAtEpoch !== undefined && state.fencedAtEpoch >= state.input.replication.epoch;
}
