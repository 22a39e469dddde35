// One pass of the data path's reconciler (reconciler.ts), in five phases, a module each:
//   1. backings (pass-backings.ts): check the assignments, prepare the backings that changed;
//   2. kernel target (pass-kernel.ts): 2a the IP ACLs, before the exports they let through;
//      2b nvmet: read the tree, plan, apply, read back;
//   3. verify (pass-verify.ts): what is still not as desired;
//   4. teardown (pass-teardown.ts): backings of volumes no longer assigned;
//   5. statuses (pass-statuses.ts): usage, connected hosts, the report's entries.
// reconciler.ts decides which pass runs and hands each phase's result to the next. This file
// holds what the phases share: the assignments, what passes keep from one to the next, what the
// reconciler lends them, and the phase timer.
import { stopwatch, type Lap } from '../../../lib/stopwatch.js';
import type { Logger } from '../../../lib/logger.js';
import type { VolumeAssignment, VolumeQosStatus } from '../../../lib/records.js';
import type { PresentedHostsView } from '../../discovery/presented-hosts.js';
import { reconcilePhaseDuration } from '../../metrics/agent-metrics.js';
import type { HostAuthSource } from '../kernel/host-auth.js';
import type { IpAclEnforcer, WantedIpAcl } from '../kernel/ip-acl-enforcer.js';
import type { NvmetConfigfs } from '../kernel/nvmet-configfs.js';
import type { DesiredExport } from '../kernel/nvmet-model.js';
import type { WorkTree } from '../kernel/nvmet-simulator.js';
import type { ClusterFacts } from '../pool/node-pools.js';
import type { StoragePool, VolumeUsage } from '../pool/storage-pool.js';
import type { WrittenCount } from '../replication/block-stack.js';
import type { ReplicaManager } from '../replication/replica-manager.js';
import type { SingleCopyPaths } from '../replication/single-copy.js';
import type { ConnectedHostsProbe } from './connected-hosts.js';
import type { DataPathState } from './datapath-state.js';
import type { ExportSettings } from './desired-state.js';
import type { VolumeStatusEntry } from './volume-report.js';

/** The reconciler's options a pass uses (DataPathReconcilerOptions has them all). */
export interface PassOptions {
  readonly nodeUUIDs: readonly string[];
  readonly state: DataPathState;
  readonly settings: ExportSettings;
  readonly connectedHosts?: ConnectedHostsProbe;
  /** The host NQNs hosts presented to this node's discovery controller, by address (names connected hosts). */
  readonly presentedHosts?: PresentedHostsView;
  /** The volume ports' IP ACLs (nftables). */
  readonly ipAcls: IpAclEnforcer;
  /** Replicated volumes (md raid1 over NVMe/TCP); without it they are reported Failed. */
  readonly replicas?: ReplicaManager;
  /**
   * Single-copy volumes' device-mapper stage (replication/single-copy.ts); without it (a target
   * the caller brings) their namespaces point straight at their files.
   */
  readonly singles?: SingleCopyPaths;
  /** In-band authentication (host-auth.ts); without it, no host entry gets a key. */
  readonly hostAuth?: HostAuthSource;
  readonly logger: Logger;
}

export interface AssignmentEntry {
  readonly nodeUUID: string;
  readonly volumeUUID: string;
  /** undefined: the record could not be parsed. */
  readonly assignment: VolumeAssignment | undefined;
}

/** A volume whose backing is ready, kept until its assignment changes or a full pass. */
export interface PreparedVolume {
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
  /** A replicated volume served at its old size while its mirror grows (replica-manager.ts growMirror): why. */
  readonly growing?: string;
  /** The backing file the pool made (a replicated volume's copy). */
  readonly backing: { readonly devicePath: string; readonly bufferedIo: boolean; readonly warning?: string };
  /** Last measured; undefined until measured. */
  usage?: VolumeUsage;
  /** Bytes written through a replicated volume's device while this node is its primary, as last measured. */
  written?: WrittenCount;
  /** The QoS policy's enforcement here, when this node is the primary of a volume with limits (read every pass). */
  qos?: VolumeQosStatus;
}

/** What passes keep from one to the next: the reconciler owns it, the phases read and update it. */
export interface PassMemory {
  /** volume/node → its prepared backing and export. */
  readonly prepared: Map<string, PreparedVolume>;
  /** The kernel target as last read back, kept between passes. */
  observed: WorkTree | undefined;
  /** node → its storage pool, once opened. */
  readonly pools: Map<string, StoragePool>;
  /** Volumes torn down by this process, reported Absent until a report listing them is acked. */
  readonly absent: Map<string, { nodeUUID: string; generation: number; sequence: number }>;
  /** volume → the node and generation of its last assignment seen. */
  readonly lastNodeOf: Map<string, { nodeUUID: string; generation: number }>;
  /**
   * Nodes being stopped (docs/node-operations.md): their volumes' kernel objects stay exactly as
   * they are (no pass prepares or changes them) while their primaries are handed over.
   */
  readonly frozenNodes: Set<string>;
  /** Stopped nodes: their volumes are not served (host paths and replication exports leave); backings stay. */
  readonly heldNodes: Set<string>;
  /** Volumes of held nodes whose device-mapper device and mirror were taken down. */
  readonly releasedHeld: Set<string>;
}

/** What the reconciler lends every pass. */
export interface PassContext {
  readonly options: PassOptions;
  readonly memory: PassMemory;
  /** The reconciler is stopping: no further configfs operation is applied. */
  readonly stopped: () => boolean;
  /** The node's storage pool, opened on first use (reconciler.ts poolOf). */
  readonly poolOf: (nodeUUID: string, cluster: ClusterFacts) => Promise<StoragePool>;
}

/** One pass: what every phase of it reads. */
export interface PassScope {
  /** Every backing checked and the whole kernel tree read back. */
  readonly full: boolean;
  readonly cluster: ClusterFacts;
  /** The cluster's volume subsystem NQN prefix. */
  readonly prefix: string;
  readonly configfs: NvmetConfigfs;
  /** The assignments of this server's nodes, by volume then node. */
  readonly entries: readonly AssignmentEntry[];
  readonly timer: PhaseTimer;
}

/** The reason a periodic full pass gives way (the watch aborts it with this). */
export class PassPreempted extends Error {}

/** Backings prepared (and usages measured) at the same time. */
export const BACKINGS_PREPARED_AT_ONCE = 8;

/** Milliseconds per step, in the pass's log line: where a slow pass spends its time. */
export class PhaseTimer {
  private readonly laps: Lap = stopwatch((name, ms) => reconcilePhaseDuration.labels(name).observe(ms / 1000));
  phases: Record<string, number> = {};

  lap(name: string): void {
    this.phases = this.laps(name);
  }
}

export function failedStatus(e: AssignmentEntry, error: string): VolumeStatusEntry {
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

/** The host path as served now: ANA-inaccessible while replication fences the volume. */
export function fenced(replicas: ReplicaManager | undefined, d: DesiredExport): DesiredExport {
  return replicas?.isFenced(d.volumeUUID) ? { ...d, port: { ...d.port, anaState: 'inaccessible' } } : d;
}

/**
 * Takes down the devices a volume is served through on this node (after its namespace is gone,
 * before its backing is): a replicated volume's mirror and device-mapper device, a single copy's
 * device-mapper and loop devices.
 */
export async function releaseDevices(ctx: PassContext, volumeUUID: string): Promise<void> {
  await ctx.options.replicas?.release(volumeUUID);
  await ctx.options.singles?.release(volumeUUID);
}
