// An in-memory mirror of some etcd prefixes: loaded in one transaction (one revision), then kept
// current by watches started from the next revision, so no change is missed between the read
// and the watch. Controllers read the mirror instead of etcd on every pass and learn exactly
// which keys changed. On a watch failure (e.g. compaction past our revision) it reloads.
import type { Etcd3, Watcher } from 'etcd3';
import type { Logger } from '../logger.js';
import { parseRecord, unconditionalTxn } from './client.js';

export interface MirroredRecord<T> {
  readonly record: T;
  readonly revision: string;
}

export type MirrorChange = { readonly prefix: string; readonly key: string; readonly deleted: boolean };

export class PrefixMirror {
  private readonly maps = new Map<string, Map<string, MirroredRecord<unknown>>>();
  private watchers: Watcher[] = [];
  private stopped = false;
  private listener: (changes: MirrorChange[], reloaded: boolean) => void = () => {};

  constructor(
    private readonly etcd: Etcd3,
    private readonly prefixes: readonly string[],
    private readonly logger: Logger,
  ) {
    for (const prefix of prefixes) this.maps.set(prefix, new Map());
  }

  /** Called after every batch of changes; `reloaded` means everything may have changed. */
  onChange(listener: (changes: MirrorChange[], reloaded: boolean) => void): void {
    this.listener = listener;
  }

  async start(): Promise<void> {
    await this.load();
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
    const watchers = this.watchers;
    this.watchers = [];
    await Promise.all(watchers.map((w) => w.cancel().catch(() => undefined)));
  }

  private async load(): Promise<void> {
    const [first, ...rest] = this.prefixes;
    if (!first) return;
    // One transaction: every prefix read at the same revision.
    const result = await unconditionalTxn(this.etcd)
      .then(...[first, ...rest].map((p) => this.etcd.getAll().prefix(p)))
      .commit();
    const revision = result.header.revision;
    result.responses.forEach((response, index) => {
      const prefix = this.prefixes[index]!;
      const map = new Map<string, MirroredRecord<unknown>>();
      for (const kv of response.response_range.kvs) {
        const key = kv.key.toString();
        map.set(key, { record: parseRecord(key, kv.value), revision: kv.mod_revision });
      }
      this.maps.set(prefix, map);
    });
    const startRevision = String(BigInt(revision) + 1n);
    const watchers: Watcher[] = [];
    for (const prefix of this.prefixes) {
      const watcher = await this.etcd.watch().prefix(prefix).startRevision(startRevision).create();
      watcher.on('data', (res) => {
        const changes: MirrorChange[] = [];
        const map = this.maps.get(prefix)!;
        for (const event of res.events) {
          const key = event.kv.key.toString();
          if (event.type === 'Delete') {
            map.delete(key);
            changes.push({ prefix, key, deleted: true });
          } else {
            try {
              map.set(key, { record: parseRecord(key, event.kv.value), revision: event.kv.mod_revision });
              changes.push({ prefix, key, deleted: false });
            } catch (err) {
              this.logger.error({ err, key }, 'ignoring a corrupt record');
            }
          }
        }
        if (changes.length > 0) this.listener(changes, false);
      });
      watcher.on('error', (err) => {
        if (this.stopped) return;
        this.logger.warn({ err: err.message, prefix }, 'watch failed; reloading the mirror');
        void this.reload();
      });
      watchers.push(watcher);
    }
    this.watchers = watchers;
    this.listener([], true);
  }

  private reloading: Promise<void> | undefined;
  private reload(): Promise<void> {
    if (this.reloading) return this.reloading;
    this.reloading = (async () => {
      const old = this.watchers;
      this.watchers = [];
      await Promise.all(old.map((w) => w.cancel().catch(() => undefined)));
      for (let delay = 200; !this.stopped; delay = Math.min(delay * 2, 5000)) {
        try {
          await this.load();
          return;
        } catch (err) {
          this.logger.warn({ err: (err as Error).message }, 'mirror reload failed; retrying');
          await new Promise((r) => setTimeout(r, delay));
        }
      }
    })().finally(() => {
      this.reloading = undefined;
    });
    return this.reloading;
  }
}
