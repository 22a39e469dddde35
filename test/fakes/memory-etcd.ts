// An in-memory etcd keyspace behind the stores' seam (lib/etcd/kv.ts), for domain unit tests
// that need no real etcd. It keeps etcd's revision semantics, which the guards depend on:
//   - one store revision, starting at 1 (an empty etcd's), bumped once by every committed
//     transaction that changed at least one key (a transaction whose deletes found nothing, or a
//     refused one, leaves it as it was);
//   - each key's create_revision (kept across updates, new after a delete and put) and
//     mod_revision; an absent key compares as etcd's zero key: mod 0, create 0;
//   - guards evaluated as etcd evaluates compares: a key's compare on that one key; a prefix
//     compare ("unchanged since R", mod_revision < R+1 over [prefix, prefixEnd)) on every key
//     that EXISTS in the range, true over an empty range. Like etcd's, it cannot see a key
//     deleted after R (a range compare reads only live keys): a guarded prefix that lost a key
//     still holds;
//   - a read between bounds ([start, end) in byte order; an end of "\0" is "to the last key", an
//     empty end the start key alone, an end at or below the start nothing) with a limit says
//     whether more keys were left (etcd's `more`); a ranged delete (a DeleteRange of its own)
//     makes one revision when it deletes anything, none when it finds nothing;
//   - writes applied in order at the one new revision; etcd's refusals that are errors, not
//     failed guards, are errors here too: more than 128 compares or operations (its default
//     --max-txn-ops) and a key put twice, or put and deleted, in one transaction ("duplicate key
//     given in txn request").
// test/fakes/memory-etcd.test.ts runs the same cases against a real etcd and against this fake.
// Watches replay every change from their start revision (the fake keeps all history: nothing is
// compacted) and then report each commit's changes as one batch, in a microtask after the commit
// (etcd's watch is asynchronous too), so PrefixMirror — the watched state, with its indexes and
// its listeners — runs on the fake unchanged; `failWatches()` stands for a failed watch (a
// compaction past its revision), which makes the state reload.
// The one read at a past revision, a prefix's keys (keysAt, after a read of what changed), is
// replayed from the same history.
// Not modelled: leases, compaction, other reads at a past revision, members, auth, and timing (a
// change reaches the watches at once, never late).
import type { BoundedRange, KeyAndPrefixes, KeyBounds, Kv, KvEvent, KvWatch, KvWatchHandlers, PrefixChanges, PrefixOrKey, RangeOptions, StoredKey } from '../../lib/etcd/kv.js';
import { prefixEnd } from '../../lib/etcd/kv.js';
import { compareKeys } from '../../lib/etcd/prefix-mirror.js';
import type { CommitResult, Guard, Transaction, Write } from '../../lib/etcd/transaction.js';

/** etcd's default --max-txn-ops. */
const MAX_TXN_OPS = 128;

interface Entry {
  readonly value: Buffer;
  readonly modRevision: bigint;
  readonly createRevision: bigint;
}

export class MemoryEtcd implements Kv {
  private readonly data = new Map<string, Entry>();
  private current = 1n;
  /** Every change ever committed, in revision order (watches replay it from their start). */
  private readonly history: KvEvent[] = [];
  private readonly watches = new Set<{ readonly prefix: string; readonly handlers: KvWatchHandlers }>();
  /** Every transaction committed (guards held), in order: what a test can assert was written. */
  readonly committed: Transaction[] = [];
  /**
   * Runs before each guarded transaction is evaluated: a concurrent writer getting in between
   * the code's read and its commit (its own commits do not call it again).
   */
  interleave: ((transaction: Transaction) => Promise<void> | void) | undefined;
  private interleaving = false;

  async get(key: string): Promise<StoredKey | null> {
    return this.storedKey(key);
  }

  async range(prefix: string, options: RangeOptions = {}): Promise<StoredKey[]> {
    const after = options.startAfter;
    const found = this.storedUnder(prefix).filter((kv) => after === undefined || compareKeys(kv.key, after) > 0);
    return options.limit === undefined || options.limit <= 0 ? found : found.slice(0, options.limit);
  }

  async keys(prefix: string): Promise<string[]> {
    return this.keysUnder(prefix);
  }

  async count(prefix: string): Promise<number> {
    return this.keysUnder(prefix).length;
  }

  async rangeIn(bounds: KeyBounds, limit?: number): Promise<BoundedRange> {
    const all = this.keysBetween(bounds);
    const kept = limit === undefined || limit <= 0 ? all : all.slice(0, limit);
    return { kvs: kept.map((key) => stored(key, this.data.get(key)!)), more: kept.length < all.length };
  }

  async keysIn(bounds: KeyBounds, limit?: number): Promise<string[]> {
    return (await this.rangeIn(bounds, limit)).kvs.map((kv) => kv.key);
  }

  async countIn(bounds: KeyBounds): Promise<number> {
    return this.keysBetween(bounds).length;
  }

  async deleteIn(bounds: KeyBounds): Promise<number> {
    const gone = this.keysBetween(bounds);
    if (gone.length === 0) return 0;
    const revision = this.current + 1n;
    for (const key of gone) this.data.delete(key);
    this.publish(revision, gone.map((key) => ({ type: 'delete', key, value: Buffer.alloc(0), modRevision: String(revision), createRevision: '0' })));
    return gone.length;
  }

  async revision(): Promise<string> {
    return String(this.current);
  }

  async commit(transaction: Transaction, readWhenRefused: readonly string[] = []): Promise<CommitResult & { readonly existing: ReadonlySet<string> }> {
    if (transaction.guards.length > MAX_TXN_OPS || transaction.writes.length > MAX_TXN_OPS || readWhenRefused.length > MAX_TXN_OPS) {
      throw new Error('etcdserver: too many operations in txn request');
    }
    checkDuplicates(transaction.writes);
    if (this.interleave && transaction.guards.length > 0 && !this.interleaving) {
      this.interleaving = true;
      try {
        await this.interleave(transaction);
      } finally {
        this.interleaving = false;
      }
    }
    if (!transaction.guards.every((guard) => this.holds(guard))) {
      return { succeeded: false, revision: String(this.current), existing: new Set(readWhenRefused.filter((key) => this.data.has(key))) };
    }
    const revision = this.current + 1n;
    const events: KvEvent[] = [];
    for (const write of transaction.writes) {
      if ('put' in write) events.push(this.set(write.put, Buffer.from(JSON.stringify(write.value)), revision));
      else {
        for (const key of 'delete' in write ? (this.data.has(write.delete) ? [write.delete] : []) : this.keysUnder(write.deletePrefix)) {
          this.data.delete(key);
          events.push({ type: 'delete', key, value: Buffer.alloc(0), modRevision: String(revision), createRevision: '0' });
        }
      }
    }
    this.committed.push(transaction);
    if (events.length > 0) this.publish(revision, events);
    return { succeeded: true, revision: String(this.current), existing: new Set() };
  }

  /** Writes without guards (a test's setup, or another writer racing the code under test). */
  async put(key: string, value: unknown): Promise<string> {
    return (await this.commit({ guards: [], writes: [{ put: key, value }] })).revision;
  }

  async delete(key: string): Promise<string> {
    return (await this.commit({ guards: [], writes: [{ delete: key }] })).revision;
  }

  /** Puts raw bytes (a value that is not JSON: a corrupt record). */
  putRaw(key: string, value: string | Buffer): string {
    const revision = this.current + 1n;
    this.publish(revision, [this.set(key, Buffer.from(value), revision)]);
    return String(revision);
  }

  async snapshot(ranges: readonly PrefixOrKey[]): Promise<{ readonly revision: string; readonly ranges: readonly StoredKey[][] }> {
    const read = (range: PrefixOrKey): StoredKey[] => {
      if (typeof range === 'string') return this.storedUnder(range);
      const stored = this.storedKey(range.key);
      return stored ? [stored] : [];
    };
    return { revision: String(this.current), ranges: ranges.map(read) };
  }

  async watch(prefix: string, startRevision: string, handlers: KvWatchHandlers): Promise<KvWatch> {
    const watch = { prefix, handlers };
    const start = BigInt(startRevision);
    const past = this.history.filter((event) => BigInt(event.modRevision) >= start && event.key.startsWith(prefix));
    this.watches.add(watch);
    if (past.length > 0) queueMicrotask(() => this.watches.has(watch) && handlers.events(past));
    return {
      cancel: async () => {
        this.watches.delete(watch);
      },
    };
  }

  /** Fails every open watch (as a compaction past its revision would); their owners read again. */
  failWatches(err = new Error('etcdserver: mvcc: required revision has been compacted')): void {
    const failed = [...this.watches];
    this.watches.clear();
    for (const watch of failed) watch.handlers.error(err);
  }

  // --- Reads of what changed (InventoryReader's incremental reads) ---

  async readKeyAndPrefixes(key: string, prefixes: readonly string[]): Promise<KeyAndPrefixes> {
    return { revision: String(this.current), key: this.storedKey(key), ranges: prefixes.map((prefix) => this.storedUnder(prefix)) };
  }

  async changesAfter(key: string, prefixes: readonly string[], after: string): Promise<PrefixChanges> {
    const since = BigInt(after);
    const ranges = prefixes.map((prefix) => this.storedUnder(prefix));
    return {
      revision: String(this.current),
      key: this.storedKey(key),
      changed: ranges.map((range) => range.filter((kv) => BigInt(kv.modRevision) > since)),
      counts: ranges.map((range) => range.length),
    };
  }

  /** From the history (never compacted here, so never null); etcd's error for a revision not reached yet. */
  async keysAt(prefix: string, revision: string): Promise<string[] | null> {
    const at = BigInt(revision);
    if (at > this.current) throw new Error('etcdserver: mvcc: required revision is a future revision');
    const live = new Set<string>();
    for (const event of this.history) {
      if (BigInt(event.modRevision) > at) break;
      if (event.type === 'put') live.add(event.key);
      else live.delete(event.key);
    }
    return this.keysUnder(prefix, live);
  }

  /** Read without an await, so that reads of several keys are of one revision. */
  private storedKey(key: string): StoredKey | null {
    const entry = this.data.get(key);
    return entry ? stored(key, entry) : null;
  }

  private storedUnder(prefix: string): StoredKey[] {
    return this.keysUnder(prefix).map((key) => stored(key, this.data.get(key)!));
  }

  private set(key: string, value: Buffer, revision: bigint): KvEvent {
    const entry = { value, modRevision: revision, createRevision: this.data.get(key)?.createRevision ?? revision };
    this.data.set(key, entry);
    return { type: 'put', ...stored(key, entry) };
  }

  /** Makes `revision` current and hands its changes to the watches, in a microtask (in commit order). */
  private publish(revision: bigint, events: KvEvent[]): void {
    this.current = revision;
    this.history.push(...events);
    for (const watch of this.watches) {
      const seen = events.filter((event) => event.key.startsWith(watch.prefix));
      if (seen.length > 0) queueMicrotask(() => this.watches.has(watch) && watch.handlers.events(seen));
    }
  }

  /** The keys under `prefix` (of the live ones, or of `among`), in key order. */
  private keysUnder(prefix: string, among: Iterable<string> = this.data.keys()): string[] {
    const end = prefixEnd(prefix).toString('latin1');
    return [...among].filter((key) => inRange(key, prefix, end)).sort(compareKeys);
  }

  /** The keys of [start, end) in byte order, as etcd reads a range (see the header for the ends). */
  private keysBetween({ start, end }: KeyBounds): string[] {
    const from = Buffer.from(start);
    const to = Buffer.from(end);
    const within = (key: string): boolean => {
      const k = Buffer.from(key);
      if (end === '') return k.equals(from);
      return Buffer.compare(k, from) >= 0 && (end === '\0' || Buffer.compare(k, to) < 0);
    };
    return [...this.data.keys()].filter(within).sort(compareKeys);
  }

  /** etcd's compare: over the one key, or every live key of a range; an absent key is the zero key. */
  private holds(guard: Guard): boolean {
    if ('prefix' in guard) {
      const limit = BigInt(guard.unchangedSince) + 1n;
      return this.keysUnder(guard.prefix).every((key) => this.data.get(key)!.modRevision < limit);
    }
    const entry = this.data.get(guard.key);
    const mod = entry?.modRevision ?? 0n;
    const create = entry?.createRevision ?? 0n;
    if ('exists' in guard) return create > 0n;
    if ('createRevision' in guard) return create === BigInt(guard.createRevision);
    return mod === BigInt(guard.revision);
  }
}

function stored(key: string, entry: Entry): StoredKey {
  return { key, value: entry.value, modRevision: String(entry.modRevision), createRevision: String(entry.createRevision) };
}

/** [start, end) in etcd's byte order; an end of "\0" (prefixEnd of an all-0xff prefix) means "to the last key". */
function inRange(key: string, start: string, end: string): boolean {
  return compareKeys(key, start) >= 0 && (end === '\0' || compareKeys(Buffer.from(key).toString('latin1'), end) < 0);
}

/** etcd refuses a transaction that puts a key twice or puts a key it also deletes (an error, not a refusal). */
function checkDuplicates(writes: readonly Write[]): void {
  const puts = new Set<string>();
  const deletes: [string, string | undefined][] = [];
  for (const write of writes) {
    if ('put' in write) {
      if (puts.has(write.put)) throw new Error('etcdserver: duplicate key given in txn request');
      puts.add(write.put);
    } else if ('delete' in write) deletes.push([write.delete, undefined]);
    else deletes.push([write.deletePrefix, prefixEnd(write.deletePrefix).toString('latin1')]);
  }
  for (const key of puts) {
    for (const [start, end] of deletes) {
      if (end === undefined ? key === start : inRange(key, start, end)) throw new Error('etcdserver: duplicate key given in txn request');
    }
  }
}
