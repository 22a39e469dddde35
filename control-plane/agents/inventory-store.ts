// Persists what agents report: server facts and NVMe devices (keyed by serial).
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import type { Guard, Write } from '../../lib/etcd/transaction.js';
import type { DeviceRecord, ServerFactsRecord } from '../../lib/records.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';

export interface InventoryReport {
  readonly facts: ServerFactsRecord;
  readonly devices: readonly DeviceRecord[];
}

export class InventoryStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  /**
   * Writes the report in one transaction: facts, every reported device, and `present: false`
   * for devices this server reported before but not now. Compares every read key's revision,
   * so two reports racing (an agent failing over between control planes) never interleave.
   */
  async save(serverUUID: string, report: InventoryReport): Promise<void> {
    await retryLostRaces(
      5,
      async () => {
        const [factsNow, existing] = await Promise.all([this.kv.get(keys.serverFacts(serverUUID)), this.kv.range(keys.devicesPrefix())]);
        const reported = new Set(report.devices.map((d) => d.serial));
        const guards: Guard[] = [{ key: keys.serverFacts(serverUUID), revision: factsNow?.modRevision ?? '0' }];
        const writes: Write[] = [{ put: keys.serverFacts(serverUUID), value: report.facts }];
        // Unchanged devices are not rewritten: their ETag (mod_revision) changes only on change.
        const unchanged = new Set<string>();
        for (const { key, value, modRevision } of existing) {
          const device = parseRecord<DeviceRecord>(key, value);
          if (!device) continue;
          if (reported.has(device.serial)) {
            guards.push({ key, revision: modRevision });
            unchanged.add(device.serial);
            const fresh = report.devices.find((d) => d.serial === device.serial);
            if (fresh && !sameDevice(fresh, device)) unchanged.delete(device.serial);
          } else if (device.serverUUID === serverUUID && device.present) {
            guards.push({ key, revision: modRevision });
            // reportedAt becomes the time the device was found missing (its failureTime).
            writes.push({ put: key, value: { ...device, present: false, reportedAt: report.facts.reportedAt } });
          }
        }
        for (const device of report.devices) {
          if (!unchanged.has(device.serial)) writes.push({ put: keys.device(device.serial), value: device });
        }
        return (await this.kv.commit({ guards, writes })).succeeded ? undefined : LOST_RACE;
      },
      () => new Error(`inventory of server ${serverUUID} kept changing under concurrent writes`),
    );
  }
}

/** Equal in everything but the report time. */
function sameDevice(a: DeviceRecord, b: DeviceRecord): boolean {
  return JSON.stringify({ ...a, reportedAt: '' }) === JSON.stringify({ ...b, reportedAt: '' });
}
