// Nodes (spec 2.12, 4.8): the 22 fields of a node, from its record (written by its agent at
// join), its server's presence (the agent's lease) and the devices the agent reports.
import { errors } from '../../lib/errors.js';
import type { NodeRecord } from '../../lib/records.js';
import type { InventorySource, Stored } from '../inventory/inventory-reader.js';
import { InventoryView } from '../inventory/inventory-view.js';
import { nodeStorageFigures, storageStatisticsWire } from '../inventory/storage-statistics.js';
import { errorCountWire, etagOf, type StorageStatisticsWire } from '../inventory/wire.js';

export type NodeState = 'Unknown' | 'Active' | 'Activating' | 'Inactive' | 'Unattached' | 'Attaching' | 'Detaching';
export type NodeStatus = 'NoStatus' | 'ConnectivityOK' | 'ConnectivityProblem' | 'IssuedDeletePeer';

/** The 14 node statistics (spec 2.12 + wire-conventions §7). Byte counts are decimal strings. */
export interface NodeStatisticsWire extends StorageStatisticsWire {
  /** btrfs' read, corruption and generation errors of the pool; 0 when not measured (docs/api.md). */
  UnrecoverableDataIntegrityErrors: number;
  /** md's corrected read errors of the pool's members; 0 when not measured (docs/api.md). */
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

/**
 * A node's ETag: its record's mod_revision, or its command's when that is newer (a stop, start,
 * restart or replace changes the node: its ETag moves).
 */
export function nodeETag(view: InventoryView, stored: Stored<NodeRecord>): string {
  const command = view.snapshot.nodeCommands.get(stored.record.UUID);
  if (!command) return etagOf(stored);
  return BigInt(command.modRevision) > BigInt(stored.modRevision) ? etagOf(command) : etagOf(stored);
}

/**
 * State (spec 2.12, 3.2) and failureInfo: Active iff its server's presence (the agent's lease)
 * lists the node, Unattached instead for a node that takes no new volumes; a node an
 * administrator stopped is left out of presence by its agent once stopped: Inactive, Activating
 * while its agent starts it again. A replace in progress shows its source Detaching and its
 * target Attaching (docs/node-operations.md).
 */
export function nodeStateAndInfo(view: InventoryView, stored: Stored<NodeRecord>): { state: NodeState; failureInfo: string } {
  const node = stored.record;
  const active = view.isNodeActive(node);
  const command = view.snapshot.nodeCommands.get(node.UUID)?.record;
  const run = view.snapshot.nodeRunStates.get(node.UUID)?.record;
  if (command?.kind === 'replace' && !command.completedAt && !command.failure) {
    if (command.failing) return { state: 'Detaching', failureInfo: `replace by node ${command.targetNodeUUID} failing: ${command.failing}; the copies moved there go back` };
    return { state: 'Detaching', failureInfo: `being replaced by node ${command.targetNodeUUID}: its copies are re-created there` };
  }
  for (const other of view.snapshot.nodeCommands.values()) {
    const c = other.record;
    if (c.kind === 'replace' && c.targetNodeUUID === node.UUID && !c.completedAt && !c.failure) {
      return { state: 'Attaching', failureInfo: '' };
    }
  }
  if (active) return { state: node.unattached ? 'Unattached' : 'Active', failureInfo: '' };
  const serverPresent = view.isServerPresent(node.serverUUID);
  if (serverPresent && command && run?.commandId === command.id && run.state === 'Starting') {
    return { state: 'Activating', failureInfo: `starting (command ${command.id}): ${run.detail}` };
  }
  if (command?.kind === 'replace' && command.completedAt) {
    return { state: 'Inactive', failureInfo: `replaced by node ${command.targetNodeUUID}; detached` };
  }
  if (command?.kind === 'replace' && command.failure && !serverPresent) {
    return { state: 'Inactive', failureInfo: `replace by node ${command.targetNodeUUID} failed: ${command.failure}` };
  }
  if (serverPresent && command && run?.commandId === command.id && run.failure) {
    return { state: 'Inactive', failureInfo: `${command.kind} failed (command ${command.id}): ${run.failure}; it serves nothing: POST /api/v2/nodes/${node.UUID}/start serves it again` };
  }
  if (serverPresent && command && (command.desired === 'Stopped' || command.kind === 'restart')) {
    return { state: 'Inactive', failureInfo: `stopped by an administrator (command ${command.id}, ${command.kind}); POST /api/v2/nodes/${node.UUID}/start serves it again` };
  }
  return { state: 'Inactive', failureInfo: `the agent of server ${node.serverUUID} is not connected to the cluster` };
}

export function nodeToWire(view: InventoryView, stored: Stored<NodeRecord>): NodeWire {
  const node = stored.record;
  const active = view.isNodeActive(node);
  const { state, failureInfo } = nodeStateAndInfo(view, stored);
  const journalSerial = node.journalDeviceSerial ?? '';
  const managed = node.managedDeviceSerials ?? [];
  const pool = view.snapshot.nodePools.get(node.UUID)?.record;
  // md reshaping (devices being added), resyncing or recovering a member.
  const inLocalRebuild = pool !== undefined && (pool.state === 'Growing' || pool.state === 'Rebuilding');
  return {
    name: node.name,
    UUID: node.UUID,
    state,
    status: active ? 'ConnectivityOK' : 'ConnectivityProblem',
    nvmeEndpoint: node.nvmeEndpoint,
    failureDomains: [...(node.failureDomains ?? [])],
    failureInfo,
    hostname: node.hostname,
    inLocalRebuild,
    localRebuildProgress: inLocalRebuild ? pool.rebuildProgressPercent : 0,
    numManagedDevices: managed.length,
    maxNvmeDevices: node.maxNvmeDevices,
    ec: node.ec,
    statistics: {
      ...storageStatisticsWire(nodeStorageFigures(view, node)),
      ...NOT_MEASURED,
      UnrecoverableDataIntegrityErrors: errorCountWire(pool?.unrecoverableIntegrityErrors),
      RecoverableDataIntegrityErrors: errorCountWire(pool?.recoverableIntegrityErrors),
    },
    serverUUID: node.serverUUID,
    ETag: nodeETag(view, stored),
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
 * The storage figures and the data-integrity counts come from the node's pool
 * (inventory/storage-statistics.ts, agent/datapath/pool/integrity-errors.ts). Not measured, 0: the
 * garbage collector's count (btrfs has no separate one) and the metadata utilization.
 */
const NOT_MEASURED = {
  GarbageCollectorDataIntegrityErrors: 0,
  metadataUtilization: 0,
} as const;
