// Facts derived from one inventory snapshot that several resources need the same way: which
// nodes are Active, what each device is used for, and how much storage nodes manage. Keeping
// them here means /nodes, /servers, /nvmeDevices and /cluster can never disagree.
import type { DeviceRecord, NodeRecord, ServerRecord } from '../../lib/records.js';
import type { InventorySnapshot, Stored } from './inventory-reader.js';

/** Device usage enum of spec 2.13, in enum order (index = numeric value). */
export const deviceUsages = ['Unknown', 'Data', 'Journal', 'OS', 'UnManaged'] as const;
export type DeviceUsage = (typeof deviceUsages)[number];

/** The node a device belongs to and in which role; absent for devices no node uses. */
export interface DeviceAssignment {
  readonly usage: 'Data' | 'Journal';
  readonly nodeUUID: string;
}

export class InventoryView {
  private readonly activeByServer = new Map<string, ReadonlySet<string>>();
  private readonly assignments = new Map<string, DeviceAssignment>();
  private readonly nodesByServer = new Map<string, Stored<NodeRecord>[]>();

  constructor(readonly snapshot: InventorySnapshot) {
    for (const [serverUUID, presence] of snapshot.presence) {
      this.activeByServer.set(serverUUID, new Set(presence.record.nodeUUIDs ?? []));
    }
    for (const node of snapshot.nodes.values()) {
      const { UUID, serverUUID, journalDeviceSerial } = node.record;
      // Data wins over journal if a misconfiguration lists a serial in both roles.
      for (const serial of node.record.managedDeviceSerials ?? []) {
        if (!this.assignments.has(serial)) this.assignments.set(serial, { usage: 'Data', nodeUUID: UUID });
      }
      if (journalDeviceSerial && !this.assignments.has(journalDeviceSerial)) {
        this.assignments.set(journalDeviceSerial, { usage: 'Journal', nodeUUID: UUID });
      }
      const list = this.nodesByServer.get(serverUUID);
      if (list) list.push(node);
      else this.nodesByServer.set(serverUUID, [node]);
    }
  }

  /** Agent presence of a server: its key exists while the agent holds its etcd lease. */
  isServerPresent(serverUUID: string): boolean {
    return this.snapshot.presence.has(serverUUID);
  }

  /** A node is Active iff its server's presence record lists it; otherwise Inactive. */
  isNodeActive(node: Pick<NodeRecord, 'UUID' | 'serverUUID'>): boolean {
    return this.activeByServer.get(node.serverUUID)?.has(node.UUID) ?? false;
  }

  /** Active by UUID alone (a server's NodesUUIDs): listed by that server's presence. */
  isNodeOfServerActive(serverUUID: string, nodeUUID: string): boolean {
    return this.activeByServer.get(serverUUID)?.has(nodeUUID) ?? false;
  }

  nodesOfServer(serverUUID: string): readonly Stored<NodeRecord>[] {
    return this.nodesByServer.get(serverUUID) ?? [];
  }

  /** The node UUIDs a server has: its record's list, plus any node record naming the server. */
  nodeUUIDsOfServer(server: ServerRecord): string[] {
    const uuids = [...(server.nodeUUIDs ?? [])];
    for (const node of this.nodesOfServer(server.UUID)) {
      if (!uuids.includes(node.record.UUID)) uuids.push(node.record.UUID);
    }
    return uuids;
  }

  assignmentOf(serial: string): DeviceAssignment | undefined {
    return this.assignments.get(serial);
  }

  /** Usage of spec 2.13: Data, Journal (a node uses it), OS (holds the OS), else UnManaged. */
  usageOf(device: DeviceRecord): DeviceUsage {
    const assignment = this.assignments.get(device.serial);
    if (assignment) return assignment.usage;
    return device.holdsOS ? 'OS' : 'UnManaged';
  }

  /** A device the agent of its server reports now. */
  isDevicePresent(serial: string, serverUUID?: string): boolean {
    const device = this.snapshot.devices.get(serial)?.record;
    if (!device || !device.present) return false;
    return serverUUID === undefined || device.serverUUID === serverUUID;
  }

  /**
   * Bytes of the node's data devices that are present. A managed device that is gone (Failed)
   * provides no storage, so it does not count.
   */
  managedStorageOfNode(node: NodeRecord): bigint {
    let total = 0n;
    for (const serial of node.managedDeviceSerials ?? []) {
      const device = this.snapshot.devices.get(serial)?.record;
      if (device?.present) total += bytes(device.sizeBytes);
    }
    return total;
  }
}

/** A stored decimal byte count; anything unparsable counts as 0 rather than failing a listing. */
export function bytes(value: string | number | undefined): bigint {
  if (value === undefined) return 0n;
  try {
    const n = BigInt(value);
    return n < 0n ? 0n : n;
  } catch {
    return 0n;
  }
}
