// The narrow seam between the stores (and the watched state, PrefixMirror) and etcd: read a key,
// read a prefix in key order, read, count and delete the keys between two bounds (the event log's
// spans), commit a transaction (typed guards and writes,
// lib/etcd/transaction.ts), read the current revision; for the watched state, read several
// prefixes at one revision and watch changes from a revision on; for a reader that keeps what it
// read last (InventoryReader before it read the watched state; no caller in the daemons now), one key with several prefixes at one revision, what changed in
// them after a revision (and their counts), and a prefix's keys at a past revision. `EtcdKv` is etcd (what the
// daemons run); a test may hand a store or the state any other `Kv` with the same semantics
// instead of a client (test/fakes/memory-etcd.ts, proven against etcd by
// test/fakes/memory-etcd.test.ts), which is why their constructors take a `KvClient`.
import { CompareResult, CompareTarget, type Etcd3, type ICompare, type IKeyValue, type IOperation, type IRangeResponse, type IRequestOp, type MultiRangeBuilder } from 'etcd3';
import { unconditionalTxn } from './client.js';
import { keys } from './keys.js';
import type { CommitResult, Guard, Transaction, Write } from './transaction.js';

/** A key as etcd holds it. */
export interface StoredKey {
  readonly key: string;
  readonly value: Buffer;
  /** The revision of the key's last change (a record's ETag). */
  readonly modRevision: string;
  /** The revision the key was created at. */
  readonly createRevision: string;
}

export interface RangeOptions {
  /** Only the keys after this one (paging). */
  readonly startAfter?: string;
  readonly limit?: number;
}

/** The keys from `start` (inclusive) to `end` (exclusive), in etcd's byte order. */
export interface KeyBounds {
  readonly start: string;
  readonly end: string;
}

export interface BoundedRange {
  /** The keys read, in key order. */
  readonly kvs: StoredKey[];
  /** The bounds hold more keys than were read (a limit cut the read short). */
  readonly more: boolean;
}

/**
 * What a snapshot reads: a string is a prefix (every key under it), `{ key }` that key alone. A
 * key that is also the start of other keys (/strata/cluster, /strata/cluster-ca) must be read as
 * `{ key }`: as a prefix it would bring the others along.
 */
export type PrefixOrKey = string | { readonly key: string };

/** A change a watch reports: the key as the change left it (a delete: no value, the delete's revision). */
export interface KvEvent extends StoredKey {
  readonly type: 'put' | 'delete';
}

export interface KvWatchHandlers {
  /** A batch of changes, in revision order. */
  events(events: readonly KvEvent[]): void;
  /** The watch failed (e.g. compacted past its start): nothing more comes; read everything again. */
  error(err: Error): void;
}

export interface KvWatch {
  cancel(): Promise<void>;
}

export interface Kv {
  get(key: string): Promise<StoredKey | null>;
  /** The keys under `prefix`, in etcd's (byte) key order. */
  range(prefix: string, options?: RangeOptions): Promise<StoredKey[]>;
  /** The keys under `prefix` alone (etcd: keys_only), in key order. */
  keys(prefix: string): Promise<string[]>;
  /** How many keys there are under `prefix` (etcd: count_only). */
  count(prefix: string): Promise<number>;
  /** Up to `limit` keys (0 or absent: every key) of `bounds`, in key order. */
  rangeIn(bounds: KeyBounds, limit?: number): Promise<BoundedRange>;
  /** Up to `limit` keys of `bounds` alone (etcd: keys_only), in key order. */
  keysIn(bounds: KeyBounds, limit?: number): Promise<string[]>;
  /** How many keys `bounds` holds (etcd: count_only). */
  countIn(bounds: KeyBounds): Promise<number>;
  /** Deletes every key of `bounds` (one DeleteRange, outside any transaction); how many went. */
  deleteIn(bounds: KeyBounds): Promise<number>;
  /** See commitTransaction. */
  commit(transaction: Transaction, readWhenRefused?: readonly string[]): Promise<CommitResult & { readonly existing: ReadonlySet<string> }>;
  /** The store's current revision. */
  revision(): Promise<string>;
  /** The keys of each range (every key under a prefix, or one exact key: none or it), all read at one revision (one etcd transaction). */
  snapshot(ranges: readonly PrefixOrKey[]): Promise<{ readonly revision: string; readonly ranges: readonly StoredKey[][] }>;
  /** Every change under `prefix` from `startRevision` on ('' = every key). */
  watch(prefix: string, startRevision: string, handlers: KvWatchHandlers): Promise<KvWatch>;

  // --- A reader that keeps what it read last (InventoryReader): see "Reads of what changed" below. ---
  /** One key and the keys under each prefix, all at one revision (one etcd transaction). */
  readKeyAndPrefixes(key: string, prefixes: readonly string[]): Promise<KeyAndPrefixes>;
  /** At one revision: one key, each prefix's keys modified after `after`, and each prefix's key count. */
  changesAfter(key: string, prefixes: readonly string[], after: string): Promise<PrefixChanges>;
  /** The keys under `prefix` at a past `revision`, alone (etcd: keys_only); null when compacted away. */
  keysAt(prefix: string, revision: string): Promise<string[] | null>;
}

// --- Reads of what changed (InventoryReader's incremental reads) ---

export interface KeyAndPrefixes {
  readonly revision: string;
  /** The key alone; null when absent. */
  readonly key: StoredKey | null;
  /** Per prefix, its keys in key order. */
  readonly ranges: readonly StoredKey[][];
}

export interface PrefixChanges {
  readonly revision: string;
  /** The key alone; null when absent. */
  readonly key: StoredKey | null;
  /** Per prefix, in key order, the keys whose mod_revision is above `after` (a delete shows in `counts` only). */
  readonly changed: readonly StoredKey[][];
  /** Per prefix, how many keys it holds. */
  readonly counts: readonly number[];
}

/** What a store is built on: the etcd client (the daemons), or another Kv (tests). */
export type KvClient = Etcd3 | Kv;

export function kvOf(client: KvClient): Kv {
  return isKv(client) ? client : new EtcdKv(client);
}

/** The etcd client has neither method (a check on shape: tests may hand stores a stand-in client). */
function isKv(client: KvClient): client is Kv {
  return typeof (client as Partial<Kv>).commit === 'function' && typeof (client as Partial<Kv>).revision === 'function';
}

export class EtcdKv implements Kv {
  constructor(readonly etcd: Etcd3) {}

  async get(key: string): Promise<StoredKey | null> {
    const kv = (await this.etcd.get(key).exec()).kvs[0];
    return kv ? { key, value: kv.value, modRevision: kv.mod_revision, createRevision: kv.create_revision } : null;
  }

  async range(prefix: string, options: RangeOptions = {}): Promise<StoredKey[]> {
    // From just after startAfter (the NUL byte sorts first) to the end of the prefix.
    let builder = (
      options.startAfter === undefined
        ? this.etcd.getAll().prefix(prefix)
        : this.etcd.getAll().inRange({ start: `${options.startAfter}\0`, end: prefixEnd(prefix) })
    ).sort('Key', 'Ascend');
    if (options.limit !== undefined) builder = builder.limit(options.limit);
    const res = await builder.exec();
    return res.kvs.map(storedKey);
  }

  keys(prefix: string): Promise<string[]> {
    return this.etcd.getAll().prefix(prefix).keys();
  }

  count(prefix: string): Promise<number> {
    return this.etcd.getAll().prefix(prefix).count();
  }

  async rangeIn(bounds: KeyBounds, limit?: number): Promise<BoundedRange> {
    // etcd's default order (key, ascending); no sort is asked for, as the event store never did.
    let builder = this.etcd.getAll().inRange(bounds);
    if (limit !== undefined) builder = builder.limit(limit);
    const res = await builder.exec();
    return { kvs: res.kvs.map(storedKey), more: res.more };
  }

  keysIn(bounds: KeyBounds, limit?: number): Promise<string[]> {
    let builder = this.etcd.getAll().inRange(bounds);
    if (limit !== undefined) builder = builder.limit(limit);
    return builder.keys();
  }

  countIn(bounds: KeyBounds): Promise<number> {
    return this.etcd.getAll().inRange(bounds).count();
  }

  async deleteIn(bounds: KeyBounds): Promise<number> {
    const res = await this.etcd.delete().inRange(bounds).exec();
    return Number(res.deleted);
  }

  async commit(transaction: Transaction, readWhenRefused: readonly string[] = []): Promise<CommitResult & { readonly existing: ReadonlySet<string> }> {
    // etcd3's builder cannot express a range compare; its KV client takes the raw request.
    const result = await this.etcd.kv.txn({
      compare: transaction.guards.map(compareOf),
      success: transaction.writes.map(requestOf),
      failure: readWhenRefused.map((key) => ({ request_range: { key: Buffer.from(key), count_only: true } })),
    });
    const existing = new Set<string>();
    if (!result.succeeded) {
      readWhenRefused.forEach((key, i) => {
        if (Number(result.responses[i]?.response_range?.count ?? 0) > 0) existing.add(key);
      });
    }
    return { succeeded: result.succeeded, revision: String(result.header.revision), existing };
  }

  async revision(): Promise<string> {
    // Any read returns the store's revision in its header.
    const result = await this.etcd.get(keys.cluster()).exec();
    return String(result.header.revision);
  }

  async snapshot(ranges: readonly PrefixOrKey[]): Promise<{ readonly revision: string; readonly ranges: readonly StoredKey[][] }> {
    const { revision, responses } = await this.readTogether(ranges.map((r) => (typeof r === 'string' ? this.etcd.getAll().prefix(r) : this.etcd.get(r.key))));
    return { revision, ranges: responses.map((r) => r.kvs.map(storedKey)) };
  }

  async watch(prefix: string, startRevision: string, handlers: KvWatchHandlers): Promise<KvWatch> {
    const watcher = await this.etcd.watch().prefix(prefix).startRevision(startRevision).create();
    watcher.on('data', (res) => handlers.events(res.events.map((event) => ({ type: event.type === 'Delete' ? 'delete' : 'put', ...storedKey(event.kv) }))));
    watcher.on('error', (err) => handlers.error(err));
    return { cancel: () => watcher.cancel() };
  }

  // --- Reads of what changed: the requests InventoryReader made of etcd itself (readTogether, as snapshot) ---

  async readKeyAndPrefixes(key: string, prefixes: readonly string[]): Promise<KeyAndPrefixes> {
    const { revision, responses } = await this.readTogether([this.etcd.get(key), ...prefixes.map((p) => this.etcd.getAll().prefix(p))]);
    const [single, ...ranges] = responses;
    return { revision, key: firstKey(single!), ranges: ranges.map((r) => r.kvs.map(storedKey)) };
  }

  async changesAfter(key: string, prefixes: readonly string[], after: string): Promise<PrefixChanges> {
    // etcd's filter is inclusive: "after R" is a min_mod_revision of R + 1.
    const min = (BigInt(after) + 1n).toString();
    const { revision, responses } = await this.readTogether([
      this.etcd.get(key),
      ...prefixes.map((p) => this.etcd.getAll().prefix(p).minModRevision(min)),
      ...prefixes.map((p) => countOnly(this.etcd.getAll().prefix(p))),
    ]);
    const [single, ...rest] = responses;
    return {
      revision,
      key: firstKey(single!),
      changed: rest.slice(0, prefixes.length).map((r) => r.kvs.map(storedKey)),
      counts: rest.slice(prefixes.length).map((r) => Number(r.count)),
    };
  }

  async keysAt(prefix: string, revision: string): Promise<string[] | null> {
    try {
      return await this.etcd.getAll().prefix(prefix).revision(revision).keys();
    } catch (err) {
      if (err instanceof Error && /compacted/i.test(err.message)) return null;
      throw err;
    }
  }

  /**
   * Read-only ranges in one transaction (one revision). A transaction needs a compare; the same
   * reads go in both branches, so they run whatever it says.
   */
  private async readTogether(ops: readonly IOperation[]): Promise<{ revision: string; responses: IRangeResponse[] }> {
    const result = await unconditionalTxn(this.etcd).then(...ops).commit();
    const responses = result.responses.map((r) => r.response_range);
    if (responses.length !== ops.length || responses.some((r) => !r)) {
      throw new Error(`read transaction returned ${responses.length} responses, expected ${ops.length} ranges`);
    }
    return { revision: String(result.header.revision), responses };
  }
}

function firstKey(range: IRangeResponse): StoredKey | null {
  const kv = range.kvs[0];
  return kv ? storedKey(kv) : null;
}

/** A range that answers with its count alone (the builder has no count_only for a transaction's op). */
function countOnly(range: MultiRangeBuilder): IOperation {
  return {
    async op(): Promise<IRequestOp> {
      const op = await range.op();
      return { request_range: { ...op.request_range, count_only: true } };
    },
  };
}

function storedKey(kv: IKeyValue): StoredKey {
  return { key: kv.key.toString(), value: kv.value, modRevision: kv.mod_revision, createRevision: kv.create_revision };
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

function compareOf(guard: Guard): ICompare {
  if ('prefix' in guard) {
    return {
      key: Buffer.from(guard.prefix),
      range_end: prefixEnd(guard.prefix),
      target: CompareTarget.Mod,
      result: CompareResult.Less,
      mod_revision: (BigInt(guard.unchangedSince) + 1n).toString(),
    };
  }
  const key = Buffer.from(guard.key);
  if ('exists' in guard) return { key, target: CompareTarget.Create, result: CompareResult.Greater, create_revision: '0' };
  if ('createRevision' in guard) return { key, target: CompareTarget.Create, result: CompareResult.Equal, create_revision: guard.createRevision };
  return { key, target: CompareTarget.Mod, result: CompareResult.Equal, mod_revision: guard.revision };
}

function requestOf(write: Write): IRequestOp {
  if ('put' in write) return { request_put: { key: Buffer.from(write.put), value: Buffer.from(JSON.stringify(write.value)) } };
  if ('delete' in write) return { request_delete_range: { key: Buffer.from(write.delete) } };
  return { request_delete_range: { key: Buffer.from(write.deletePrefix), range_end: prefixEnd(write.deletePrefix) } };
}
