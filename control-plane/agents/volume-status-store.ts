// Persists the volume states agents report: /strata/volume-status/<volume>/<node>.
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import type { VolumeStatusRecord } from '../../lib/records.js';
import { LOST_RACE, retryLostRaces, type LostRace } from '../../lib/retry.js';
import { withWrittenReport, type WrittenReport } from '../volumes/user-written.js';

/** etcd refuses transactions with more than 128 operations (--max-txn-ops). */
const OPS_PER_TXN = 100;

/** A reported status before the store adds what it keeps from the stored one (bytes written). */
export type ReportedVolumeStatus = Omit<VolumeStatusRecord, 'userWritten'> & { written?: WrittenReport };

export class VolumeStatusStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  /**
   * Writes the reported records that changed (ignoring reportedAt, so an unchanged volume costs
   * no write); with `completeFor`, also marks Absent every stored record of those nodes that
   * the report does not list (the node holds nothing else). A record's bytes written are carried
   * from the stored one (user-written.ts), so every write compares the mod_revision of the
   * record it was derived from: two reports racing (an agent failing over between control
   * planes) never lose a count or count one twice; the loser reads again.
   */
  async save(reported: readonly ReportedVolumeStatus[], completeFor: ReadonlySet<string> | undefined): Promise<void> {
    await retryLostRaces(5, () => this.trySave(reported, completeFor), () => new Error('volume states kept changing under concurrent writes'));
  }

  private async trySave(reported: readonly ReportedVolumeStatus[], completeFor: ReadonlySet<string> | undefined): Promise<void | LostRace> {
    const stored = new Map<string, { record: VolumeStatusRecord; revision: string }>();
    if (completeFor) {
      for (const { key, value, modRevision } of await this.kv.range(keys.volumeStatusPrefix())) {
        const record = parseRecord<VolumeStatusRecord>(key, value);
        if (record && completeFor.has(record.nodeUUID)) stored.set(key, { record, revision: modRevision });
      }
    } else {
      const read = await Promise.all(reported.map((r) => this.kv.get(keys.volumeStatus(r.volumeUUID, r.nodeUUID))));
      reported.forEach((r, i) => {
        const kv = read[i];
        const key = keys.volumeStatus(r.volumeUUID, r.nodeUUID);
        const record = kv ? parseRecord<VolumeStatusRecord>(key, kv.value) : null;
        if (kv && record) stored.set(key, { record, revision: kv.modRevision });
      });
    }
    const writes: { key: string; value: VolumeStatusRecord }[] = [];
    const listed = new Set<string>();
    for (const { written, ...status } of reported) {
      const key = keys.volumeStatus(status.volumeUUID, status.nodeUUID);
      listed.add(key);
      const before = stored.get(key)?.record;
      const userWritten = withWrittenReport(before?.userWritten, written);
      const record: VolumeStatusRecord = { ...status, ...(userWritten ? { userWritten } : {}) };
      if (!before || !sameStatus(before, record)) writes.push({ key, value: record });
    }
    for (const [key, { record }] of stored) {
      if (!listed.has(key) && record.state !== 'Absent') {
        writes.push({ key, value: { ...record, state: 'Absent', error: '', connectedHosts: [], snapshots: [], reportedAt: new Date().toISOString() } });
      }
    }
    for (let i = 0; i < writes.length; i += OPS_PER_TXN) {
      const chunk = writes.slice(i, i + OPS_PER_TXN);
      // A key read absent is guarded at revision '0': made meanwhile, it fails the transaction too.
      const result = await this.kv.commit({
        guards: chunk.map((w) => ({ key: w.key, revision: stored.get(w.key)?.revision ?? '0' })),
        writes: chunk.map((w) => ({ put: w.key, value: w.value })),
      });
      if (!result.succeeded) return LOST_RACE;
    }
    return undefined;
  }
}

function sameStatus(a: VolumeStatusRecord, b: VolumeStatusRecord): boolean {
  return JSON.stringify({ ...a, reportedAt: '' }) === JSON.stringify({ ...b, reportedAt: '' });
}
