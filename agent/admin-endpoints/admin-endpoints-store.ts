// The agent's view of the admin endpoints in etcd (/strata/admin-endpoints/<port>, written by the
// control plane's control-plane/admin-endpoints/admin-endpoints-store.ts): every record, and a
// watch of the prefix that only says "something changed" (the enforcer re-reads them all).
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { StoreWatch } from '../../lib/etcd/record-store.js';
import type { AdminEndpointRecord } from '../../lib/records.js';

export class AdminEndpointRecordsStore {
  constructor(private readonly etcd: Etcd3) {}

  /** Every record by its key, as parsed; rejects when one is not JSON, like every record read. */
  async list(): Promise<{ key: string; record: AdminEndpointRecord | null }[]> {
    const raw = await this.etcd.getAll().prefix(keys.adminEndpointsPrefix()).strings();
    return Object.entries(raw).map(([key, value]) => ({ key, record: parseRecord<AdminEndpointRecord>(key, value) }));
  }

  /** `onChange` on every put and delete and whenever the watch (re)connects; `onError` when it fails (it reconnects). */
  watch(onChange: () => void, onError: (err: Error) => void): StoreWatch {
    const watcher = this.etcd.watch().prefix(keys.adminEndpointsPrefix()).watcher();
    watcher.on('put', () => onChange()).on('delete', () => onChange()).on('connected', () => onChange());
    watcher.on('error', onError);
    return {
      cancel: async () => {
        try {
          await watcher.cancel();
        } finally {
          watcher.removeAllListeners();
        }
      },
    };
  }
}
