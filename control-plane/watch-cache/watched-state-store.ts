// The control plane's one watched state (issue 14 item 1; the agent's is agent/agent-state-store.ts):
// every etcd key a control-plane process reads on its hot paths, mirrored in memory by ONE
// PrefixMirror (lib/etcd/prefix-mirror.ts: read in one transaction, then kept current by ONE watch
// from the next revision, read again after a watch failure). This is the one file of the read side
// that knows the key layout: it names the prefixes and single keys mirrored, and offers their
// records by domain ids. The WatchCache (watch-cache.ts: this, plus the requests' sync() barrier)
// and the InventoryReader read through it; the stores of the other readers (volume controller,
// leader election, membership events, snapshot retention, the corruption scanner) are lent
// `state` and name their own keys, which must be among the ones below.
//
// The prefixes are fixed when the state is built, so the lists below name every prefix and key
// any reader of the process follows.
import { idOfKey, keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { PrefixMirror, lowerBound, type MirroredRecord } from '../../lib/etcd/prefix-mirror.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import type { Logger } from '../../lib/logger.js';
import type {
  ClusterRecord,
  ControlPlaneRecord,
  CredentialRecord,
  DeviceRecord,
  NodeCommandRecord,
  NodePoolRecord,
  NodeRecord,
  NodeRunStateRecord,
  PresenceRecord,
  ProjectRecord,
  ReplicaSetRecord,
  ServerFactsRecord,
  ServerRecord,
  VolumeRecord,
  VolumeStatusRecord,
} from '../../lib/records.js';

/** A policy record as this state needs it (policies/ owns the full shape). */
export interface NamedRecord {
  UUID: string;
  name: string;
}

/** A record with the etcd key and mod_revision it was read at (the source of its ETag). */
export interface Stored<T> {
  readonly record: T;
  readonly key: string;
  /** etcd mod_revision of the key, a decimal string. */
  readonly modRevision: string;
}

const PREFIXES = {
  credentials: keys.credentialsPrefix(),
  projects: keys.projectsPrefix(),
  policies: keys.policiesPrefix(),
  presence: keys.presencePrefix(),
  nodes: keys.nodesPrefix(),
  servers: keys.serversPrefix(),
  // The inventory's (InventoryReader) beside the ones above: /servers, /nodes, /nvmeDevices, /cluster.
  serverFacts: keys.serverFactsPrefix(),
  controlPlanes: keys.controlPlanesPrefix(),
  nodeRunStates: keys.nodeRunStatesPrefix(),
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
} as const;

/**
 * Keys held alone, not as prefixes: the cluster record (its key begins the cluster CA's, which
 * holds the CA's private key: never mirrored), the leader key (leader election) and the
 * corruption scanner's request.
 */
const SINGLE_KEYS = {
  cluster: keys.cluster(),
  leader: keys.leader(),
  etcdCorruptionScanRequest: keys.etcdCorruptionScanRequest(),
} as const;

/**
 * Everything the inventory resources need (InventoryReader), from one etcd revision. Maps are
 * keyed by the record's id (UUID, serial, instance id) and iterate in etcd key order. Snapshots
 * are shared between readers: treat them as immutable.
 */
export interface InventorySnapshot {
  /** The etcd revision the snapshot holds every change up to. */
  readonly revision: string;
  /** Null only before bootstrap. */
  readonly cluster: Stored<ClusterRecord> | null;
  readonly servers: ReadonlyMap<string, Stored<ServerRecord>>;
  /** By server UUID. */
  readonly serverFacts: ReadonlyMap<string, Stored<ServerFactsRecord>>;
  readonly nodes: ReadonlyMap<string, Stored<NodeRecord>>;
  /** By serial. */
  readonly devices: ReadonlyMap<string, Stored<DeviceRecord>>;
  /** By server UUID; a key exists while the server's agent holds its lease. */
  readonly presence: ReadonlyMap<string, Stored<PresenceRecord>>;
  /** By instance id; leased, so only running instances. */
  readonly controlPlanes: ReadonlyMap<string, Stored<ControlPlaneRecord>>;
  /** By node UUID: the node's storage pool as its agent last measured it. */
  readonly nodePools: ReadonlyMap<string, Stored<NodePoolRecord>>;
  /** By node UUID: the last command an administrator gave the node (docs/node-operations.md). */
  readonly nodeCommands: ReadonlyMap<string, Stored<NodeCommandRecord>>;
  /** By node UUID: what the node's agent did about it. */
  readonly nodeRunStates: ReadonlyMap<string, Stored<NodeRunStateRecord>>;
}

/** The inventory's maps (InventorySnapshot), each with the prefix it is built from. */
const INVENTORY: { readonly [P in Exclude<keyof InventorySnapshot, 'revision' | 'cluster'>]: string } = {
  servers: PREFIXES.servers,
  serverFacts: PREFIXES.serverFacts,
  nodes: PREFIXES.nodes,
  devices: PREFIXES.devices,
  presence: PREFIXES.presence,
  controlPlanes: PREFIXES.controlPlanes,
  nodePools: PREFIXES.nodePools,
  nodeCommands: PREFIXES.nodeCommands,
  nodeRunStates: PREFIXES.nodeRunStates,
};

export type InventoryPart = keyof typeof INVENTORY;
export const INVENTORY_PARTS = Object.keys(INVENTORY) as InventoryPart[];

const INDEX_POLICY_NAME = 'policy-by-name';
const INDEX_VOLUME_NAME = 'volume-by-project-and-name';
const INDEX_STATUS_VOLUME = 'status-by-volume';

export class WatchedStateStore {
  /** The process's watched state: the stores of other readers are views of it (see the top). */
  readonly state: PrefixMirror;
  /**
   * The Stored form of each mirrored entry, with its id, made once: the mirror replaces an entry
   * when its key changes, so an unchanged record keeps its Stored object from read to read.
   */
  private readonly storedForm = new WeakMap<MirroredRecord<unknown>, { readonly id: string; readonly stored: Stored<unknown> }>();

  /** `client`: etcd in the daemons, a test's Kv (test/fakes/memory-etcd.ts) in unit tests. */
  constructor(client: KvClient, logger: Logger) {
    this.state = new PrefixMirror(client, [...Object.values(PREFIXES), ...Object.values(SINGLE_KEYS).map((key) => ({ key }))], logger, { everyRevision: true });
    this.state.keepSorted(PREFIXES.volumes);
    // The inventory lists in etcd key order, as a range read would.
    for (const prefix of Object.values(INVENTORY)) this.state.keepSorted(prefix);
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

  // --- The inventory (InventoryReader): records with their keys, by id, in key order ---

  /** The cluster record with its key and revision; null before bootstrap. */
  cluster(): Stored<ClusterRecord> | null {
    const entry = this.state.get<ClusterRecord>(SINGLE_KEYS.cluster, SINGLE_KEYS.cluster);
    return entry ? (this.storedOf(SINGLE_KEYS.cluster, entry).stored as Stored<ClusterRecord>) : null;
  }

  /** Moves whenever a record of the cluster record or of `part` changes (see PrefixMirror.changeCount). */
  changeCount(part: InventoryPart | 'cluster'): number {
    return this.state.changeCount(part === 'cluster' ? SINGLE_KEYS.cluster : INVENTORY[part]);
  }

  /**
   * The records of `part` by id (the last segment of the key, decoded: a device's serial), in
   * etcd key order. The records are the state's own: treat them as immutable.
   */
  inventory<P extends InventoryPart>(part: P): InventorySnapshot[P] {
    const prefix = INVENTORY[part];
    const map = new Map<string, Stored<unknown>>();
    for (const key of this.state.sortedKeys(prefix)) {
      const entry = this.state.get<unknown>(prefix, key);
      if (!entry) continue;
      const { id, stored } = this.storedOf(key, entry);
      map.set(id, stored);
    }
    return map as InventorySnapshot[P];
  }

  private storedOf(key: string, entry: MirroredRecord<unknown>): { readonly id: string; readonly stored: Stored<unknown> } {
    let form = this.storedForm.get(entry);
    if (!form) {
      form = { id: idOfKey(key), stored: { record: entry.record, key, modRevision: entry.revision } };
      this.storedForm.set(entry, form);
    }
    return form;
  }

  private versioned<T>(prefix: string, key: string): Versioned<T> | null {
    const mirrored: MirroredRecord<T> | undefined = this.state.get<T>(prefix, key);
    return mirrored ? { key, record: mirrored.record, revision: mirrored.revision } : null;
  }
}

function volumeNameKey(project: string, name: string): string {
  return `${project}\u0000${name}`;
}
