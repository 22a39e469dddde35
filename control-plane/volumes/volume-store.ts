// Volumes in etcd (docs/volume-lifecycle.md): `volumes/<UUID>` (VolumeRecord) and the per-project
// name index `volume-names/<project>/<name>` → {"UUID"}, always changed in the same transaction
// as the record. The index exists while the volume is not Deleting, so a name is free again the
// moment its volume starts Deleting. The API writes nothing else; what the data path reports
// (`volume-status/<UUID>/<node>`), node records and presence are only read here. Reads come from
// the watch cache (control-plane/watch-cache/), which the request's sync() made current; writes
// go to etcd, guarded on the revisions read.
import { hostOf } from '../../lib/endpoints.js';
import { keys } from '../../lib/etcd/keys.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import { commitTransaction, unchanged, type Guard, type Write } from '../../lib/etcd/transaction.js';
import { StrataError, errors } from '../../lib/errors.js';
import type { ReplicaSetRecord, SnapshotRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import type { PreparedEvent } from '../events/event-log-store.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';

export type StoredVolume = Versioned<VolumeRecord>;

/** Value of a name-index key. */
export interface VolumeNameIndex {
  UUID: string;
}

/** What a write is guarded on (a record a volume refers to, a free name): made by this store. */
export type { Guard };

/**
 * A change computed from the current record; `null` means "nothing to change". `claimName`
 * indexes the record under that name of its project, `releaseName` frees that name (both in the
 * record's transaction); `guards` are what it needs besides the record's revision.
 */
export type VolumeChange = { record: VolumeRecord; claimName?: string; releaseName?: string; guards?: Guard[] } | null;


class Unchanged {
  constructor(readonly current: StoredVolume) {}
}

export class VolumeStore {
  private readonly records: RecordStore;
  private readonly cache: WatchCache;

  constructor(records: RecordStore, cache: WatchCache) {
    this.records = records;
    this.cache = cache;
  }

  /**
   * Creates the record and its name index in one transaction, if the name is free in the
   * project, the project key exists (it cannot vanish between the service's check and this
   * commit), and each `references` key (a clone's snapshot, a QoS policy) is still at the
   * revision the service checked. Returns the stored volume, or why it was refused.
   */
  async create(record: VolumeRecord, references: readonly Guard[] = [], event: PreparedEvent | null = null): Promise<StoredVolume | 'name-taken' | 'project-missing' | 'references-changed'> {
    const indexKey = keys.volumeName(record.projectName, record.name);
    const volumeKey = keys.volume(record.UUID);
    const index: VolumeNameIndex = { UUID: record.UUID };
    const projectKey = keys.project(record.projectName);
    const result = await commitTransaction(
      this.records.kv,
      {
        guards: [{ key: indexKey, revision: '0' }, { key: volumeKey, revision: '0' }, { key: projectKey, exists: true }, ...references],
        writes: [{ put: volumeKey, value: record }, { put: indexKey, value: index }, ...(event?.writes ?? [])],
      },
      [indexKey, projectKey],
    );
    if (result.succeeded) return { key: volumeKey, record, revision: result.revision };
    if (!result.existing.has(projectKey)) return 'project-missing';
    if (result.existing.has(indexKey)) return 'name-taken';
    // A reference changed (or, practically never, the random UUID collided): decide again.
    return 'references-changed';
  }

  /** The snapshot's record with its revision: what a clone or a rollback is guarded on. */
  async snapshotReference(uuid: string): Promise<(Versioned<SnapshotRecord> & { readonly guard: Guard }) | null> {
    return guarded(await this.records.get<SnapshotRecord>(keys.snapshot(uuid)));
  }

  /** The QoS policy's record with its revision: what a volume naming it is guarded on. */
  async policyReference(uuid: string): Promise<(Versioned<unknown> & { readonly guard: Guard }) | null> {
    return guarded(await this.records.get<unknown>(keys.policy(uuid)));
  }

  /** Guards that `name` is free in `project` (no volume holds it when the write commits). */
  freeNameGuard(project: string, name: string): Guard {
    return { key: keys.volumeName(project, name), revision: '0' };
  }

  /** The volume, from the watch cache (current as of the request's sync()). */
  async get(uuid: string): Promise<StoredVolume | null> {
    return this.cache.volume(uuid);
  }

  /**
   * The volume named `name` in `project`. Deleting ones have no name index (their name is free),
   * but the by-name GET must still show a volume while it is being deleted (wire-conventions §4):
   * with `includeDeleting`, a live volume wins over Deleting ones, and among Deleting ones the
   * most recently created.
   */
  async findByName(project: string, name: string, options: { includeDeleting: boolean }): Promise<StoredVolume | null> {
    const matches = this.cache.volumesNamed(project, name);
    const live = matches.find((v) => v.record.state !== 'Deleting');
    if (live || !options.includeDeleting) return live ?? null;
    return matches.sort((a, b) => (a.record.creationTime < b.record.creationTime ? 1 : -1))[0] ?? null;
  }

  /**
   * One page of volumes in UUID order, starting after `startAfterUUID`, keeping those `match`
   * accepts. Because the order is the key order, a client paging with the last UUID it got sees
   * every volume that exists throughout exactly once, whatever is created or deleted meanwhile.
   */
  async page(options: { startAfterUUID?: string; limit: number; match: (volume: VolumeRecord) => boolean }): Promise<StoredVolume[]> {
    const volumes: StoredVolume[] = [];
    if (options.limit <= 0) return volumes;
    for (const volume of this.cache.volumesInOrder(options.startAfterUUID)) {
      if (!options.match(volume.record)) continue;
      volumes.push(volume);
      if (volumes.length === options.limit) break;
    }
    return volumes;
  }

  /** Every volume record `match` accepts (usage counts). */
  async scan(match: (volume: VolumeRecord) => boolean): Promise<StoredVolume[]> {
    return this.page({ limit: Number.MAX_SAFE_INTEGER, match });
  }

  /**
   * Read-modify-write with compare-and-swap and retries (two racing updates never lose one).
   * `expectedRevision` (If-Match) makes a stale ETag a 412. `mutate` may throw a StrataError
   * (state, validation) or return null for "nothing to change" (no write, ETag unchanged).
   */
  async update(uuid: string, mutate: (current: StoredVolume) => Promise<VolumeChange> | VolumeChange, expectedRevision?: string): Promise<{ volume: StoredVolume; changed: boolean }> {
    try {
      const volume = await this.records.update<VolumeRecord>(
        keys.volume(uuid),
        async (current) => {
          const change = await mutate(current);
          if (change === null) throw new Unchanged(current);
          const { record, claimName, releaseName, guards } = change;
          const writes = [
            ...(claimName !== undefined ? [this.putNameIndex(record.projectName, claimName, record.UUID)] : []),
            ...(releaseName !== undefined ? [this.deleteNameIndex(record.projectName, releaseName)] : []),
          ];
          return { record, writes, ...(guards !== undefined ? { guards } : {}) };
        },
        { ...(expectedRevision === undefined ? {} : { expectedRevision }), notFound: () => errors.notFound('volume', uuid) },
      );
      return { volume, changed: true };
    } catch (err) {
      if (err instanceof Unchanged) return { volume: err.current, changed: false };
      if (err instanceof StrataError && err.code === 'ETAG_MISMATCH') throw errors.etagMismatch('volume', uuid);
      throw err;
    }
  }

  /** The name-index entry of a project's name, with its revision, and the guard that it stays so. */
  async nameIndex(project: string, name: string): Promise<(Versioned<VolumeNameIndex> & { readonly guard: Guard }) | null> {
    return guarded(await this.records.get<VolumeNameIndex>(keys.volumeName(project, name)));
  }

  private putNameIndex(project: string, name: string, uuid: string): Write {
    const index: VolumeNameIndex = { UUID: uuid };
    return { put: keys.volumeName(project, name), value: index };
  }

  private deleteNameIndex(project: string, name: string): Write {
    return { delete: keys.volumeName(project, name) };
  }

  /** What the nodes last reported for each volume, by volume UUID. */
  async statusesOf(uuids: readonly string[]): Promise<Map<string, VolumeStatusRecord[]>> {
    return new Map(uuids.map((uuid) => [uuid, this.cache.statusesOf(uuid)]));
  }

  /** Replica sets of replicated volumes, by volume UUID (volumes of one copy have none). */
  async replicaSetsOf(uuids: readonly string[]): Promise<Map<string, ReplicaSetRecord>> {
    const found = new Map<string, ReplicaSetRecord>();
    for (const uuid of uuids) {
      const set = this.cache.replicaSet(uuid);
      if (set) found.set(uuid, set);
    }
    return found;
  }

  /** Nodes whose server's agent holds its presence lease now (docs/etcd-keys.md). */
  async presentNodes(): Promise<Set<string>> {
    return new Set(this.cache.presence().flatMap((p) => p.nodeUUIDs ?? []));
  }

  /**
   * Where hosts reach each node, by node UUID: the address its agent advertises (its server's
   * endpoint, else the host of its NVMe endpoint), and its discovery endpoint ('' when its
   * discovery controller does not listen). Nodes not (yet) known are left out.
   */
  async nodeAddresses(nodeUUIDs: readonly string[]): Promise<Map<string, { address: string; discoveryEndpoint: string }>> {
    const result = new Map<string, { address: string; discoveryEndpoint: string }>();
    for (const uuid of nodeUUIDs) {
      const node = this.cache.node(uuid);
      if (!node) continue;
      const address = this.cache.server(node.serverUUID)?.endpoints[0] || hostOf(node.nvmeEndpoint);
      result.set(uuid, { address, discoveryEndpoint: node.discoveryEndpoint });
    }
    return result;
  }

  /** Failure domains of every node, by node UUID. */
  async nodeFailureDomains(): Promise<Map<string, readonly string[]>> {
    return new Map(this.cache.nodes().map((n) => [n.UUID, n.failureDomains ?? []]));
  }
}


/** A record read with the guard that it is still at the revision read. */
function guarded<T>(stored: Versioned<T> | null): (Versioned<T> & { readonly guard: Guard }) | null {
  return stored && { ...stored, guard: unchanged(stored) };
}
