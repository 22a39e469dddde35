// Following some keys of a PrefixMirror from what a reader was given, without missing a change
// and without a watch of its own: the reader keeps which revision of each key it has seen, and is
// told of every key whose revision differs from the mirror's — at once (what changed between its
// read and its subscription), after every batch of changes, and after a reload (a watch that
// failed, e.g. after a compaction, where etcd's events in between are lost but the state is not).
// Stores that replay "from a revision" on the process's one watch use it.
import type { MirroredRecord, PrefixMirror } from './prefix-mirror.js';

/** What a reader has seen of some keys: key → the revision it saw (mod_revision). */
export type SeenKeys = Map<string, string>;

export interface KeysRead {
  /** Every change up to this revision is in `entries`. */
  readonly revision: bigint;
  readonly entries: [string, MirroredRecord<unknown>][];
  /** Hand it to followKeys() to be told of every change after this read. */
  readonly seen: SeenKeys;
}

/** The keys of `prefix` (a mirrored prefix) that start with `keyPrefix`, as the mirror holds them now. */
export function readKeys(mirror: PrefixMirror, prefix: string, keyPrefix: string): KeysRead {
  const entries = [...mirror.all<unknown>(prefix)].filter(([key]) => key.startsWith(keyPrefix));
  return { revision: mirror.revision, entries, seen: new Map(entries.map(([key, entry]) => [key, entry.revision])) };
}

/**
 * What a reader holds of the keys after `revision`: what its read `last` at that revision handed
 * over, or else (no such read) every key not written since.
 */
export function seenAfter(mirror: PrefixMirror, prefix: string, keyPrefix: string, revision: bigint, last: KeysRead | undefined): SeenKeys {
  if (last?.revision === revision) return new Map(last.seen);
  const unchanged = [...mirror.all<unknown>(prefix)].filter(([key, e]) => key.startsWith(keyPrefix) && BigInt(e.revision) <= revision);
  return new Map(unchanged.map(([key, e]) => [key, e.revision]));
}

export interface KeyChanges {
  /** The key is as `entry` now (written since the reader saw it, or not seen before). */
  put(key: string, entry: MirroredRecord<unknown>): void;
  /** The key is gone; `revision`: the mirror's, at or after the delete. */
  delete(key: string, revision: bigint): void;
}

/**
 * Calls `on` for every key of `prefix` starting with `keyPrefix` that differs from `seen` (which
 * it keeps current), first at once, then on every change. Returns the function that stops it.
 */
export function followKeys(mirror: PrefixMirror, prefix: string, keyPrefix: string, seen: SeenKeys, on: KeyChanges): () => void {
  const check = (key: string) => {
    const entry = mirror.get<unknown>(prefix, key);
    if (entry) {
      if (seen.get(key) === entry.revision) return;
      seen.set(key, entry.revision);
      on.put(key, entry);
    } else if (seen.delete(key)) {
      on.delete(key, mirror.revision);
    }
  };
  const checkAll = () => {
    // Not loaded yet: its load (a reload to the listener) brings the comparison.
    if (mirror.revision === 0n) return;
    for (const key of [...seen.keys()]) check(key);
    for (const key of mirror.all<unknown>(prefix).keys()) if (key.startsWith(keyPrefix)) check(key);
  };
  const unsubscribe = mirror.onChange((changes, reloaded) => {
    if (reloaded) return checkAll();
    for (const change of changes) if (change.prefix === prefix && change.key.startsWith(keyPrefix)) check(change.key);
  });
  checkAll();
  loadInBackground(mirror);
  return unsubscribe;
}

/**
 * Calls `onPut` for every key of `prefix` written from now on (and, with `afterReload`, for every
 * key after a reload: writes the failed watch may have missed). Returns the function that stops it.
 */
export function followPuts(mirror: PrefixMirror, prefix: string, onPut: (key: string, entry: MirroredRecord<unknown>) => void, afterReload: 'all' | 'none'): () => void {
  loadInBackground(mirror);
  return mirror.onChange((changes, reloaded) => {
    if (reloaded) {
      if (afterReload === 'all') for (const [key, entry] of mirror.all<unknown>(prefix)) onPut(key, entry);
      return;
    }
    for (const change of changes) {
      if (change.prefix !== prefix || change.deleted) continue;
      const entry = mirror.get<unknown>(prefix, change.key);
      if (entry) onPut(change.key, entry);
    }
  });
}

/** Throws unless `mirror` mirrors every prefix a reader reads from it (a store's constructor asks). */
export function requireMirrored(mirror: PrefixMirror, prefixes: readonly string[], reader: string): void {
  const missing = prefixes.filter((p) => !mirror.mirrors(p));
  if (missing.length > 0) throw new Error(`${reader} reads ${missing.join(', ')}, which the watched state does not mirror`);
}

/** The record of a mirrored entry (null: absent); throws when it was not JSON, like a read of etcd. */
export function recordOf<T>(entry: MirroredRecord<unknown> | undefined): T | null {
  if (entry?.corrupt) throw entry.corrupt;
  return (entry?.record ?? null) as T | null;
}

/**
 * Loads the mirror if no reader has yet (its load reaches the listeners as a reload). A failed
 * load is left to the process's root, which starts the mirror retrying (agent/agent.ts).
 */
export function loadInBackground(mirror: PrefixMirror): void {
  mirror.start().catch(() => undefined);
}
