// etcd writes of the NVMe devices API: giving a device to a node (POST /api/v2/nvmeDevices).
import type { KvClient } from '../../lib/etcd/kv.js';
import { commitTransaction } from '../../lib/etcd/transaction.js';
import type { DeviceRecord, NodeRecord, PresenceRecord } from '../../lib/records.js';
import type { PreparedEvent } from '../events/event-log-store.js';
import type { Stored } from '../inventory/inventory-reader.js';

export class NvmeDevicesStore {
  constructor(private readonly etcd: KvClient) {}

  /**
   * Appends the device to the node's managedDeviceSerials, in one transaction with its event
   * (if any). Compares the node, the device and the server's presence at the revisions the
   * checks were made at: false when any changed (the caller checks again). The device record is
   * rewritten unchanged so its ETag (mod_revision) moves: its nodeUUID and usage changed, and
   * two requests giving the same device to different nodes conflict here.
   */
  async attach(node: Stored<NodeRecord>, device: Stored<DeviceRecord>, presence: Stored<PresenceRecord>, event: PreparedEvent | null): Promise<boolean> {
    const updated: NodeRecord = { ...node.record, managedDeviceSerials: [...node.record.managedDeviceSerials, device.record.serial] };
    const result = await commitTransaction(this.etcd, {
      guards: [node, device, presence].map((stored) => ({ key: stored.key, revision: stored.modRevision })),
      writes: [{ put: node.key, value: updated }, { put: device.key, value: device.record }, ...(event?.writes ?? [])],
    });
    return result.succeeded;
  }
}
