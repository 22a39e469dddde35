// NVMe devices (spec 2.13, 4.9): the 13 fields of a device, from the device records the
// control plane persists from agent reports, and the nodes that use them.
import { errors } from '../../lib/errors.js';
import type { DeviceRecord } from '../../lib/records.js';
import type { InventorySource, Stored } from '../inventory/inventory-reader.js';
import { InventoryView, bytes, type DeviceUsage } from '../inventory/inventory-view.js';
import { etagOf, int64, timestamp } from '../inventory/wire.js';

export type DeviceState = 'None' | 'Healthy' | 'Adding' | 'Rebuilding' | 'Failed';

/** A device as the API returns it: exactly the 13 fields of spec 2.13. */
export interface NvmeDeviceWire {
  size: string;
  numaNodeID: string;
  model: string;
  serial: string;
  serverUUID: string;
  state: DeviceState;
  failureTime: string | null;
  rebuildCompletionTime: string | null;
  name: string;
  nodeUUID: string;
  ETag: string;
  /** Data devices only; null for the others. */
  statistics: { UnrecoverableDataIntegrityErrors: number; RecoverableDataIntegrityErrors: number } | null;
  deviceUsage: DeviceUsage;
}

export interface NvmeDeviceFilters {
  readonly nodeUUID?: string;
  readonly serverUUID?: string;
  /** Empty or absent: every usage. */
  readonly deviceUsages?: readonly DeviceUsage[];
}

export class NvmeDevicesService {
  constructor(private readonly inventory: InventorySource) {}

  async list(filters: NvmeDeviceFilters = {}): Promise<NvmeDeviceWire[]> {
    const view = new InventoryView(await this.inventory.read());
    const usages = filters.deviceUsages && filters.deviceUsages.length > 0 ? new Set(filters.deviceUsages) : undefined;
    const devices: NvmeDeviceWire[] = [];
    for (const device of view.snapshot.devices.values()) {
      if (!isListed(view, device.record)) continue;
      const wire = deviceToWire(view, device);
      if (filters.nodeUUID !== undefined && wire.nodeUUID !== filters.nodeUUID) continue;
      if (filters.serverUUID !== undefined && wire.serverUUID !== filters.serverUUID) continue;
      if (usages && !usages.has(wire.deviceUsage)) continue;
      devices.push(wire);
    }
    return devices;
  }

  async get(serial: string): Promise<NvmeDeviceWire> {
    const view = new InventoryView(await this.inventory.read());
    const device = view.snapshot.devices.get(serial);
    if (!device || !isListed(view, device.record)) throw errors.notFound('NVMe device', serial);
    return deviceToWire(view, device);
  }
}

/**
 * A device is listed while its agent reports it, or while a node still uses it (it is then
 * Failed). An unused device that is no longer reported (pulled) is gone: not listed, 404.
 */
function isListed(view: InventoryView, device: DeviceRecord): boolean {
  return device.present || view.assignmentOf(device.serial) !== undefined;
}

export function deviceToWire(view: InventoryView, stored: Stored<DeviceRecord>): NvmeDeviceWire {
  const device = stored.record;
  const assignment = view.assignmentOf(device.serial);
  const usage = view.usageOf(device);
  // Devices a node uses (data or journal) are Healthy while reported and Failed once they are
  // not; devices no node uses (OS, unmanaged) have no state (None).
  const state: DeviceState = assignment ? (device.present ? 'Healthy' : 'Failed') : 'None';
  return {
    size: int64(bytes(device.sizeBytes)),
    // -1 (sysfs: the platform does not say) is passed through as "-1".
    numaNodeID: String(device.numaNode ?? -1),
    model: device.model,
    serial: device.serial,
    serverUUID: device.serverUUID,
    state,
    // When it failed = when its agent last reported it.
    failureTime: state === 'Failed' ? timestamp(device.reportedAt) : null,
    rebuildCompletionTime: null,
    // The kernel controller name at the last report (nvme0...).
    name: device.controller ?? '',
    nodeUUID: assignment?.nodeUUID ?? '',
    ETag: etagOf(stored),
    // Data-integrity counts come from the node's storage pool (a later issue): 0 until then.
    statistics: usage === 'Data' ? { UnrecoverableDataIntegrityErrors: 0, RecoverableDataIntegrityErrors: 0 } : null,
    deviceUsage: usage,
  };
}
