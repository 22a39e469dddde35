// The agent's view of the admin endpoints in etcd (/strata/admin-endpoints/<port>, written by the
// control plane's control-plane/admin-endpoints/admin-endpoints-store.ts): every record, and the
// prefix followed in the agent's watched state (agent/agent-state-store.ts), which only says
// "something changed" (the enforcer re-reads them all).
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { loadInBackground, requireMirrored } from '../../lib/etcd/mirror-follower.js';
import type { PrefixMirror } from '../../lib/etcd/prefix-mirror.js';
import type { StoreWatch } from '../../lib/etcd/record-store.js';
import type { AdminEndpointRecord } from '../../lib/records.js';

export class AdminEndpointRecordsStore {
  constructor(
    private readonly etcd: Etcd3,
    private readonly state: PrefixMirror,
  ) {
    requireMirrored(state, [keys.adminEndpointsPrefix()], 'the admin endpoints store');
  }

  /** Every record by its key, as parsed; rejects when one is not JSON, like every record read. */
  async list(): Promise<{ key: string; record: AdminEndpointRecord | null }[]> {
    const raw = await this.etcd.getAll().prefix(keys.adminEndpointsPrefix()).strings();
    return Object.entries(raw).map(([key, value]) => ({ key, record: parseRecord<AdminEndpointRecord>(key, value) }));
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
