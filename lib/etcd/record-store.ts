// Typed JSON records in etcd with compare-and-swap: the building block of every resource
// store. A record's revision (mod_revision) is its ETag.
import { StrataError } from '../errors.js';
import { LOST_RACE, retryLostRaces } from '../retry.js';
import { parseRecord } from './client.js';
import { kvOf, type Kv, type KvClient, type RangeOptions } from './kv.js';
import { unchanged, type Guard, type Write } from './transaction.js';

export interface Versioned<T> {
  readonly key: string;
  readonly record: T;
  /** etcd mod_revision, a decimal string: the record's ETag. */
  readonly revision: string;
}

/** A watch a store started for its caller: etcd3 re-establishes it (reconnects) until cancelled. */
export interface StoreWatch {
  cancel(): Promise<void>;
}

/** What an update writes: the new record, and other writes and guards committed with it. */
export interface RecordChange<T> {
  readonly record: T;
  readonly writes?: readonly Write[];
  readonly guards?: readonly Guard[];
}

export class RecordStore {
  /** Where the records are: etcd in the daemons (`EtcdKv`), or a test's Kv. */
  readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  async get<T>(key: string): Promise<Versioned<T> | null> {
    const kv = await this.kv.get(key);
    if (!kv) return null;
    const record = parseRecord<T>(key, kv.value);
    return record === null ? null : { key, record, revision: kv.modRevision };
  }

  /** Every record under a prefix, in key order; `startAfter` and `limit` page through them. */
  async list<T>(prefix: string, options: RangeOptions = {}): Promise<Versioned<T>[]> {
    const kvs = await this.kv.range(prefix, options);
    return kvs.map((kv) => ({ key: kv.key, record: parseRecord<T>(kv.key, kv.value) as T, revision: kv.modRevision }));
  }

  /** How many keys there are under a prefix. */
  async count(prefix: string): Promise<number> {
    return (await this.kv.keys(prefix)).length;
  }

  /**
   * Read-modify-write of one record with retries on concurrent change. `expectedRevision`
   * (from If-Match) turns a mismatch into ETAG_MISMATCH instead of a retry. `mutate` returns
   * the new record and any other writes and guards to commit atomically with it.
   */
  async update<T>(
    key: string,
    mutate: (current: Versioned<T>) => Promise<RecordChange<T>> | RecordChange<T>,
    options: { expectedRevision?: string; notFound: () => StrataError; attempts?: number },
  ): Promise<Versioned<T>> {
    return retryLostRaces(options.attempts ?? 20, async () => {
      const current = await this.get<T>(key);
      if (!current) throw options.notFound();
      if (options.expectedRevision !== undefined && options.expectedRevision !== current.revision) {
        throw new StrataError('ETAG_MISMATCH', `${key.split('/').slice(-2, -1)[0] ?? 'record'} ${key.split('/').pop()} was modified (ETag mismatch)`);
      }
      const change = await mutate(current);
      const result = await this.kv.commit({
        guards: [unchanged(current), ...(change.guards ?? [])],
        writes: [{ put: key, value: change.record }, ...(change.writes ?? [])],
      });
      if (result.succeeded) return { key, record: change.record, revision: result.revision };
      // Lost to another writer: with If-Match, the record it holds now decides between 404, 412
      // and another attempt (a guard on one of the other keys failed).
      if (options.expectedRevision !== undefined) {
        const now = await this.get<T>(key);
        if (!now) throw options.notFound();
        if (now.revision !== options.expectedRevision) throw new StrataError('ETAG_MISMATCH', `${key.split('/').pop()} was modified (ETag mismatch)`);
      }
      return LOST_RACE;
    }, () => new StrataError('OPERATION_IN_PROGRESS', `${key.split('/').pop()} is being changed by other requests; retry`));
  }
}
