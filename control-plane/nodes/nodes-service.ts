// Nodes (spec 2.12, 4.8): the 22 fields of a node, from its record (written by its agent at
// join), its server's presence (the agent's lease) and the devices the agent reports.
import { errors } from '../../lib/errors.js';
import type { NodeRecord } from '../../lib/records.js';
import type { InventorySource, Stored } from '../inventory/inventory-reader.js';
import { InventoryView } from '../inventory/inventory-view.js';
import { nodeStorageFigures, storageStatisticsWire } from '../inventory/storage-statistics.js';
import { etagOf, type StorageStatisticsWire } from '../inventory/wire.js';

export type NodeState = 'Unknown' | 'Active' | 'Activating' | 'Inactive' | 'Unattached' | 'Attaching' | 'Detaching';
export type NodeStatus = 'NoStatus' | 'ConnectivityOK' | 'ConnectivityProblem' | 'IssuedDeletePeer';

/** The 14 node statistics (spec 2.12 + wire-conventions §7). Byte counts are decimal strings. */
export interface NodeStatisticsWire extends StorageStatisticsWire {
  /** Not measured: always 0 (docs/api.md "Measured and not measured"). */
  UnrecoverableDataIntegrityErrors: number;
  /** Not measured: always 0 (docs/api.md "Measured and not measured"). */
  RecoverableDataIntegrityErrors: number;
  /** Not measured: always 0 (docs/api.md "Measured and not measured"). */
  GarbageCollectorDataIntegrityErrors: number;
  /** Not measured: always 0 (docs/api.md "Measured and not measured"). */
  metadataUtilization: number;
}

/** A node as the API returns it: exactly the 22 fields of spec 2.12. */
export interface NodeWire {
  name: string;
  UUID: string;
  state: NodeState;
  status: NodeStatus;
  nvmeEndpoint: string;
  failureDomains: string[];
  failureInfo: string;
  hostname: string;
  inLocalRebuild: boolean;
  localRebuildProgress: number;
  numManagedDevices: number;
  maxNvmeDevices: number;
  ec: boolean;
  statistics: NodeStatisticsWire;
  serverUUID: string;
  ETag: string;
  readOnly: boolean;
  powerupProgress: number;
  permanentFailure: boolean;
  journalDeviceNotFound: string;
  journalNvmeDevice: { deviceSerial: string };
  journalRaidDevice: { deviceUUID: string; memberDeviceSerials: string[] };
}

/** At most one filter (spec 4.8); the schema rejects several. */
export type NodeFilter =
  | { readonly kind: 'none' }
  | { readonly kind: 'name'; readonly value: string }
  | { readonly kind: 'UUID'; readonly value: string }
  | { readonly kind: 'failureDomain'; readonly value: string };

export class NodesService {
  constructor(private readonly inventory: InventorySource) {}

  async list(filter: NodeFilter = { kind: 'none' }): Promise<NodeWire[]> {
    const view = new InventoryView(await this.inventory.read());
    const nodes: NodeWire[] = [];
    for (const node of view.snapshot.nodes.values()) {
      if (matches(node.record, filter)) nodes.push(nodeToWire(view, node));
    }
    return nodes;
  }

  async get(uuid: string): Promise<NodeWire> {
    const view = new InventoryView(await this.inventory.read());
    const node = view.snapshot.nodes.get(uuid);
    if (!node) throw errors.notFound('node', uuid);
    return nodeToWire(view, node);
  }
}

function matches(node: NodeRecord, filter: NodeFilter): boolean {
  switch (filter.kind) {
    case 'none':
      return true;
    case 'name':
      return node.name === filter.value;
    case 'UUID':
      return node.UUID === filter.value;
    case 'failureDomain':
      return (node.failureDomains ?? []).includes(filter.value);
  }
}

export function nodeToWire(view: InventoryView, stored: Stored<NodeRecord>): NodeWire {
  const node = stored.record;
  const active = view.isNodeActive(node);
  const journalSerial = node.journalDeviceSerial ?? '';
  const managed = node.managedDeviceSerials ?? [];
  const pool = view.snapshot.nodePools.get(node.UUID)?.record;
  // md reshaping (devices being added), resyncing or recovering a member.
  const inLocalRebuild = pool !== undefined && (pool.state === 'Growing' || pool.state === 'Rebuilding');
  return {
    name: node.name,
    UUID: node.UUID,
    // Active iff its server's presence (bound to the agent's lease) lists the node; a node of a
    // server added with extendCluster false is Unattached while present (it takes no volumes).
    state: active ? (node.unattached ? 'Unattached' : 'Active') : 'Inactive',
    status: active ? 'ConnectivityOK' : 'ConnectivityProblem',
    nvmeEndpoint: node.nvmeEndpoint,
    failureDomains: [...(node.failureDomains ?? [])],
    failureInfo: active ? '' : `the agent of server ${node.serverUUID} is not connected to the cluster`,
    hostname: node.hostname,
    inLocalRebuild,
    localRebuildProgress: inLocalRebuild ? pool.rebuildProgressPercent : 0,
    numManagedDevices: managed.length,
    maxNvmeDevices: node.maxNvmeDevices,
    ec: node.ec,
    statistics: { ...storageStatisticsWire(nodeStorageFigures(view, node)), ...NO_INTEGRITY_ERRORS },
    serverUUID: node.serverUUID,
    ETag: etagOf(stored),
    readOnly: false,
    powerupProgress: 0,
    permanentFailure: false,
    // The configured journal device when the server's agent does not report it (now).
    journalDeviceNotFound: journalSerial !== '' && !view.isDevicePresent(journalSerial, node.serverUUID) ? journalSerial : '',
    journalNvmeDevice: { deviceSerial: journalSerial },
    journalRaidDevice: { deviceUUID: '', memberDeviceSerials: [] },
  };
}

/**
 * The storage figures come from the node's pool (inventory/storage-statistics.ts). btrfs'
 * checksum error counters are not collected yet: the data-integrity counts and the metadata
 * utilization are 0.
 */
const NO_INTEGRITY_ERRORS = {
  UnrecoverableDataIntegrityErrors: 0,
  RecoverableDataIntegrityErrors: 0,
  GarbageCollectorDataIntegrityErrors: 0,
  metadataUtilization: 0,
} as const;
