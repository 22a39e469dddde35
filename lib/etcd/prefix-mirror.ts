// An in-memory mirror of some etcd prefixes and keys: loaded in one transaction (one revision), then kept
// current by watches started from the next revision, so no change is missed between the read
// and the watch. Controllers read the mirror instead of etcd on every pass and learn exactly
// which keys changed. On a watch failure (e.g. compaction past our revision) it reloads.
// It knows the revision it has seen up to, so a reader can wait until it holds every write
// committed before some moment (WatchCache.sync builds linearizable reads on that).
//
// What it mirrors is a list of ranges (lib/etcd/kv.ts's PrefixOrKey): a string is a prefix, every
// key under it; `{ key }` is that one key alone. A single record's key must be given as `{ key }`
// whenever other keys start with it: /strata/cluster as a prefix also holds /strata/cluster-ca,
// the cluster CA with its private key, which an agent must never hold. Either kind is named by its
// string (the prefix, or the key itself) in get(), all(), mirrors(), addIndex(), keepSorted() and
// MirrorChange.prefix, so a reader of one record calls get(key, key) whichever it is. A key is
// stored under the first range it belongs to; a key in none is dropped (see load()).
import type { Logger } from '../logger.js';
import { retry } from '../retry.js';
import { parseRecord } from './client.js';
import { kvOf, type Kv, type KvClient, type KvWatch, type PrefixOrKey } from './kv.js';

export interface MirroredRecord<T> {
  readonly record: T;
  readonly revision: string;
  /** The revision the key was created at (a leader key's term). */
  readonly createRevision: string;
  /** Why the stored value is not a record (only with `keepCorrupt`; `record` is then null). */
  readonly corrupt?: Error;
}

/** `prefix`: the name of the range the key is mirrored under (an exact key's is the key itself). */
export type MirrorChange = { readonly prefix: string; readonly key: string; readonly deleted: boolean };

/** Maps a record to the value it is indexed under (undefined: not indexed). */
export type IndexFunction = (key: string, record: unknown) => string | undefined;

const EMPTY: ReadonlySet<string> = new Set();

/** A mirrored range: its name (the prefix, or the exact key) and whether it is that key alone. */
interface MirroredRange {
  readonly name: string;
  readonly exact: boolean;
}

export class PrefixMirror {
  private readonly maps = new Map<string, Map<string, MirroredRecord<unknown>>>();
  private watchers: KvWatch[] = [];
  /** etcd in the daemons; a test's Kv (test/fakes/memory-etcd.ts) in unit tests. */
  private readonly kv: Kv;
  private stopped = false;
  private readonly abort = new AbortController();
  private readonly listeners = new Set<(changes: MirrorChange[], reloaded: boolean) => void>();
  /** Secondary indexes: name → (prefix, function, value → keys). */
  private readonly indexes = new Map<string, { prefix: string; fn: IndexFunction; entries: Map<string, Set<string>> }>();
  /** Keys of the prefixes asked for with keepSorted(), in etcd's (byte) order. */
  private readonly sorted = new Map<string, string[]>();
  /** Every event up to this revision has been applied (etcd sends a watch's events in revision order). */
  private seenRevision = 0n;
  private waiters: { revision: bigint; resolve: () => void }[] = [];
  /** Per range, how many times its records changed (and were loaded): see changeCount(). */
  private readonly changes = new Map<string, number>();
  private readonly ranges: readonly MirroredRange[];
  /** The ranges as the snapshot reads them (in the order of `ranges`). */
  private readonly reads: readonly PrefixOrKey[];

  /** `ranges`: prefixes (strings) and exact keys (`{ key }`), each named once. */
  constructor(
    client: KvClient,
    ranges: readonly PrefixOrKey[],
    private readonly logger: Logger,
    private readonly options: {
      /**
       * Watch every key, not only the mirrored range, so that every revision arrives (each etcd
       * revision changes at least one key, but maybe one outside our prefixes — another
       * application sharing the etcd): waitForRevision() then never waits for a revision
       * that cannot come.
       */
      readonly everyRevision?: boolean;
      /**
       * Keep a key whose value is not JSON, as a null record with `corrupt` set, rather than
       * leaving it out: a reader that must tell "corrupt" from "absent" (an assignment that
       * cannot be read is not an unassigned volume) sees it.
       */
      readonly keepCorrupt?: boolean;
    } = {},
  ) {
    this.kv = kvOf(client);
    this.reads = ranges;
    this.ranges = ranges.map((r) => (typeof r === 'string' ? { name: r, exact: false } : { name: r.key, exact: true }));
    for (const { name } of this.ranges) {
      // One map per name: a prefix and a key of the same name would share it, and hold the prefix's keys.
      if (this.maps.has(name)) throw new Error(`${name} is mirrored twice`);
      this.maps.set(name, new Map());
    }
  }

  /**
   * Calls `listener` after every batch of changes (`reloaded`: everything may have changed), with
   * every other listener: several readers of one process share the mirror and its one watch.
   * Returns the function that stops the calls.
   */
  onChange(listener: (changes: MirrorChange[], reloaded: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private notify(changes: MirrorChange[], reloaded: boolean): void {
    for (const listener of [...this.listeners]) {
      try {
        listener(changes, reloaded);
      } catch (err) {
        this.logger.error({ err }, 'a mirror listener failed');
      }
    }
  }

  /**
   * Adds a secondary index over one prefix, kept current with the mirror, so callers find the
   * records of, say, one volume without scanning every key. An index added after start() is
   * built from what the mirror holds (a reader constructed later, e.g. a leader's controller,
   * shares the process's mirror); adding a name again replaces its index.
   */
  addIndex(name: string, prefix: string, fn: IndexFunction): void {
    const index = { prefix, fn, entries: new Map<string, Set<string>>() };
    for (const [key, { record }] of this.maps.get(prefix) ?? []) this.indexAdd(index, key, record);
    this.indexes.set(name, index);
  }

  /** The keys indexed under `value` (live set: do not mutate). */
  lookup(name: string, value: string): ReadonlySet<string> {
    return this.indexes.get(name)?.entries.get(value) ?? EMPTY;
  }

  /** Keeps the keys of `prefix` in key order for sortedKeys() (paging). Call before start(). */
  keepSorted(prefix: string): void {
    this.sorted.set(prefix, []);
  }

  /** The keys of a keepSorted() prefix in etcd's key order (live array: do not mutate). */
  sortedKeys(prefix: string): readonly string[] {
    const keys = this.sorted.get(prefix);
    if (!keys) throw new Error(`prefix ${prefix} is not kept sorted`);
    return keys;
  }

  private starting: Promise<void> | undefined;

  /**
   * Reads every prefix and starts the watch; once per mirror however many of its readers call it
   * (a failed start is tried again by the next call).
   */
  start(): Promise<void> {
    this.starting ??= this.load().catch((err: unknown) => {
      this.starting = undefined;
      throw err;
    });
    return this.starting;
  }

  /** Whether `prefix` names one of the mirrored ranges, a prefix or an exact key (a reader checks its own are). */
  mirrors(prefix: string): boolean {
    return this.maps.has(prefix);
  }

  /** The revision the mirror holds every change up to. */
  get revision(): bigint {
    return this.seenRevision;
  }

  /**
   * Resolves true once the mirror has applied every change up to `revision`, false after
   * `timeoutMs` (a revision whose events lie outside the watched range never arrives: the
   * caller decides what to do then, e.g. resync()).
   */
  waitForRevision(revision: bigint, timeoutMs: number): Promise<boolean> {
    if (this.seenRevision >= revision && !this.reloading) return Promise.resolve(true);
    return new Promise((resolve) => {
      const waiter = {
        revision,
        resolve: () => {
          clearTimeout(timer);
          resolve(true);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve(false);
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /**
   * Resolves once the mirror holds every write committed to etcd before the call, so a read after
   * it is as fresh as a read of etcd (needs `everyRevision`): a linearizable read of etcd's current
   * revision, then a wait for the watch to deliver it; past `lagLimitMs`, everything is read again.
   */
  async catchUp(lagLimitMs = 2000): Promise<void> {
    await this.start();
    const revision = await this.kv.revision();
    if (await this.waitForRevision(BigInt(revision), lagLimitMs)) return;
    this.logger.warn({ revision, seen: String(this.seenRevision) }, 'the mirror lags etcd; reading everything again');
    await this.resync();
  }

  /** Reads everything again (at a revision at least as new as any write committed before). */
  resync(): Promise<void> {
    return this.reload();
  }

  get<T>(prefix: string, key: string): MirroredRecord<T> | undefined {
    return this.maps.get(prefix)?.get(key) as MirroredRecord<T> | undefined;
  }

  /** The records under a prefix (live map: do not mutate). */
  all<T>(prefix: string): ReadonlyMap<string, MirroredRecord<T>> {
    return (this.maps.get(prefix) ?? new Map()) as ReadonlyMap<string, MirroredRecord<T>>;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    const watchers = this.watchers;
    this.watchers = [];
    await Promise.all(watchers.map((w) => w.cancel().catch(() => undefined)));
  }

  private async load(): Promise<void> {
    if (!this.ranges[0]) return;
    // One transaction: every range read at the same revision (an exact key alone, nothing after it).
    const { revision, ranges } = await this.kv.snapshot(this.reads);
    ranges.forEach((kvs, index) => {
      const prefix = this.ranges[index]!.name;
      const map = new Map<string, MirroredRecord<unknown>>();
      this.changed(prefix);
      for (const kv of kvs) {
        const entry = this.entryOf(kv.key, kv.value, kv.modRevision, kv.createRevision);
        if (entry) map.set(kv.key, entry);
      }
      this.maps.set(prefix, map);
      if (this.sorted.has(prefix)) this.sorted.set(prefix, [...map.keys()].sort(compareKeys));
      for (const index of this.indexes.values()) {
        if (index.prefix !== prefix) continue;
        index.entries.clear();
        for (const [key, { record }] of map) this.indexAdd(index, key, record);
      }
    });
    // ONE watch over the range covering every mirrored range: etcd orders events only within a
    // watch, and a controller must never see a volume before the node record written ahead of it.
    // That watch is wider than what is mirrored (every key with `everyRevision`; an exact key's
    // name is a prefix to etcd), so the events of keys in no mirrored range (another prefix, the
    // cluster CA beside an exact /strata/cluster) are dropped here, never stored nor reported:
    // only their revision counts, as seen.
    const startRevision = String(BigInt(revision) + 1n);
    const range = this.options.everyRevision ? '' : commonPrefix(this.ranges.map((r) => r.name));
    const watcher = await this.kv.watch(range, startRevision, {
      events: (events) => {
        const changes: MirrorChange[] = [];
        for (const event of events) {
          const key = event.key;
          const prefix = this.rangeOf(key);
          if (prefix === undefined) continue;
          const map = this.maps.get(prefix)!;
          const before = map.get(key);
          if (before) this.unindex(prefix, key, before.record);
          if (event.type === 'delete') {
            if (before) this.sortedRemove(prefix, key);
            map.delete(key);
            this.changed(prefix);
            changes.push({ prefix, key, deleted: true });
          } else {
            const entry = this.entryOf(key, event.value, event.modRevision, event.createRevision);
            if (entry) {
              if (!before) this.sortedInsert(prefix, key);
              map.set(key, entry);
              for (const index of this.indexes.values()) if (index.prefix === prefix) this.indexAdd(index, key, entry.record);
              this.changed(prefix);
              changes.push({ prefix, key, deleted: false });
            }
          }
        }
        for (const event of events) {
          const revision = BigInt(event.modRevision);
          if (revision > this.seenRevision) this.seenRevision = revision;
        }
        if (changes.length > 0) this.notify(changes, false);
        this.wakeWaiters();
      },
      error: (err) => {
        if (this.stopped) return;
        this.logger.warn({ err: err.message }, 'watch failed; reloading the mirror');
        void this.reload();
      },
    });
    const watchers = [watcher];
    this.watchers = watchers;
    const loaded = BigInt(revision);
    if (loaded > this.seenRevision) this.seenRevision = loaded;
    this.notify([], true);
  }

  /**
   * A count that moves whenever a record of the range `prefix` names (a prefix or an exact key)
   * changes, and when the mirror reads everything again: a reader that built something from its
   * records builds it again only when the count moved (InventoryReader keeps its maps of
   * unchanged prefixes).
   */
  changeCount(prefix: string): number {
    return this.changes.get(prefix) ?? 0;
  }

  private changed(prefix: string): void {
    this.changes.set(prefix, this.changeCount(prefix) + 1);
  }

  /** The name of the first mirrored range `key` belongs to; undefined when it belongs to none. */
  private rangeOf(key: string): string | undefined {
    return this.ranges.find((r) => (r.exact ? key === r.name : key.startsWith(r.name)))?.name;
  }

  /** The record of a value; undefined (logged) for a corrupt one, unless kept. */
  private entryOf(key: string, value: Buffer, revision: string, createRevision: string): MirroredRecord<unknown> | undefined {
    try {
      return { record: parseRecord(key, value), revision, createRevision };
    } catch (err) {
      this.logger.error({ err, key }, this.options.keepCorrupt ? 'a corrupt record' : 'ignoring a corrupt record');
      return this.options.keepCorrupt ? { record: null, revision, createRevision, corrupt: err as Error } : undefined;
    }
  }

  private wakeWaiters(): void {
    if (this.reloading || this.waiters.length === 0) return;
    const ready = this.waiters.filter((w) => w.revision <= this.seenRevision);
    if (ready.length === 0) return;
    this.waiters = this.waiters.filter((w) => w.revision > this.seenRevision);
    for (const waiter of ready) waiter.resolve();
  }

  private sortedInsert(prefix: string, key: string): void {
    const keys = this.sorted.get(prefix);
    if (!keys) return;
    keys.splice(lowerBound(keys, key), 0, key);
  }

  private sortedRemove(prefix: string, key: string): void {
    const keys = this.sorted.get(prefix);
    if (!keys) return;
    const at = lowerBound(keys, key);
    if (keys[at] === key) keys.splice(at, 1);
  }

  private indexAdd(index: { fn: IndexFunction; entries: Map<string, Set<string>> }, key: string, record: unknown): void {
    const value = index.fn(key, record);
    if (value === undefined) return;
    let keys = index.entries.get(value);
    if (!keys) index.entries.set(value, (keys = new Set()));
    keys.add(key);
  }

  private unindex(prefix: string, key: string, record: unknown): void {
    for (const index of this.indexes.values()) {
      if (index.prefix !== prefix) continue;
      const value = index.fn(key, record);
      if (value === undefined) continue;
      const keys = index.entries.get(value);
      keys?.delete(key);
      if (keys?.size === 0) index.entries.delete(value);
    }
  }

  private reloading: Promise<void> | undefined;
  private reload(): Promise<void> {
    if (this.reloading) return this.reloading;
    this.reloading = (async () => {
      const old = this.watchers;
      this.watchers = [];
      await Promise.all(old.map((w) => w.cancel().catch(() => undefined)));
      if (this.stopped) return;
      await retry(() => this.load(), {
        backoff: { initialMs: 200, maxMs: 5000, jitter: 0 },
        signal: this.abort.signal,
        onRetry: (err) => this.logger.warn({ err: err.message }, 'mirror reload failed; retrying'),
      }).catch((err: unknown) => {
        if (!this.stopped) throw err;
      });
    })().finally(() => {
      this.reloading = undefined;
      this.wakeWaiters();
    });
    return this.reloading;
  }
}

/** etcd orders keys by their bytes; our keys are ASCII, where that is UTF-16 code unit order. */
export function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The first position in sorted `keys` whose key is not below `key`. */
export function lowerBound(keys: readonly string[], key: string): number {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid]! < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The longest common prefix of the mirrored ranges' names (the one range a single watch covers). */
function commonPrefix(prefixes: readonly string[]): string {
  let common = prefixes[0] ?? '';
  for (const p of prefixes) while (!p.startsWith(common)) common = common.slice(0, -1);
  return common;
}
