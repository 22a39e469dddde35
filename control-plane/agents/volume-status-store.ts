// Persists the volume states agents report: /strata/volume-status/<volume>/<node>.
import type { Etcd3 } from 'etcd3';
import type { IOperation } from 'etcd3/lib/builder.js';
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord, unconditionalTxn } from '../../lib/etcd/client.js';
import type { VolumeStatusRecord } from '../../lib/records.js';

/** etcd refuses transactions with more than 128 operations (--max-txn-ops). */
const OPS_PER_TXN = 100;

export class VolumeStatusStore {
  constructor(private readonly etcd: Etcd3) {}

  /**
   * Writes the reported records that changed (ignoring reportedAt, so an unchanged volume costs
   * no write); with `completeFor`, also marks Absent every stored record of those nodes that
   * the report does not list (the node holds nothing else).
   */
  async save(reported: readonly VolumeStatusRecord[], completeFor: ReadonlySet<string> | undefined): Promise<void> {
    const stored = new Map<string, VolumeStatusRecord>();
    if (completeFor) {
      for (const kv of (await this.etcd.getAll().prefix(keys.volumeStatusPrefix()).exec()).kvs) {
        const key = kv.key.toString();
        const record = parseRecord<VolumeStatusRecord>(key, kv.value);
        if (record && completeFor.has(record.nodeUUID)) stored.set(key, record);
      }
    } else {
      const read = await Promise.all(reported.map((r) => this.etcd.get(keys.volumeStatus(r.volumeUUID, r.nodeUUID)).string()));
      reported.forEach((r, i) => {
        const record = parseRecord<VolumeStatusRecord>('', read[i] ?? null);
        if (record) stored.set(keys.volumeStatus(r.volumeUUID, r.nodeUUID), record);
      });
    }
    const ops: IOperation[] = [];
    const listed = new Set<string>();
    for (const record of reported) {
      const key = keys.volumeStatus(record.volumeUUID, record.nodeUUID);
      listed.add(key);
      const before = stored.get(key);
      if (!before || !sameStatus(before, record)) ops.push(this.etcd.put(key).value(JSON.stringify(record)));
    }
    for (const [key, record] of stored) {
      if (!listed.has(key) && record.state !== 'Absent') {
        ops.push(this.etcd.put(key).value(JSON.stringify({ ...record, state: 'Absent', error: '', connectedHosts: [], snapshots: [], reportedAt: new Date().toISOString() })));
      }
    }
    for (let i = 0; i < ops.length; i += OPS_PER_TXN) {
      await unconditionalTxn(this.etcd).then(...ops.slice(i, i + OPS_PER_TXN)).commit();
    }
  }
}

function sameStatus(a: VolumeStatusRecord, b: VolumeStatusRecord): boolean {
  return JSON.stringify({ ...a, reportedAt: '' }) === JSON.stringify({ ...b, reportedAt: '' });
}
