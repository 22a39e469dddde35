// What host-auth.ts reads and writes in etcd for one server (docs/in-band-auth.md,
// docs/nvme-tcp-tls.md): the server's published box key (/strata/in-band-auth/server-keys/<server>),
// and for each sealed feature its switch and the record sealed to this server (the layout is
// lib/etcd/sealed-host-keys-store.ts's SEALED_FEATURES), with a watch of those four keys.
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { StoreWatch } from '../../../lib/etcd/record-store.js';
import { SEALED_FEATURES } from '../../../lib/etcd/sealed-host-keys-store.js';
import type { ServerBoxKeyRecord, ServerHostKeysRecord } from '../../../lib/records.js';

export type SealedFeature = keyof typeof SEALED_FEATURES;

/** A feature as etcd has it for this server: its switch, and the record sealed to this server (null: none). */
export interface SealedForServer {
  readonly switchEnabled: boolean;
  readonly record: ServerHostKeysRecord | null;
}

export class HostAuthStore {
  constructor(
    private readonly etcd: Etcd3,
    private readonly serverUUID: string,
  ) {}

  async publishedBoxKey(): Promise<ServerBoxKeyRecord | null> {
    const key = keys.serverBoxKey(this.serverUUID);
    return parseRecord<ServerBoxKeyRecord>(key, await this.etcd.get(key).string());
  }

  async publishBoxKey(record: ServerBoxKeyRecord): Promise<void> {
    await this.etcd.put(keys.serverBoxKey(this.serverUUID)).value(JSON.stringify(record));
  }

  /** The feature's switch and this server's sealed record, read together. */
  async sealed(feature: SealedFeature): Promise<SealedForServer> {
    const layout = SEALED_FEATURES[feature];
    const recordKey = layout.serverRecord(this.serverUUID);
    const [switchText, recordText] = await Promise.all([this.etcd.get(layout.switchKey).string(), this.etcd.get(recordKey).string()]);
    return {
      switchEnabled: parseRecord<{ enabled: boolean }>(layout.switchKey, switchText)?.enabled ?? false,
      record: parseRecord<ServerHostKeysRecord>(recordKey, recordText),
    };
  }

  /**
   * Watches every feature's switch and this server's sealed records: `onChange` on every event
   * and whenever a watch (re)connects. Resolves once every watch is created (one at a time).
   */
  async watch(onChange: () => void): Promise<StoreWatch> {
    const watchers: StoreWatch[] = [];
    const all: StoreWatch = { cancel: async () => void (await Promise.all(watchers.splice(0).map((w) => w.cancel().catch(() => undefined)))) };
    const watched = Object.values(SEALED_FEATURES).flatMap((f) => [f.serverRecord(this.serverUUID), f.switchKey]);
    try {
      for (const key of watched) {
        const watcher = await this.etcd.watch().key(key).create();
        watchers.push(watcher);
        watcher.on('data', () => onChange());
        watcher.on('connected', () => onChange());
      }
    } catch (err) {
      await all.cancel();
      throw err;
    }
    return all;
  }
}
