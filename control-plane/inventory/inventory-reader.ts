// The store the inventory resources share (/servers, /nodes, /nvmeDevices, /cluster,
// /clusterinfo): every record they are built from, read in ONE etcd transaction, so each
// response is a view of a single revision (a node can never be Active in /nodes while its
// server's presence, read a moment later, says otherwise).
//
// Speed. At 100 servers (400 nodes, 2,400 devices, ~1 MB of records) a full read takes
// ~35-45 ms on a 2-vCPU VM, most of it in the client decoding kvs (grpc-js/protobufjs, int64
// revisions to strings) and parsing JSON. So the reader keeps the last snapshot and each read
// asks etcd only for what changed since: per prefix, the kvs whose mod_revision is newer
// than the snapshot's revision, and the prefix's key count, all in one transaction (one
// revision R). Any change since the snapshot is a put (the key comes back with its new
// mod_revision) or a delete; deletes show as a count smaller than the old keys plus the new
// ones, and then that prefix's keys are listed at the same revision R (a keys-only range
// pinned to R), so the result is still exactly the store at R. Unchanged prefixes reuse the
// previous maps and parsed records. Anything unexpected (first read, compaction past R, a
// count that still disagrees) falls back to a full read. An unchanged read then costs ~10 ms
// at that size: etcd still scans a prefix's values to apply the mod_revision filter (~8 ms
// for 2,400 devices), plus a ~2 ms round trip; the inventory-reader test logs the figures.
// Going lower means a watch-fed in-memory mirror.
//
// It takes a KvClient like the other stores and reads only through the Kv (a full read:
// Kv.readKeyAndPrefixes; what changed: Kv.changesAfter, then Kv.keysAt for a prefix that lost
// keys), so it reads the same way on etcd (the daemons) and on the in-memory etcd of the
// domain's unit tests.
import { keys, idOfKey } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { kvOf, type Kv, type KvClient, type StoredKey } from '../../lib/etcd/kv.js';
import type {
  ClusterRecord,
  ControlPlaneRecord,
  DeviceRecord,
  NodeCommandRecord,
  NodePoolRecord,
  NodeRecord,
  NodeRunStateRecord,
  PresenceRecord,
  ServerFactsRecord,
  ServerRecord,
} from '../../lib/records.js';

/** A record with the etcd key and mod_revision it was read at (the source of its ETag). */
export interface Stored<T> {
  readonly record: T;
  readonly key: string;
  /** etcd mod_revision of the key, a decimal string. */
  readonly modRevision: string;
}

/**
 * Everything the inventory resources need, from one etcd revision. Maps are keyed by the
 * record's id (UUID, serial, instance id) and iterate in etcd key order. Snapshots are
 * shared between readers: treat them as immutable.
 */
export interface InventorySnapshot {
  /** The etcd revision the snapshot was read at. */
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

/** What the resource services depend on: anything that can produce a snapshot. */
export interface InventorySource {
  read(): Promise<InventorySnapshot>;
}

type Part = 'servers' | 'serverFacts' | 'nodes' | 'devices' | 'presence' | 'controlPlanes' | 'nodePools' | 'nodeCommands' | 'nodeRunStates';
type PartMap = ReadonlyMap<string, Stored<unknown>>;

const parts: readonly { readonly part: Part; readonly prefix: string }[] = [
  { part: 'servers', prefix: keys.serversPrefix() },
  { part: 'serverFacts', prefix: keys.serverFactsPrefix() },
  { part: 'nodes', prefix: keys.nodesPrefix() },
  { part: 'devices', prefix: keys.devicesPrefix() },
  { part: 'presence', prefix: keys.presencePrefix() },
  { part: 'controlPlanes', prefix: keys.controlPlanesPrefix() },
  { part: 'nodePools', prefix: keys.nodePoolsPrefix() },
  { part: 'nodeCommands', prefix: keys.nodeCommandsPrefix() },
  { part: 'nodeRunStates', prefix: keys.nodeRunStatesPrefix() },
];
const prefixes = parts.map(({ prefix }) => prefix);

export class InventoryReader implements InventorySource {
  /** The newest snapshot read so far: the base of the next incremental read. */
  private latest: InventorySnapshot | null = null;
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  async read(): Promise<InventorySnapshot> {
    const base = this.latest;
    const snapshot = (base && (await this.readChanges(base))) ?? (await this.readAll());
    // Concurrent reads may finish out of order: keep the newest as the base.
    if (!this.latest || BigInt(snapshot.revision) > BigInt(this.latest.revision)) this.latest = snapshot;
    return snapshot;
  }

  /** Every record, at one revision. */
  async readAll(): Promise<InventorySnapshot> {
    const { revision, key: cluster, ranges } = await this.kv.readKeyAndPrefixes(keys.cluster(), prefixes);
    const maps = new Map<Part, PartMap>();
    parts.forEach(({ part }, i) => maps.set(part, byId(ranges[i]!)));
    return assemble(revision, cluster, maps);
  }

  /** What changed since `base`, applied to it; null when only a full read will do. */
  private async readChanges(base: InventorySnapshot): Promise<InventorySnapshot | null> {
    const { revision, key: cluster, changed, counts } = await this.kv.changesAfter(keys.cluster(), prefixes, base.revision);
    // A store whose revision went backwards is not the one the base was read from (etcd
    // restored or replaced): start over.
    if (BigInt(revision) < BigInt(base.revision)) return null;
    const maps = new Map<Part, PartMap>();
    for (const [i, { part, prefix }] of parts.entries()) {
      const count = counts[i]!;
      const previous = base[part] as PartMap;
      if (changed[i]!.length === 0 && count === previous.size) {
        maps.set(part, previous);
        continue;
      }
      const map = new Map(previous);
      let added = false;
      for (const kv of changed[i]!) {
        const entry = stored<unknown>(kv);
        const id = idOfKey(entry.key);
        if (!map.has(id)) added = true;
        map.set(id, entry);
      }
      if (map.size !== count) {
        // Keys were deleted: list the prefix's keys at the same revision and drop the others.
        const present = await this.kv.keysAt(prefix, revision);
        if (present === null) return null;
        const ids = new Set(present.map(idOfKey));
        for (const id of [...map.keys()]) if (!ids.has(id)) map.delete(id);
        if (map.size !== count) return null;
      }
      maps.set(part, added ? sortedByKey(map) : map);
    }
    return assemble(revision, cluster, maps);
  }
}

function assemble(revision: string, clusterKv: StoredKey | null, maps: Map<Part, PartMap>): InventorySnapshot {
  const get = <T>(part: Part) => maps.get(part) as ReadonlyMap<string, Stored<T>>;
  return {
    revision,
    cluster: clusterKv ? stored<ClusterRecord>(clusterKv) : null,
    servers: get<ServerRecord>('servers'),
    serverFacts: get<ServerFactsRecord>('serverFacts'),
    nodes: get<NodeRecord>('nodes'),
    devices: get<DeviceRecord>('devices'),
    presence: get<PresenceRecord>('presence'),
    controlPlanes: get<ControlPlaneRecord>('controlPlanes'),
    nodePools: get<NodePoolRecord>('nodePools'),
    nodeCommands: get<NodeCommandRecord>('nodeCommands'),
    nodeRunStates: get<NodeRunStateRecord>('nodeRunStates'),
  };
}

function stored<T>({ key, value, modRevision }: StoredKey): Stored<T> {
  // parseRecord returns null only for a null value, which a range never yields.
  return { record: parseRecord<T>(key, value) as T, key, modRevision };
}

/** Records by the last segment of their key (the id; device keys are URI-encoded serials). */
function byId<T>(kvs: readonly StoredKey[]): Map<string, Stored<T>> {
  const map = new Map<string, Stored<T>>();
  for (const kv of kvs) {
    const entry = stored<T>(kv);
    map.set(idOfKey(entry.key), entry);
  }
  return map;
}

/** Back in etcd key order after new keys were appended (keys are ASCII: code-unit order = byte order). */
function sortedByKey<T>(map: Map<string, Stored<T>>): Map<string, Stored<T>> {
  return new Map([...map].sort(([, a], [, b]) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)));
}
