// Admin endpoints in etcd: /strata/admin-endpoints/<port, zero-padded>.
import type { KvClient } from '../../lib/etcd/kv.js';
import { keys } from '../../lib/etcd/keys.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import { commitTransaction, unchanged, type CommitResult } from '../../lib/etcd/transaction.js';
import type { AdminEndpointRecord } from '../../lib/records.js';

export type { AdminEndpointRecord };

export class AdminEndpointsStore {
  private readonly records: RecordStore;

  constructor(private readonly etcd: KvClient) {
    this.records = new RecordStore(etcd);
  }

  get(port: number): Promise<Versioned<AdminEndpointRecord> | null> {
    return this.records.get<AdminEndpointRecord>(keys.adminEndpoint(port));
  }

  /** Every endpoint, by port (the key pads the port, so key order is numeric order). */
  list(): Promise<Versioned<AdminEndpointRecord>[]> {
    return this.records.list<AdminEndpointRecord>(keys.adminEndpointsPrefix());
  }

  /** Writes the record if its key is still at `expectedRevision` ('0': absent). */
  put(record: AdminEndpointRecord, expectedRevision: string): Promise<CommitResult> {
    const key = keys.adminEndpoint(record.port);
    return commitTransaction(this.etcd, { guards: [{ key, revision: expectedRevision }], writes: [{ put: key, value: record }] });
  }

  async delete(current: Versioned<AdminEndpointRecord>): Promise<boolean> {
    return (await commitTransaction(this.etcd, { guards: [unchanged(current)], writes: [{ delete: current.key }] })).succeeded;
  }
}
