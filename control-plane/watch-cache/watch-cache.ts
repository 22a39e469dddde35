// The process's one watched state, and the API's read model over it. Every reader in a control
// plane process reads the one PrefixMirror this cache holds (`state`), fed by ONE etcd watch:
// the API's requests (this class's reads), the volume controller (volume-controller-store.ts),
// leader election (the leader key), membership events, snapshot retention and the etcd
// corruption scanner. Its prefixes are fixed when it is built, so the list below names every
// prefix any of them reads (docs/decisions.md, issue 14: one watched state per process).
//
// A request reads after one barrier, sync(): a cheap linearizable read of etcd's current
// revision, then a wait until the watch has delivered it. So every read sees every write
// committed before the request arrived, wherever it was made (another control plane, an
// agent's report, a test writing etcd directly) — deleting a credential still locks its tokens
// out at once — and costs one small round trip instead of one per record. (Kubernetes' API
// server serves "consistent reads from cache" the same way.)
//
// Writes go to etcd as before, guarded by transactions on the revisions read here; a stale
// read only ever makes a guarded write fail and retry.
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { PrefixMirror, lowerBound, type MirroredRecord } from '../../lib/etcd/prefix-mirror.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import type { Logger } from '../../lib/logger.js';
import type {
  CredentialRecord,
  NodeRecord,
  ServerRecord,
  PresenceRecord,
  DeviceRecord,
  NodePoolRecord,
  ReplicaSetRecord,
  ProjectRecord,
  VolumeRecord,
  VolumeStatusRecord,
} from '../../lib/records.js';

/** A policy record as this cache needs it (policies/ owns the full shape). */
export interface NamedRecord {
  UUID: string;
  name: string;
}

const PREFIXES = {
  credentials: keys.credentialsPrefix(),
  projects: keys.projectsPrefix(),
  policies: keys.policiesPrefix(),
  presence: keys.presencePrefix(),
  nodes: keys.nodesPrefix(),
  servers: keys.serversPrefix(),
  volumes: keys.volumesPrefix(),
  volumeStatus: keys.volumeStatusPrefix(),
  replicaSets: keys.replicaSetsPrefix(),
  nodePools: keys.nodePoolsPrefix(),
  devices: keys.devicesPrefix(),
  // Read by the leader's tasks only, but held by every process: one watch serves them all.
  snapshots: keys.snapshotsPrefix(),
  assignments: keys.assignmentsPrefix(),
  nsids: keys.nsidsPrefix(),
  volumePorts: keys.volumePortsPrefix(),
  featureFlags: keys.featureFlagsPrefix(),
  nodeCommands: keys.nodeCommandsPrefix(),
  // Single keys (no other key starts with them): leader election and the corruption scanner.
  leader: keys.leader(),
  etcdCorruptionScanRequest: keys.etcdCorruptionScanRequest(),
} as const;

const INDEX_POLICY_NAME = 'policy-by-name';
const INDEX_VOLUME_NAME = 'volume-by-project-and-name';
const INDEX_STATUS_VOLUME = 'status-by-volume';

/** How long sync() waits for the watch before it reads everything again. */
const WATCH_LAG_LIMIT_MS = 2000;

export class WatchCache {
  /** The process's watched state: the stores of other readers are views of it (see the top). */
  readonly state: PrefixMirror;
  private inflight: Promise<void> | undefined;
  private queued: Promise<void> | undefined;

  /** `client`: etcd in the daemons, a test's Kv (test/fakes/memory-etcd.ts) in unit tests. */
  constructor(
    client: KvClient,
    private readonly logger: Logger,
  ) {
    this.state = new PrefixMirror(client, Object.values(PREFIXES), logger, { everyRevision: true });
    this.state.keepSorted(PREFIXES.volumes);
    this.state.addIndex(INDEX_POLICY_NAME, PREFIXES.policies, (_key, record) => (record as NamedRecord).name);
    this.state.addIndex(INDEX_VOLUME_NAME, PREFIXES.volumes, (_key, record) => volumeNameKey((record as VolumeRecord).projectName, (record as VolumeRecord).name));
    // volume-status/<volume UUID>/<node UUID>
    this.state.addIndex(INDEX_STATUS_VOLUME, PREFIXES.volumeStatus, (key) => key.slice(PREFIXES.volumeStatus.length).split('/')[0]);
  }

  start(): Promise<void> {
    return this.state.start();
  }

  stop(): Promise<void> {
    return this.state.stop();
  }

  /**
   * Resolves once the cache holds every write committed to etcd before this call. Concurrent
   * callers share barriers: a barrier whose revision read began before a call cannot vouch for
   * it, so such a call joins the next one (at most two are pending at any time).
   */
  sync(): Promise<void> {
    if (!this.inflight) {
      this.inflight = this.barrier().finally(() => {
        this.inflight = undefined;
      });
      return this.inflight;
    }
    this.queued ??= this.inflight
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return this.sync();
      });
    return this.queued;
  }

  /** The mirror's own barrier: etcd's current revision (a linearizable read), then the watch's delivery of it. */
  private barrier(): Promise<void> {
    return this.state.catchUp(WATCH_LAG_LIMIT_MS);
  }

  credential(project: string, name: string): Versioned<CredentialRecord> | null {
    return this.versioned<CredentialRecord>(PREFIXES.credentials, keys.credential(project, name));
  }

  project(name: string): Versioned<ProjectRecord> | null {
    return this.versioned<ProjectRecord>(PREFIXES.projects, keys.project(name));
  }

  policy<T extends NamedRecord>(UUID: string): Versioned<T> | null {
    return this.versioned<T>(PREFIXES.policies, keys.policy(UUID));
  }

  policyNamed<T extends NamedRecord>(name: string): Versioned<T> | null {
    for (const key of this.state.lookup(INDEX_POLICY_NAME, name)) return this.versioned<T>(PREFIXES.policies, key);
    return null;
  }

  presence(): PresenceRecord[] {
    return [...this.state.all<PresenceRecord>(PREFIXES.presence).values()].map((m) => m.record);
  }

  nodes(): NodeRecord[] {
    return [...this.state.all<NodeRecord>(PREFIXES.nodes).values()].map((m) => m.record);
  }

  node(UUID: string): NodeRecord | null {
    return this.state.get<NodeRecord>(PREFIXES.nodes, keys.node(UUID))?.record ?? null;
  }

  /** A node's storage pool as its agent last measured it. */
  nodePool(nodeUUID: string): NodePoolRecord | null {
    return this.state.get<NodePoolRecord>(PREFIXES.nodePools, keys.nodePool(nodeUUID))?.record ?? null;
  }

  /** An NVMe device as its agent last reported it. */
  device(serial: string): DeviceRecord | null {
    return this.state.get<DeviceRecord>(PREFIXES.devices, keys.device(serial))?.record ?? null;
  }

  server(UUID: string): ServerRecord | null {
    return this.state.get<ServerRecord>(PREFIXES.servers, keys.server(UUID))?.record ?? null;
  }

  volume(UUID: string): Versioned<VolumeRecord> | null {
    return this.versioned<VolumeRecord>(PREFIXES.volumes, keys.volume(UUID));
  }

  /** Every volume record (any state) named `name` in `project`. */
  volumesNamed(project: string, name: string): Versioned<VolumeRecord>[] {
    return [...this.state.lookup(INDEX_VOLUME_NAME, volumeNameKey(project, name))].map((key) => this.versioned<VolumeRecord>(PREFIXES.volumes, key)!);
  }

  /** Volume records in UUID (key) order, starting after the volume `afterUUID`. */
  *volumesInOrder(afterUUID?: string): Generator<Versioned<VolumeRecord>> {
    const sorted = this.state.sortedKeys(PREFIXES.volumes);
    let at = 0;
    if (afterUUID !== undefined) {
      const after = keys.volume(afterUUID);
      at = lowerBound(sorted, after);
      if (sorted[at] === after) at++;
    }
    // The array is live: a change between two yields shifts it. Resume after the last key seen.
    for (let last: string | undefined; ; ) {
      if (last !== undefined && sorted[at - 1] !== last) {
        at = lowerBound(sorted, last);
        if (sorted[at] === last) at++;
      }
      const key = sorted[at];
      if (key === undefined) return;
      at++;
      last = key;
      const volume = this.versioned<VolumeRecord>(PREFIXES.volumes, key);
      if (volume) yield volume;
    }
  }

  /** A replicated volume's replica set (undefined for one copy). */
  replicaSet(volumeUUID: string): ReplicaSetRecord | undefined {
    return this.state.get<ReplicaSetRecord>(PREFIXES.replicaSets, keys.replicaSet(volumeUUID))?.record;
  }

  /** What the nodes last reported for a volume. */
  statusesOf(volumeUUID: string): VolumeStatusRecord[] {
    return [...this.state.lookup(INDEX_STATUS_VOLUME, volumeUUID)].flatMap((key) => {
      const status = this.state.get<VolumeStatusRecord>(PREFIXES.volumeStatus, key);
      return status ? [status.record] : [];
    });
  }

  private versioned<T>(prefix: string, key: string): Versioned<T> | null {
    const mirrored: MirroredRecord<T> | undefined = this.state.get<T>(prefix, key);
    return mirrored ? { key, record: mirrored.record, revision: mirrored.revision } : null;
  }
}

function volumeNameKey(project: string, name: string): string {
  return `${project}\u0000${name}`;
}
