// The agent's view of the admin endpoints in etcd (/strata/admin-endpoints/<port>, written by the
// control plane's control-plane/admin-endpoints/admin-endpoints-store.ts): every record, and the
// prefix followed in the agent's watched state (agent/agent-state-store.ts), which only says
// "something changed" (the enforcer re-reads them all).
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import { loadInBackground, requireMirrored } from '../../lib/etcd/mirror-follower.js';
import type { PrefixMirror } from '../../lib/etcd/prefix-mirror.js';
import type { StoreWatch } from '../../lib/etcd/record-store.js';
import type { AdminEndpointRecord } from '../../lib/records.js';

export class AdminEndpointRecordsStore {
  private readonly kv: Kv;

  constructor(
    client: KvClient,
    private readonly state: PrefixMirror,
  ) {
    this.kv = kvOf(client);
    requireMirrored(state, [keys.adminEndpointsPrefix()], 'the admin endpoints store');
  }

  /** Every record by its key, as parsed; rejects when one is not JSON, like every record read. */
  async list(): Promise<{ key: string; record: AdminEndpointRecord | null }[]> {
    const stored = await this.kv.range(keys.adminEndpointsPrefix());
    return stored.map(({ key, value }) => ({ key, record: parseRecord<AdminEndpointRecord>(key, value) }));
  }

  /**
   * `onChange` on every put and delete and after the watched state (re)loaded; `onError` is not
   * called (the state reloads by itself).
   */
  watch(onChange: () => void, _onError: (err: Error) => void): StoreWatch {
    const prefix = keys.adminEndpointsPrefix();
    const stop = this.state.onChange((changes, reloaded) => {
      if (reloaded || changes.some((c) => c.prefix === prefix)) onChange();
    });
    loadInBackground(this.state);
    return { cancel: async () => void stop() };
  }
}
