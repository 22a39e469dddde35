// Typed JSON records in etcd with compare-and-swap: the building block of every resource
// store. A record's revision (mod_revision) is its ETag.
import type { Etcd3 } from 'etcd3';
import type { IOperation } from 'etcd3/lib/builder.js';
import { StrataError } from '../errors.js';
import { parseRecord } from './client.js';

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

/** The active cluster manager's fenced commit (LeaderElection.fencedWrite), given to a store by the composition root. */
export type FencedWrite = (ops: IOperation[]) => Promise<void>;

/** A compare of the leader's fenced commit: the key's mod or create revision equals `revision` ('0': absent). */
export type FenceCompare = readonly [key: string, target: 'Mod' | 'Create', revision: string];

/** The fenced commit with compares on the records the write depends on (LeaderElection.fencedCommit): false when one failed. */
export type FencedCommit = (compares: readonly FenceCompare[], ops: IOperation[]) => Promise<boolean>;

export class RecordStore {
  constructor(readonly etcd: Etcd3) {}

  async get<T>(key: string): Promise<Versioned<T> | null> {
    const res = await this.etcd.get(key).exec();
    const kv = res.kvs[0];
    if (!kv) return null;
    const record = parseRecord<T>(key, kv.value);
    return record === null ? null : { key, record, revision: kv.mod_revision };
  }

  /** Every record under a prefix, in key order; `startAfter` and `limit` page through them. */
  async list<T>(prefix: string, options: { startAfter?: string; limit?: number } = {}): Promise<Versioned<T>[]> {
    // From just after startAfter (the NUL byte sorts first) to the end of the prefix.
    let builder = (
      options.startAfter === undefined
        ? this.etcd.getAll().prefix(prefix)
        : this.etcd.getAll().inRange({ start: `${options.startAfter}\0`, end: prefixEnd(prefix) })
    ).sort('Key', 'Ascend');
    if (options.limit !== undefined) builder = builder.limit(options.limit);
    const res = await builder.exec();
    return res.kvs.map((kv) => {
      const key = kv.key.toString();
      return { key, record: parseRecord<T>(key, kv.value) as T, revision: kv.mod_revision };
    });
  }

  /**
   * Commits `ops` if every compare holds: `[key, revision]` pairs, revision '0' meaning "the
   * key must not exist". Returns false when a compare failed (the caller decides: 409, 412,
   * retry).
   */
  async commitIf(compares: readonly (readonly [string, string])[], ops: IOperation[]): Promise<boolean> {
    const [first, ...rest] = compares;
    if (!first) throw new Error('commitIf needs at least one compare');
    const txn = this.etcd.if(first[0], 'Mod', '==', first[1]);
    for (const [key, revision] of rest) txn.and(key, 'Mod', '==', revision);
    const result = await txn.then(...ops).commit();
    return result.succeeded;
  }

  put(key: string, record: unknown): IOperation {
    return this.etcd.put(key).value(JSON.stringify(record));
  }

  delete(key: string): IOperation {
    return this.etcd.delete().key(key);
  }

  /**
   * Read-modify-write of one record with retries on concurrent change. `expectedRevision`
   * (from If-Match) turns a mismatch into ETAG_MISMATCH instead of a retry. `mutate` returns
   * the new record and any extra ops/compares to commit atomically with it.
   */
  async update<T>(
    key: string,
    mutate: (current: Versioned<T>) => Promise<{ record: T; ops?: IOperation[]; compares?: (readonly [string, string])[] }> | { record: T; ops?: IOperation[]; compares?: (readonly [string, string])[] },
    options: { expectedRevision?: string; notFound: () => StrataError; attempts?: number },
  ): Promise<Versioned<T>> {
    for (let attempt = 0; attempt < (options.attempts ?? 20); attempt++) {
      const current = await this.get<T>(key);
      if (!current) throw options.notFound();
      if (options.expectedRevision !== undefined && options.expectedRevision !== current.revision) {
        throw new StrataError('ETAG_MISMATCH', `${key.split('/').slice(-2, -1)[0] ?? 'record'} ${key.split('/').pop()} was modified (ETag mismatch)`);
      }
      const change = await mutate(current);
      const txn = this.etcd.if(key, 'Mod', '==', current.revision);
      for (const [k, revision] of change.compares ?? []) txn.and(k, 'Mod', '==', revision);
      const result = await txn.then(this.put(key, change.record), ...(change.ops ?? [])).commit();
      if (result.succeeded) return { key, record: change.record, revision: result.header.revision };
      if (options.expectedRevision !== undefined) {
        const now = await this.get<T>(key);
        if (!now) throw options.notFound();
        if (now.revision !== options.expectedRevision) throw new StrataError('ETAG_MISMATCH', `${key.split('/').pop()} was modified (ETag mismatch)`);
      }
    }
    throw new StrataError('OPERATION_IN_PROGRESS', `${key.split('/').pop()} is being changed by other requests; retry`);
  }
}

/** The end of a prefix range (etcd's range_end for "every key with this prefix"). */
export function prefixEnd(prefix: string): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]! += 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}
