// Persists what agents report: server facts and NVMe devices (keyed by serial).
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { commitTransaction, type Guard, type Write } from '../../lib/etcd/transaction.js';
import type { DeviceRecord, ServerFactsRecord } from '../../lib/records.js';

export interface InventoryReport {
  readonly facts: ServerFactsRecord;
  readonly devices: readonly DeviceRecord[];
}

export class InventoryStore {
  constructor(private readonly etcd: Etcd3) {}

  /**
   * Writes the report in one transaction: facts, every reported device, and `present: false`
   * for devices this server reported before but not now. Compares every read key's revision,
   * so two reports racing (an agent failing over between control planes) never interleave.
   */
  async save(serverUUID: string, report: InventoryReport): Promise<void> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const [factsNow, existing] = await Promise.all([
        this.etcd.get(keys.serverFacts(serverUUID)).exec(),
        this.etcd.getAll().prefix(keys.devicesPrefix()).exec(),
      ]);
      const reported = new Set(report.devices.map((d) => d.serial));
      const guards: Guard[] = [{ key: keys.serverFacts(serverUUID), revision: factsNow.kvs[0]?.mod_revision ?? '0' }];
      const writes: Write[] = [{ put: keys.serverFacts(serverUUID), value: report.facts }];
      // Unchanged devices are not rewritten: their ETag (mod_revision) changes only on change.
      const unchanged = new Set<string>();
      for (const kv of existing.kvs) {
        const key = kv.key.toString();
        const device = parseRecord<DeviceRecord>(key, kv.value);
        if (!device) continue;
        if (reported.has(device.serial)) {
          guards.push({ key, revision: kv.mod_revision });
          unchanged.add(device.serial);
          const fresh = report.devices.find((d) => d.serial === device.serial);
          if (fresh && !sameDevice(fresh, device)) unchanged.delete(device.serial);
        } else if (device.serverUUID === serverUUID && device.present) {
          guards.push({ key, revision: kv.mod_revision });
          // reportedAt becomes the time the device was found missing (its failureTime).
          writes.push({ put: key, value: { ...device, present: false, reportedAt: report.facts.reportedAt } });
        }
      }
      for (const device of report.devices) {
        if (!unchanged.has(device.serial)) writes.push({ put: keys.device(device.serial), value: device });
      }
      if ((await commitTransaction(this.etcd, { guards, writes })).succeeded) return;
    }
    throw new Error(`inventory of server ${serverUUID} kept changing under concurrent writes`);
  }
}

/** Equal in everything but the report time. */
function sameDevice(a: DeviceRecord, b: DeviceRecord): boolean {
  return JSON.stringify({ ...a, reportedAt: '' }) === JSON.stringify({ ...b, reportedAt: '' });
}
