// Snapshots in etcd: /strata/snapshots/<UUID> (SnapshotRecord) and the per-project name index
// /strata/snapshot-names/<project>/<name> = {"UUID": ...}, always changed in one transaction
// with the record. Also the reads of other resources' records a snapshot needs: its source
// volume (record and name index) and the cluster id. And (WatchedSnapshots) the snapshots as the
// process's watched state holds them, which snapshot retention keeps its due times current with.
import { parseRecord } from '../../lib/etcd/client.js';
import { idOfKey, keys } from '../../lib/etcd/keys.js';
import type { Kv, KvClient } from '../../lib/etcd/kv.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import { commitTransaction, unchanged, type Guard, type Write } from '../../lib/etcd/transaction.js';
import type { ClusterRecord, SnapshotRecord, VolumeRecord } from '../../lib/records.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';

/** The value of a name index key (volume-names and snapshot-names). */
interface NameIndexValue {
  UUID: string;
}

export interface NameIndexEntry {
  readonly UUID: string;
  readonly revision: string;
}

/** How many records one list request reads from etcd when a page is filtered. */
const LIST_BATCH = 1000;
/** Parallel reads when fetching the source volumes of a page. */
const VOLUME_READ_CONCURRENCY = 64;

export type CreateOutcome =
  | { readonly kind: 'created'; readonly snapshot: Versioned<SnapshotRecord> }
  /** The name is taken in the project (409). */
  | { readonly kind: 'name-taken' }
  /** The source volume changed since it was read: read it again and retry. */
  | { readonly kind: 'volume-changed' };

/** What the watched state reports of the snapshots, in etcd's order. */
export interface SnapshotWatchHandlers {
  /** A snapshot record was written. */
  put(record: SnapshotRecord): void;
  /** The snapshot's record was deleted. */
  deleted(uuid: string): void;
  /** The state was read again (e.g. its watch's revision was compacted): anything may have changed. */
  reloaded(): void;
}

export interface SnapshotWatch {
  cancel(): Promise<void>;
}

export class SnapshotStore {
  readonly records: RecordStore;
  private clusterId: string | undefined;

  constructor(client: KvClient) {
    this.records = new RecordStore(client);
  }

  get(uuid: string): Promise<Versioned<SnapshotRecord> | null> {
    return this.records.get<SnapshotRecord>(keys.snapshot(uuid));
  }

  async nameIndex(project: string, name: string): Promise<NameIndexEntry | null> {
    return readNameIndex(this.records.kv, keys.snapshotName(project, name));
  }

  /** Names in use in a project (snapshots that are not Deleting). */
  async countNames(project: string): Promise<number> {
    return this.records.kv.count(keys.snapshotNamesPrefix(project));
  }

  /**
   * Snapshots in UUID (key) order after `startAfterUUID`, keeping those `keep` accepts, until
   * `limit` are kept or the prefix ends. Reads in batches, so a page of one project costs
   * reads proportional to the snapshots it skips, never the whole prefix at once.
   */
  async scan(options: { startAfterUUID?: string; limit: number; keep: (s: Versioned<SnapshotRecord>) => boolean }): Promise<Versioned<SnapshotRecord>[]> {
    const kept: Versioned<SnapshotRecord>[] = [];
    let startAfter = options.startAfterUUID === undefined ? undefined : keys.snapshot(options.startAfterUUID);
    while (kept.length < options.limit) {
      const batch = await this.records.list<SnapshotRecord>(keys.snapshotsPrefix(), { ...(startAfter !== undefined ? { startAfter } : {}), limit: LIST_BATCH });
      for (const snapshot of batch) {
        if (options.keep(snapshot)) kept.push(snapshot);
        if (kept.length === options.limit) break;
      }
      if (batch.length < LIST_BATCH) break;
      startAfter = batch[batch.length - 1]!.key;
    }
    return kept;
  }

  /**
   * Writes a new snapshot and its name index in one transaction, provided the name is free in
   * the project and the source volume is still at the revision it was validated at.
   */
  async create(record: SnapshotRecord, volume: Versioned<VolumeRecord>): Promise<CreateOutcome> {
    const nameKey = keys.snapshotName(record.projectName, record.name);
    const snapshotKey = keys.snapshot(record.UUID);
    const result = await commitTransaction(this.records.kv, {
      guards: [{ key: nameKey, revision: '0' }, unchanged(volume), { key: snapshotKey, revision: '0' }],
      writes: [
        { put: snapshotKey, value: record },
        { put: nameKey, value: { UUID: record.UUID } satisfies NameIndexValue },
      ],
    });
    if (result.succeeded) return { kind: 'created', snapshot: { key: snapshotKey, record, revision: result.revision } };
    return (await this.nameIndex(record.projectName, record.name)) ? { kind: 'name-taken' } : { kind: 'volume-changed' };
  }

  /**
   * Moves a snapshot to Deleting and frees its name (the index key is deleted if it still
   * points to this snapshot), in one transaction conditional on the revision read. Returns
   * the new version, or null when the snapshot changed meanwhile (re-read and decide again).
   */
  async markDeleting(current: Versioned<SnapshotRecord>): Promise<Versioned<SnapshotRecord> | null> {
    const record: SnapshotRecord = { ...current.record, state: 'Deleting' };
    const nameKey = keys.snapshotName(record.projectName, record.name);
    const index = await this.nameIndex(record.projectName, record.name);
    const guards: Guard[] = [unchanged(current)];
    const writes: Write[] = [{ put: current.key, value: record }];
    if (index?.UUID === record.UUID) {
      guards.push({ key: nameKey, revision: index.revision });
      writes.push({ delete: nameKey });
    }
    const result = await commitTransaction(this.records.kv, { guards, writes });
    return result.succeeded ? { key: current.key, record, revision: result.revision } : null;
  }

  // ---- other resources' records, read-only ----

  getVolume(uuid: string): Promise<Versioned<VolumeRecord> | null> {
    return this.records.get<VolumeRecord>(keys.volume(uuid));
  }

  async volumeByName(project: string, name: string): Promise<Versioned<VolumeRecord> | null> {
    const index = await readNameIndex(this.records.kv, keys.volumeName(project, name));
    if (!index) return null;
    const volume = await this.getVolume(index.UUID);
    return volume && volume.record.projectName === project && volume.record.name === name ? volume : null;
  }

  /** The source volumes of `snapshots`, by UUID (absent when the volume no longer exists). */
  async volumesOf(snapshots: readonly SnapshotRecord[]): Promise<Map<string, VolumeRecord>> {
    const uuids = [...new Set(snapshots.map((s) => s.sourceVolumeUUID))];
    const volumes = new Map<string, VolumeRecord>();
    for (let i = 0; i < uuids.length; i += VOLUME_READ_CONCURRENCY) {
      const found = await Promise.all(uuids.slice(i, i + VOLUME_READ_CONCURRENCY).map((uuid) => this.getVolume(uuid)));
      for (const volume of found) if (volume) volumes.set(volume.record.UUID, volume.record);
    }
    return volumes;
  }

  /** The cluster UUID (clusterId of every snapshot); written once at bootstrap, so cached. */
  async clusterUUID(): Promise<string> {
    if (this.clusterId === undefined) {
      const cluster = await this.records.get<ClusterRecord>(keys.cluster());
      if (!cluster) return '';
      this.clusterId = cluster.record.UUID;
    }
    return this.clusterId;
  }
}

/** The snapshots in the process's watched state (WatchCache.state, which holds the snapshots prefix). */
export class WatchedSnapshots {
  constructor(private readonly cache: WatchCache) {}

  /**
   * Every snapshot, once the state holds every write committed before this call, and `handlers`
   * on every change after: both from the same moment, so no change falls between.
   */
  async follow(handlers: SnapshotWatchHandlers): Promise<{ snapshots: SnapshotRecord[]; watch: SnapshotWatch }> {
    await this.cache.sync();
    const prefix = keys.snapshotsPrefix();
    const state = this.cache.state;
    const snapshots = [...state.all<SnapshotRecord>(prefix).values()].map((m) => m.record);
    const unsubscribe = state.onChange((changes, reloaded) => {
      if (reloaded) return handlers.reloaded();
      for (const change of changes) {
        if (change.prefix !== prefix) continue;
        const record = change.deleted ? undefined : state.get<SnapshotRecord>(prefix, change.key)?.record;
        if (record) handlers.put(record);
        else handlers.deleted(idOfKey(change.key));
      }
    });
    return { snapshots, watch: { cancel: async () => void unsubscribe() } };
  }
}

/** Reads a name index key; tolerates a bare UUID string as the value. */
async function readNameIndex(store: Kv, key: string): Promise<NameIndexEntry | null> {
  const kv = await store.get(key);
  if (!kv) return null;
  const text = kv.value.toString('utf8');
  let UUID = text;
  try {
    const parsed = JSON.parse(text) as unknown;
    if (typeof parsed === 'string') UUID = parsed;
    else if (parsed && typeof parsed === 'object' && typeof (parsed as NameIndexValue).UUID === 'string') UUID = (parsed as NameIndexValue).UUID;
  } catch {
    // not JSON: the raw value is the UUID
  }
  return { UUID, revision: kv.modRevision };
}
