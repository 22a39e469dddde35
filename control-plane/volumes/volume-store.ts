// Volumes in etcd (docs/volume-lifecycle.md): `volumes/<UUID>` (VolumeRecord) and the per-project
// name index `volume-names/<project>/<name>` → {"UUID"}, always changed in the same transaction
// as the record. The index exists while the volume is not Deleting, so a name is free again the
// moment its volume starts Deleting. The API writes nothing else; what the data path reports
// (`volume-status/<UUID>/<node>`), node records and presence are only read here.
import type { IOperation, IRangeResponse } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord, unconditionalTxn } from '../../lib/etcd/client.js';
import { RecordStore, prefixEnd, type Versioned } from '../../lib/etcd/record-store.js';
import { StrataError, errors } from '../../lib/errors.js';
import type { NodeRecord, PresenceRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';

export type StoredVolume = Versioned<VolumeRecord>;

/** Value of a name-index key. */
export interface VolumeNameIndex {
  UUID: string;
}

/** A change computed from the current record; `null` means "nothing to change". */
export type VolumeChange = { record: VolumeRecord; ops?: IOperation[]; compares?: (readonly [string, string])[] } | null;

/** Volume records read per range request when paging (the API's page maximum). */
const MAX_BATCH = 1000;
const MIN_BATCH = 64;
/** Status records read per transaction; well under etcd's default limit of 128 operations. */
const STATUS_RANGES_PER_TXN = 64;

class Unchanged {
  constructor(readonly current: StoredVolume) {}
}

export class VolumeStore {
  private readonly records: RecordStore;

  constructor(records: RecordStore) {
    this.records = records;
  }

  /**
   * Creates the record and its name index in one transaction, if the name is free in the
   * project, the project key exists (it cannot vanish between the service's check and this
   * commit), and each `references` key (a clone's snapshot, a QoS policy) is still at the
   * revision the service checked. Returns the stored volume, or why it was refused.
   */
  async create(record: VolumeRecord, references: readonly (readonly [string, string])[] = [], extraOps: IOperation[] = []): Promise<StoredVolume | 'name-taken' | 'project-missing' | 'references-changed'> {
    const etcd = this.records.etcd;
    const indexKey = keys.volumeName(record.projectName, record.name);
    const volumeKey = keys.volume(record.UUID);
    const index: VolumeNameIndex = { UUID: record.UUID };
    const txn = etcd.if(indexKey, 'Create', '==', 0).and(volumeKey, 'Create', '==', 0).and(keys.project(record.projectName), 'Create', '>', 0);
    for (const [key, revision] of references) txn.and(key, 'Mod', '==', revision);
    const result = await txn
      .then(this.records.put(volumeKey, record), this.records.put(indexKey, index), ...extraOps)
      .else(etcd.get(indexKey), etcd.get(keys.project(record.projectName)))
      .commit();
    if (result.succeeded) return { key: volumeKey, record, revision: result.header.revision };
    const [indexRange, projectRange] = result.responses.map((r) => r.response_range as IRangeResponse);
    if ((projectRange?.kvs.length ?? 0) === 0) return 'project-missing';
    if ((indexRange?.kvs.length ?? 0) > 0) return 'name-taken';
    // A reference changed (or, practically never, the random UUID collided): decide again.
    return 'references-changed';
  }

  /** Another resource's record with its revision: what a volume write is guarded on. */
  async reference<T>(key: string): Promise<Versioned<T> | null> {
    return this.records.get<T>(key);
  }

  async get(uuid: string): Promise<StoredVolume | null> {
    return this.records.get<VolumeRecord>(keys.volume(uuid));
  }

  /**
   * The volume named `name` in `project`. The index finds live volumes; Deleting ones have no
   * index (their name is free), so `includeDeleting` falls back to a scan of the records —
   * the by-name GET must still show a volume while it is being deleted (wire-conventions §4).
   * A live volume wins over Deleting ones; among Deleting ones the most recently created.
   */
  async findByName(project: string, name: string, options: { includeDeleting: boolean }): Promise<StoredVolume | null> {
    const index = await this.records.get<VolumeNameIndex>(keys.volumeName(project, name));
    if (index) {
      const volume = await this.get(index.record.UUID);
      if (volume && volume.record.projectName === project && volume.record.name === name && volume.record.state !== 'Deleting') return volume;
    }
    if (!options.includeDeleting) return null;
    const matches = await this.scan((v) => v.projectName === project && v.name === name);
    const live = matches.find((v) => v.record.state !== 'Deleting');
    if (live) return live;
    return matches.sort((a, b) => (a.record.creationTime < b.record.creationTime ? 1 : -1))[0] ?? null;
  }

  /**
   * One page of volumes in UUID order, starting after `startAfterUUID`, keeping those `match`
   * accepts. Volumes are read in batches until the page is full or the keys run out. Because the
   * order is the key order, a client paging with the last UUID it got sees every volume that
   * exists throughout exactly once, whatever is created or deleted meanwhile. `spanned` counts
   * the volume keys from the first kept one to the last (inclusive): how dense the page is.
   */
  async page(options: { startAfterUUID?: string; limit: number; match: (volume: VolumeRecord) => boolean }): Promise<{ volumes: StoredVolume[]; spanned: number }> {
    const volumes: StoredVolume[] = [];
    // Batches start near the page size and grow while the filter skips volumes (another
    // project's, another name), so a sparse match costs few round trips and a dense one reads
    // little more than the page.
    let batch = Math.min(MAX_BATCH, Math.max(options.limit, MIN_BATCH));
    let after = options.startAfterUUID === undefined ? undefined : keys.volume(options.startAfterUUID);
    let scanned = 0;
    let firstKept = -1;
    for (;;) {
      const chunk = await this.records.list<VolumeRecord>(keys.volumesPrefix(), { ...(after === undefined ? {} : { startAfter: after }), limit: batch });
      for (const volume of chunk) {
        scanned++;
        if (!options.match(volume.record)) continue;
        if (firstKept < 0) firstKept = scanned;
        volumes.push(volume);
        if (volumes.length === options.limit) return { volumes, spanned: scanned - firstKept + 1 };
      }
      if (chunk.length < batch) return { volumes, spanned: firstKept < 0 ? 0 : scanned - firstKept + 1 };
      after = chunk[chunk.length - 1]!.key;
      batch = Math.min(MAX_BATCH, batch * 4);
    }
  }

  /** Every volume record `match` accepts (usage counts, the by-name fallback). */
  async scan(match: (volume: VolumeRecord) => boolean): Promise<StoredVolume[]> {
    return (await this.page({ limit: Number.MAX_SAFE_INTEGER, match })).volumes;
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
          return change;
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

  /** The name-index entry of a project's name, with its revision. */
  async nameIndex(project: string, name: string): Promise<Versioned<VolumeNameIndex> | null> {
    return this.records.get<VolumeNameIndex>(keys.volumeName(project, name));
  }

  putNameIndex(project: string, name: string, uuid: string): IOperation {
    const index: VolumeNameIndex = { UUID: uuid };
    return this.records.put(keys.volumeName(project, name), index);
  }

  deleteNameIndex(project: string, name: string): IOperation {
    return this.records.delete(keys.volumeName(project, name));
  }

  /**
   * What the nodes last reported for each volume, by volume UUID, without one round trip per
   * volume. Status keys sort like volume keys, so when the volumes are (nearly) every volume
   * of a UUID range — `spanned` volume keys hold them, a list page says how many — one range
   * read from the first volume's statuses to the last one's is exact (or nearly). Otherwise
   * (a sparse page: one project among many) each volume's prefix is read, in a few
   * transactions run together.
   */
  async statusesOf(uuids: readonly string[], spanned = uuids.length): Promise<Map<string, VolumeStatusRecord[]>> {
    const result = new Map<string, VolumeStatusRecord[]>(uuids.map((u) => [u, []]));
    if (uuids.length === 0) return result;
    const collect = (kvs: readonly { key: Buffer; value: Buffer }[]) => {
      const prefix = keys.volumeStatusPrefix();
      for (const kv of kvs) {
        const key = kv.key.toString();
        const list = result.get(key.slice(prefix.length).split('/')[0]!);
        const record = list && parseRecord<VolumeStatusRecord>(key, kv.value);
        if (record) list.push(record);
      }
    };
    const etcd = this.records.etcd;
    if (spanned <= 2 * uuids.length) {
      const sorted = [...uuids].sort();
      const range = { start: keys.volumeStatusPrefix(sorted[0]!), end: prefixEnd(keys.volumeStatusPrefix(sorted[sorted.length - 1]!)) };
      collect((await etcd.getAll().inRange(range).exec()).kvs);
      return result;
    }
    const chunks: string[][] = [];
    for (let i = 0; i < uuids.length; i += STATUS_RANGES_PER_TXN) chunks.push(uuids.slice(i, i + STATUS_RANGES_PER_TXN));
    await Promise.all(
      chunks.map(async (chunk) => {
        const ranges = () => chunk.map((uuid) => etcd.getAll().prefix(keys.volumeStatusPrefix(uuid)));
        // A read-only transaction: the same ranges in both branches, whatever the compare says.
        const txn = await unconditionalTxn(etcd).then(...ranges()).commit();
        for (const response of txn.responses) collect((response.response_range as IRangeResponse).kvs);
      }),
    );
    return result;
  }

  /** Nodes whose server's agent holds its presence lease now (docs/etcd-keys.md). */
  async presentNodes(): Promise<Set<string>> {
    const present = await this.records.list<PresenceRecord>(keys.presencePrefix());
    return new Set(present.flatMap((p) => p.record.nodeUUIDs ?? []));
  }

  /** Failure domains of every node, by node UUID. */
  async nodeFailureDomains(): Promise<Map<string, readonly string[]>> {
    const nodes = await this.records.list<NodeRecord>(keys.nodesPrefix());
    return new Map(nodes.map((n) => [n.record.UUID, n.record.failureDomains ?? []]));
  }
}
