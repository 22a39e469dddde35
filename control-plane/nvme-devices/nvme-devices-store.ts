// etcd writes of the NVMe devices API: giving a device to a node (POST /api/v2/nvmeDevices).
import type { Etcd3 } from 'etcd3';
import type { IOperation } from 'etcd3/lib/builder.js';
import type { DeviceRecord, NodeRecord, PresenceRecord } from '../../lib/records.js';
import type { Stored } from '../inventory/inventory-reader.js';

export class NvmeDevicesStore {
  constructor(private readonly etcd: Etcd3) {}

  /**
   * Appends the device to the node's managedDeviceSerials, in one transaction with `extraOps`
   * (the event). Compares the node, the device and the server's presence at the revisions the
   * checks were made at: false when any changed (the caller checks again). The device record is
   * rewritten unchanged so its ETag (mod_revision) moves: its nodeUUID and usage changed, and
   * two requests giving the same device to different nodes conflict here.
   */
  async attach(node: Stored<NodeRecord>, device: Stored<DeviceRecord>, presence: Stored<PresenceRecord>, extraOps: readonly IOperation[]): Promise<boolean> {
    const updated: NodeRecord = { ...node.record, managedDeviceSerials: [...node.record.managedDeviceSerials, device.record.serial] };
    const result = await this.etcd
      .if(node.key, 'Mod', '==', node.modRevision)
      .and(device.key, 'Mod', '==', device.modRevision)
      .and(presence.key, 'Mod', '==', presence.modRevision)
      .then(this.etcd.put(node.key).value(JSON.stringify(updated)), this.etcd.put(device.key).value(JSON.stringify(device.record)), ...extraOps)
      .commit();
    return result.succeeded;
  }
}
