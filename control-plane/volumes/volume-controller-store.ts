// What the volume controller (volume-controller.ts) reads and writes in etcd (docs/etcd-keys.md):
// the records it derives placement, assignments, replica sets, snapshot states and node replaces
// from, read from the process's watched state (the WatchCache's mirror: one watch per process,
// which must hold every prefix below), with per-volume indexes (a pass over 10,000 volumes must stay
// linear, or it blocks the event loop long enough to lose the lease, and leadership); and its
// writes, committed fenced by the leader's term and batched (lib/etcd/transaction.ts). The controller sees
// records, revisions and what changed, and writes records guarded on the revisions it read.
import { idOfKey, keys } from '../../lib/etcd/keys.js';
import type { PrefixMirror, MirroredRecord, MirrorChange } from '../../lib/etcd/prefix-mirror.js';
import { TransactionBatcher, type Committer, type Guard as RecordGuard, type Write as RecordWrite } from '../../lib/etcd/transaction.js';
import type {
  DeviceRecord,
  NodeCommandRecord,
  NodePoolRecord,
  NodeRecord,
  PresenceRecord,
  ProjectRecord,
  ReplicaSetRecord,
  SnapshotRecord,
  VolumeAssignment,
  VolumeRecord,
  VolumeStatusRecord,
} from '../../lib/records.js';
import type { PreparedEvent } from '../events/event-log-store.js';
import type { PolicyRecord } from '../policies/policy-record.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';

const PREFIXES = {
  volume: keys.volumesPrefix(),
  snapshot: keys.snapshotsPrefix(),
  status: keys.volumeStatusPrefix(),
  assignment: keys.assignmentsPrefix(),
  node: keys.nodesPrefix(),
  presence: keys.presencePrefix(),
  device: keys.devicesPrefix(),
  pool: keys.nodePoolsPrefix(),
  nsid: keys.nsidsPrefix(),
  port: keys.volumePortsPrefix(),
  replicaSet: keys.replicaSetsPrefix(),
  featureFlag: keys.featureFlagsPrefix(),
  nodeCommand: keys.nodeCommandsPrefix(),
  // QoS: the policies volumes name and the projects' default policies (assignments' limits).
  policy: keys.policiesPrefix(),
  project: keys.projectsPrefix(),
} as const;

/** What kind of record changed. */
export type ControllerRecordKind = keyof typeof PREFIXES;

/**
 * One changed record: `volumeUUID` for a volume, its assignments, status and replica set;
 * `snapshotUUID` for a snapshot; `id` (the key's last segment) for a policy or project.
 */
export interface ControllerChange {
  readonly kind: ControllerRecordKind;
  readonly volumeUUID?: string;
  readonly snapshotUUID?: string;
  readonly id?: string;
}

/** A record a write depends on, at the revision it was read ('0': the record must not exist). */
export type Guard =
  | { readonly volume: string; readonly revision: string }
  | { readonly replicaSet: string; readonly revision: string }
  | { readonly snapshot: string; readonly revision: string }
  | { readonly node: string; readonly revision: string }
  | { readonly nodeCommand: string; readonly revision: string }
  /** The server's presence key (its agent's lease). */
  | { readonly presence: string; readonly revision: string }
  | { readonly nsid: number; readonly revision: '0' }
  | { readonly port: number; readonly revision: '0' };

/** One record written or removed. */
export type Write =
  | { readonly volume: VolumeRecord }
  | { readonly replicaSet: ReplicaSetRecord; readonly volumeUUID: string }
  | { readonly snapshot: SnapshotRecord }
  | { readonly node: NodeRecord }
  | { readonly nodeCommand: NodeCommandRecord }
  | { readonly assignment: VolumeAssignment; readonly nodeUUID: string; readonly volumeUUID: string }
  /** The volume's namespace id and port, taken. */
  | { readonly nsid: number; readonly port: number; readonly volumeUUID: string }
  | { readonly removeAssignment: { readonly nodeUUID: string; readonly volumeUUID: string } }
  | { readonly removeReplicaSet: string }
  | { readonly removeSnapshot: string }
  /** The volume and everything kept for it: node reports, replica set, namespace id and port. */
  | { readonly removeVolume: VolumeRecord };

export class VolumeControllerStore {
  private readonly mirror: PrefixMirror;
  private readonly batcher: TransactionBatcher;
  private unsubscribe: (() => void) | undefined;

  /**
   * `cache`: the process's watched state (its mirror holds every prefix above), started;
   * `fencedCommit`: the leader's (LeaderElection.fencedCommit), from the composition root.
   */
  constructor(
    private readonly cache: WatchCache,
    fencedCommit: Committer,
  ) {
    this.mirror = cache.state;
    this.mirror.addIndex('assignments', PREFIXES.assignment, (key) => idOfKey(key));
    this.mirror.addIndex('status', PREFIXES.status, (key) => volumeOfStatusKey(key));
    this.mirror.addIndex('snapshots', PREFIXES.snapshot, (_key, record) => (record as SnapshotRecord).sourceVolumeUUID);
    this.mirror.addIndex('volumesOfProject', PREFIXES.volume, (_key, record) => (record as VolumeRecord).projectName);
    this.batcher = new TransactionBatcher(fencedCommit);
  }

  /**
   * Once the state holds every write committed before (a new leader looks at least at what its
   * predecessor wrote), `changed` with `reloaded` (look at everything), then after every batch
   * of changes (`reloaded`: anything may have changed). The first call and the subscription are
   * in the same tick: no change falls between them.
   */
  async start(changed: (changes: ControllerChange[], reloaded: boolean) => void): Promise<void> {
    await this.cache.sync();
    this.unsubscribe = this.mirror.onChange((changes, reloaded) => {
      const mine = changes.flatMap((change) => toChange(change) ?? []);
      if (reloaded || mine.length > 0) changed(mine, reloaded);
    });
    changed([], true);
  }

  /** Stops the calls; the process's state goes on for its other readers. */
  async stop(): Promise<void> {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  // ---- reads ----------------------------------------------------------------------------------

  volume(volumeUUID: string): MirroredRecord<VolumeRecord> | undefined {
    return this.mirror.get<VolumeRecord>(PREFIXES.volume, keys.volume(volumeUUID));
  }

  volumes(): Iterable<VolumeRecord> {
    return this.every<VolumeRecord>('volume');
  }

  /** Volumes with a replica set (replicated volumes). */
  replicatedVolumeUUIDs(): string[] {
    return this.ids('replicaSet');
  }

  /** Volumes named by an assignment or a node's report (a volume record gone leaves orphans). */
  assignedOrReportedVolumeUUIDs(): string[] {
    return [...this.ids('assignment'), ...[...this.mirror.all(PREFIXES.status).keys()].map(volumeOfStatusKey)];
  }

  replicaSet(volumeUUID: string): MirroredRecord<ReplicaSetRecord> | undefined {
    return this.mirror.get<ReplicaSetRecord>(PREFIXES.replicaSet, keys.replicaSet(volumeUUID));
  }

  snapshot(snapshotUUID: string): SnapshotRecord | undefined {
    return this.mirror.get<SnapshotRecord>(PREFIXES.snapshot, keys.snapshot(snapshotUUID))?.record;
  }

  snapshots(): Iterable<SnapshotRecord> {
    return this.every<SnapshotRecord>('snapshot');
  }

  snapshotsOf(volumeUUID: string): MirroredRecord<SnapshotRecord>[] {
    return [...this.mirror.lookup('snapshots', volumeUUID)].flatMap((key) => {
      const stored = this.mirror.get<SnapshotRecord>(PREFIXES.snapshot, key);
      return stored ? [stored] : [];
    });
  }

  /** The nodes' reports of a volume, by node. */
  statusOf(volumeUUID: string): Map<string, VolumeStatusRecord> {
    const result = new Map<string, VolumeStatusRecord>();
    for (const key of this.mirror.lookup('status', volumeUUID)) {
      const record = this.mirror.get<VolumeStatusRecord>(PREFIXES.status, key)?.record;
      if (record) result.set(record.nodeUUID, record);
    }
    return result;
  }

  status(volumeUUID: string, nodeUUID: string): VolumeStatusRecord | undefined {
    return this.mirror.get<VolumeStatusRecord>(PREFIXES.status, keys.volumeStatus(volumeUUID, nodeUUID))?.record;
  }

  assignment(nodeUUID: string, volumeUUID: string): VolumeAssignment | undefined {
    return this.mirror.get<VolumeAssignment>(PREFIXES.assignment, keys.assignment(nodeUUID, volumeUUID))?.record;
  }

  /** The nodes holding an assignment of the volume. */
  assignedNodes(volumeUUID: string): string[] {
    return [...this.mirror.lookup('assignments', volumeUUID)].map(nodeOfAssignmentKey);
  }

  node(nodeUUID: string): MirroredRecord<NodeRecord> | undefined {
    return this.mirror.get<NodeRecord>(PREFIXES.node, keys.node(nodeUUID));
  }

  /** A server's presence (its agent holds its lease). */
  presence(serverUUID: string): MirroredRecord<PresenceRecord> | undefined {
    return this.mirror.get<PresenceRecord>(PREFIXES.presence, keys.presence(serverUUID));
  }

  presences(): Iterable<PresenceRecord> {
    return this.every<PresenceRecord>('presence');
  }

  /** Every node, and (nodeUUIDs) the ids they are kept under. */
  nodes(): Iterable<NodeRecord> {
    return this.every<NodeRecord>('node');
  }

  nodeUUIDs(): string[] {
    return this.ids('node');
  }

  device(serial: string): DeviceRecord | undefined {
    return this.mirror.get<DeviceRecord>(PREFIXES.device, keys.device(serial))?.record;
  }

  pool(nodeUUID: string): NodePoolRecord | undefined {
    return this.mirror.get<NodePoolRecord>(PREFIXES.pool, keys.nodePool(nodeUUID))?.record;
  }

  nodeCommands(): Iterable<MirroredRecord<NodeCommandRecord>> {
    return this.mirror.all<NodeCommandRecord>(PREFIXES.nodeCommand).values();
  }

  /** A QoS policy (control-plane/policies/policy-record.ts); undefined when gone. */
  policy(policyUUID: string): Pick<PolicyRecord, 'limit'> | undefined {
    return this.mirror.get<PolicyRecord>(PREFIXES.policy, keys.policy(policyUUID))?.record;
  }

  project(name: string): ProjectRecord | undefined {
    return this.mirror.get<ProjectRecord>(PREFIXES.project, keys.project(name))?.record;
  }

  /** The UUIDs of a project's volumes. */
  volumesOfProject(projectName: string): string[] {
    return [...this.mirror.lookup('volumesOfProject', projectName)].map(idOfKey);
  }

  isFlagOn(name: string): boolean {
    return this.mirror.get<{ enabled: boolean }>(PREFIXES.featureFlag, keys.featureFlag(name))?.record.enabled === true;
  }

  /** Whether a volume holds the namespace id (as far as the watch has seen). */
  nsidTaken(nsid: number): boolean {
    return this.mirror.get(PREFIXES.nsid, keys.nsid(nsid)) !== undefined;
  }

  /** Whether a volume holds the port (as far as the watch has seen). */
  portTaken(port: number): boolean {
    return this.mirror.get(PREFIXES.port, keys.volumePort(port)) !== undefined;
  }

  /** Every record of a kind. */
  private *every<T>(kind: ControllerRecordKind): Iterable<T> {
    for (const { record } of this.mirror.all<T>(PREFIXES[kind]).values()) yield record;
  }

  /** The ids the records of a kind are kept under (the last segment of their key). */
  private ids(kind: ControllerRecordKind): string[] {
    return [...this.mirror.all(PREFIXES[kind]).keys()].map(idOfKey);
  }

  // ---- writes ---------------------------------------------------------------------------------

  /**
   * Commits the writes, with the event if any, fenced by the leader's term and when every guard
   * holds; false when one did not (the caller looks again once the watch caught up).
   */
  commit(guards: readonly Guard[], writes: readonly Write[], event?: PreparedEvent | null): Promise<boolean> {
    return this.batcher.submit({ guards: guards.map(guardOf), writes: [...writes.flatMap(writesOf), ...(event?.writes ?? [])] });
  }
}

function writesOf(write: Write): RecordWrite[] {
  const put = (key: string, value: unknown): RecordWrite => ({ put: key, value });
  const remove = (key: string): RecordWrite => ({ delete: key });
  if ('volume' in write) return [put(keys.volume(write.volume.UUID), write.volume)];
  if ('replicaSet' in write) return [put(keys.replicaSet(write.volumeUUID), write.replicaSet)];
  if ('snapshot' in write) return [put(keys.snapshot(write.snapshot.UUID), write.snapshot)];
  if ('node' in write) return [put(keys.node(write.node.UUID), write.node)];
  if ('nodeCommand' in write) return [put(keys.nodeCommand(write.nodeCommand.nodeUUID), write.nodeCommand)];
  if ('assignment' in write) return [put(keys.assignment(write.nodeUUID, write.volumeUUID), write.assignment)];
  if ('nsid' in write) return [put(keys.nsid(write.nsid), { volumeUUID: write.volumeUUID }), put(keys.volumePort(write.port), { volumeUUID: write.volumeUUID })];
  if ('removeAssignment' in write) return [remove(keys.assignment(write.removeAssignment.nodeUUID, write.removeAssignment.volumeUUID))];
  if ('removeReplicaSet' in write) return [remove(keys.replicaSet(write.removeReplicaSet))];
  if ('removeSnapshot' in write) return [remove(keys.snapshot(write.removeSnapshot))];
  const volume = write.removeVolume;
  const writes = [remove(keys.volume(volume.UUID)), { deletePrefix: keys.volumeStatusPrefix(volume.UUID) }, remove(keys.replicaSet(volume.UUID))];
  if (volume.placement) writes.push(remove(keys.nsid(volume.placement.nsid)), remove(keys.volumePort(volume.placement.port)));
  return writes;
}

function guardOf(guard: Guard): RecordGuard {
  const key =
    'volume' in guard ? keys.volume(guard.volume)
    : 'replicaSet' in guard ? keys.replicaSet(guard.replicaSet)
    : 'snapshot' in guard ? keys.snapshot(guard.snapshot)
    : 'node' in guard ? keys.node(guard.node)
    : 'nodeCommand' in guard ? keys.nodeCommand(guard.nodeCommand)
    : 'presence' in guard ? keys.presence(guard.presence)
    : 'nsid' in guard ? keys.nsid(guard.nsid)
    : keys.volumePort(guard.port);
  return { key, revision: guard.revision };
}

/** The controller's view of a change; undefined for a prefix it does not read (the state holds more). */
function toChange(change: MirrorChange): ControllerChange | undefined {
  const kind = (Object.keys(PREFIXES) as ControllerRecordKind[]).find((k) => PREFIXES[k] === change.prefix);
  if (kind === undefined) return undefined;
  if (kind === 'status') return { kind, volumeUUID: volumeOfStatusKey(change.key) };
  if (kind === 'volume' || kind === 'assignment' || kind === 'replicaSet') return { kind, volumeUUID: idOfKey(change.key) };
  if (kind === 'snapshot') return { kind, snapshotUUID: idOfKey(change.key) };
  if (kind === 'policy' || kind === 'project') return { kind, id: idOfKey(change.key) };
  return { kind };
}

function volumeOfStatusKey(key: string): string {
  const parts = key.slice(keys.volumeStatusPrefix().length).split('/');
  return parts[0] ?? '';
}

function nodeOfAssignmentKey(key: string): string {
  const parts = key.slice(keys.assignmentsPrefix().length).split('/');
  return parts[0] ?? '';
}
