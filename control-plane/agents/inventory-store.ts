// Persists what agents report: server facts and NVMe devices (keyed by serial).
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
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
      const txn = this.etcd.if(keys.serverFacts(serverUUID), 'Mod', '==', factsNow.kvs[0]?.mod_revision ?? 0);
      const ops = [
        this.etcd.put(keys.serverFacts(serverUUID)).value(JSON.stringify(report.facts)),
        ...report.devices.map((d) => this.etcd.put(keys.device(d.serial)).value(JSON.stringify(d))),
      ];
      const compares: [string, string][] = [];
      for (const kv of existing.kvs) {
        const key = kv.key.toString();
        const device = parseRecord<DeviceRecord>(key, kv.value);
        if (!device) continue;
        if (reported.has(device.serial)) {
          compares.push([key, kv.mod_revision]);
        } else if (device.serverUUID === serverUUID && device.present) {
          compares.push([key, kv.mod_revision]);
          ops.push(this.etcd.put(key).value(JSON.stringify({ ...device, present: false })));
        }
      }
      for (const [key, revision] of compares) txn.and(key, 'Mod', '==', revision);
      const result = await txn.then(...ops).commit();
      if (result.succeeded) return;
    }
    throw new Error(`inventory of server ${serverUUID} kept changing under concurrent writes`);
  }
}
