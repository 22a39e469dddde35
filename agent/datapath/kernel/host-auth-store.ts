// What host-auth.ts reads and writes in etcd for one server (docs/in-band-auth.md,
// docs/nvme-tcp-tls.md): the server's published box key (/strata/in-band-auth/server-keys/<server>),
// and for each sealed feature its switch and the record sealed to this server (the layout is
// lib/etcd/sealed-host-keys-store.ts's SEALED_FEATURES), with those four keys followed in the
// agent's watched state (agent/agent-state-store.ts).
import { parseRecord } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../../lib/etcd/kv.js';
import { requireMirrored } from '../../../lib/etcd/mirror-follower.js';
import type { PrefixMirror } from '../../../lib/etcd/prefix-mirror.js';
import type { StoreWatch } from '../../../lib/etcd/record-store.js';
import { SEALED_FEATURES } from '../../../lib/etcd/sealed-host-keys-store.js';
import { commitUnguarded } from '../../../lib/etcd/transaction.js';
import type { ServerBoxKeyRecord, ServerHostKeysRecord } from '../../../lib/records.js';

export type SealedFeature = keyof typeof SEALED_FEATURES;

/** A feature as etcd has it for this server: its switch, and the record sealed to this server (null: none). */
export interface SealedForServer {
  readonly switchEnabled: boolean;
  readonly record: ServerHostKeysRecord | null;
}

export class HostAuthStore {
  /** The switches and this server's sealed records: the keys followed. */
  private readonly followed: readonly string[];
  private readonly kv: Kv;

  constructor(
    client: KvClient,
    private readonly serverUUID: string,
    private readonly state: PrefixMirror,
  ) {
    this.kv = kvOf(client);
    this.followed = Object.values(SEALED_FEATURES).flatMap((f) => [f.serverRecord(serverUUID), f.switchKey]);
    requireMirrored(state, this.followed, 'the host-auth store');
  }

  async publishedBoxKey(): Promise<ServerBoxKeyRecord | null> {
    const key = keys.serverBoxKey(this.serverUUID);
    return parseRecord<ServerBoxKeyRecord>(key, (await this.kv.get(key))?.value ?? null);
  }

  async publishBoxKey(record: ServerBoxKeyRecord): Promise<void> {
    await commitUnguarded(this.kv, [{ put: keys.serverBoxKey(this.serverUUID), value: record }]);
  }

  /** The feature's switch and this server's sealed record, read together. */
  async sealed(feature: SealedFeature): Promise<SealedForServer> {
    const layout = SEALED_FEATURES[feature];
    const recordKey = layout.serverRecord(this.serverUUID);
    const [switchKv, recordKv] = await Promise.all([this.kv.get(layout.switchKey), this.kv.get(recordKey)]);
    return {
      switchEnabled: parseRecord<{ enabled: boolean }>(layout.switchKey, switchKv?.value ?? null)?.enabled ?? false,
      record: parseRecord<ServerHostKeysRecord>(recordKey, recordKv?.value ?? null),
    };
  }

  /**
   * Follows every feature's switch and this server's sealed records: `onChange` on every change
   * of one and after the watched state (re)loaded. Resolves once the state is loaded (rejects
   * while etcd does not answer; the caller retries).
   */
  async watch(onChange: () => void): Promise<StoreWatch> {
    await this.state.start();
    const followed = new Set(this.followed);
    const stop = this.state.onChange((changes, reloaded) => {
      if (reloaded || changes.some((c) => followed.has(c.key))) onChange();
    });
    return { cancel: async () => void stop() };
  }
}
