// What host-auth.ts reads and writes in etcd for one server (docs/in-band-auth.md,
// docs/nvme-tcp-tls.md): the server's published box key (/strata/in-band-auth/server-keys/<server>),
// and for each sealed feature its switch and the record sealed to this server (the layout is
// lib/etcd/sealed-host-keys-store.ts's SEALED_FEATURES), with those four keys followed in the
// agent's watched state (agent/agent-state-store.ts).
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import { requireMirrored } from '../../../lib/etcd/mirror-follower.js';
import type { PrefixMirror } from '../../../lib/etcd/prefix-mirror.js';
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
  /** The switches and this server's sealed records: the keys followed. */
  private readonly followed: readonly string[];

  constructor(
    private readonly etcd: Etcd3,
    private readonly serverUUID: string,
    private readonly state: PrefixMirror,
  ) {
    this.followed = Object.values(SEALED_FEATURES).flatMap((f) => [f.serverRecord(serverUUID), f.switchKey]);
    requireMirrored(state, this.followed, 'the host-auth store');
  }

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
