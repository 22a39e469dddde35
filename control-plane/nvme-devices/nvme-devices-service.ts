// NVMe devices (spec 2.13, 4.9): the 13 fields of a device, from the device records the
// control plane persists from agent reports, the nodes that use them, and the state their
// node's storage pool reports; and giving a device to a node (POST), which the node's agent
// then adds to the node's pool (docs/datapath.md, "Adding a device").
import { StrataError, errors } from '../../lib/errors.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import type { DeviceRecord, NodePoolRecord, NodeRecord } from '../../lib/records.js';
import type { EventPreparer } from '../events/etcd-event-log.js';
import { catalogued } from '../events/event-catalogue.js';
import type { InventorySource, Stored } from '../inventory/inventory-reader.js';
import { InventoryView, bytes, type DeviceAssignment, type DeviceUsage } from '../inventory/inventory-view.js';
import { errorCountWire, etagOf, int64, timestamp } from '../inventory/wire.js';
import type { Command } from '../../proto/gen/strata/v1/Command.js';
import type { CallerRequest, ForwardedAnswer, SessionRouting } from '../agents/session-routing.js';
import type { AttachNvmeDeviceInput, LedPatternName, SetNvmeDeviceLedInput } from './nvme-devices-schema.js';
import type { NvmeDevicesStore } from './nvme-devices-store.js';

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
  /**
   * Data devices only; null for the others. Recoverable: md's corrected read errors of this device
   * (0 until measured); Unrecoverable: not measured, always 0 (docs/api.md "Measured and not measured").
   */
  statistics: { UnrecoverableDataIntegrityErrors: number; RecoverableDataIntegrityErrors: number } | null;
  deviceUsage: DeviceUsage;
}

export interface NvmeDeviceFilters {
  readonly nodeUUID?: string;
  readonly serverUUID?: string;
  /** Empty or absent: every usage. */
  readonly deviceUsages?: readonly DeviceUsage[];
}

/** What POST needs besides the inventory: the store it writes and the event log. */
export interface NvmeDeviceWrites {
  readonly store: NvmeDevicesStore;
  readonly events: EventPreparer;
}

/** Sends a command to a server's agent and resolves once the agent did it (control-plane/agents/agent-sessions.ts). */
export interface AgentCommandSender {
  send(serverUUID: string, action: Omit<Command, 'command_id'>): Promise<void>;
}

const ledCommandPattern: Record<LedPatternName, 'LED_LOCATE' | 'LED_REBUILD' | 'LED_OFF'> = {
  locate: 'LED_LOCATE',
  rebuild: 'LED_REBUILD',
  'locate-off': 'LED_OFF',
};

/** md levels that have a write journal when the node has a journal device. */
const JOURNALED_LEVELS = ['raid4', 'raid5', 'raid6'];
const ATTACH_ATTEMPTS = 5;

export class NvmeDevicesService {
  constructor(
    private readonly inventory: InventorySource,
    private readonly writes?: NvmeDeviceWrites,
    private readonly agents?: AgentCommandSender,
    /** Where the server's agent session is: a request for another control plane's goes there. */
    private readonly routing?: Pick<SessionRouting, 'elsewhere'>,
  ) {}

  /** Serials whose LED command is on its way to the agent (409 for a second one meanwhile). */
  private readonly ledInFlight = new Set<string>();

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

  /**
   * Gives a device to a node as a data device (spec 4.9 POST). The node's record then lists it
   * and the node's agent grows the pool; the device shows Adding until the pool reports it
   * Healthy. Giving a device to the node that already has it succeeds and changes nothing.
   */
  async attach(input: AttachNvmeDeviceInput, expectedETag?: string): Promise<void> {
    const writes = this.writes;
    if (!writes) throw errors.internal('this NvmeDevicesService cannot write');
    await retryLostRaces<void>(ATTACH_ATTEMPTS, async () => {
      const view = new InventoryView(await this.inventory.read());
      const device = view.snapshot.devices.get(input.serialNumber);
      if (!device || !isListed(view, device.record)) throw errors.notFound('NVMe device', input.serialNumber);
      const node = view.snapshot.nodes.get(input.nodeUUID);
      if (!node) throw errors.notFound('node', input.nodeUUID);
      if (expectedETag !== undefined && expectedETag !== etagOf(device)) throw errors.etagMismatch('NVMe device', input.serialNumber);
      const assignment = view.assignmentOf(input.serialNumber);
      if (assignment?.nodeUUID === node.record.UUID && assignment.usage === 'Data') return;
      const presence = view.snapshot.presence.get(node.record.serverUUID);
      attachProblem(view, device.record, node.record, assignment, presence !== undefined);
      const prepared = await writes.events.prepare(
        catalogued('NVMeSSDAttachedToNode', {
          component: { kind: 'nvmeSsd', ID: device.record.serial, Name: device.record.controller ?? '' },
          description: `NVMe device ${device.record.serial} (${device.record.sizeBytes} bytes) was given to node ${node.record.name} (${node.record.UUID}) as a data device; its storage pool grows`,
        }),
      );
      if (!(await writes.store.attach(node, device, presence!, prepared))) return LOST_RACE;
    }, () => new StrataError('OPERATION_IN_PROGRESS', `node ${input.nodeUUID} or device ${input.serialNumber} kept changing while the device was being added; retry`));
  }

  /**
   * Sets a device's LED (spec 4.9 POST /nvmeDevices/{serialNumber}): the command goes to the
   * agent of the device's server over its session, and the answer is the agent's: the LED was
   * set, or why not (a device in no slot with an indicator: 400 with the agent's reason). When the
   * session is on another control plane, `caller`'s request goes there once validated here, and
   * its answer is returned as it came (session-routing.ts).
   */
  async setLed(input: SetNvmeDeviceLedInput, expectedETag?: string, caller?: CallerRequest): Promise<ForwardedAnswer | undefined> {
    if (!this.agents) throw errors.internal('this NvmeDevicesService cannot send agent commands');
    const view = new InventoryView(await this.inventory.read());
    const device = view.snapshot.devices.get(input.serialNumber);
    if (!device || !isListed(view, device.record)) throw errors.notFound('NVMe device', input.serialNumber);
    if (!view.snapshot.servers.has(input.serverUUID)) throw errors.notFound('server', input.serverUUID);
    if (expectedETag !== undefined && expectedETag !== etagOf(device)) throw errors.etagMismatch('NVMe device', input.serialNumber);
    if (device.record.serverUUID !== input.serverUUID) {
      throw errors.invalid(`NVMe device ${device.record.serial} is on server ${device.record.serverUUID}, not on server ${input.serverUUID}`);
    }
    if (!device.record.present) throw errors.invalid(`NVMe device ${device.record.serial} is no longer reported by its server: its LED cannot be set`);
    if (!view.isServerPresent(input.serverUUID)) throw errors.invalid(`the agent of server ${input.serverUUID} is not running (its nodes are Inactive): the LED cannot be set`);
    if (this.ledInFlight.has(input.serialNumber)) {
      throw new StrataError('OPERATION_IN_PROGRESS', `an LED command for NVMe device ${input.serialNumber} is already in progress`);
    }
    this.ledInFlight.add(input.serialNumber);
    try {
      const forwarded = caller ? await this.routing?.elsewhere(input.serverUUID, caller) : undefined;
      if (forwarded) return forwarded;
      await this.agents.send(input.serverUUID, { set_led: { serial: input.serialNumber, pattern: ledCommandPattern[input.ledPattern] } });
    } finally {
      this.ledInFlight.delete(input.serialNumber);
    }
    return undefined;
  }
}

/** Why the device cannot go to the node (400), in the order of spec 4.9's list; nothing when it can. */
function attachProblem(view: InventoryView, device: DeviceRecord, node: NodeRecord, assignment: DeviceAssignment | undefined, nodePresent: boolean): void {
  const nodeName = (uuid: string) => view.snapshot.nodes.get(uuid)?.record.name ?? uuid;
  if (assignment) {
    const whose = assignment.nodeUUID === node.UUID ? 'this node' : `node ${nodeName(assignment.nodeUUID)} (${assignment.nodeUUID})`;
    throw errors.invalid(`NVMe device ${device.serial} is already the ${assignment.usage === 'Journal' ? 'journal' : 'data'} device of ${whose}`);
  }
  if (device.serverUUID !== node.serverUUID) {
    throw errors.invalid(`node ${node.name} (${node.UUID}) is not a node of server ${device.serverUUID}, which has NVMe device ${device.serial}`);
  }
  if (device.holdsOS) throw errors.invalid(`NVMe device ${device.serial} holds the operating system`);
  if (!nodePresent || !view.isNodeActive(node)) throw errors.invalid(`node ${node.name} (${node.UUID}) is not Active`);
  const count = (node.managedDeviceSerials ?? []).length;
  if (count >= node.maxNvmeDevices) throw errors.invalid(`node ${node.name} (${node.UUID}) already has ${count} data devices, its maximum (maxNvmeDevices ${node.maxNvmeDevices})`);
  const pool = view.snapshot.nodePools.get(node.UUID)?.record;
  if (pool?.journal && JOURNALED_LEVELS.includes(pool.level)) {
    throw errors.invalid(
      `node ${node.name} (${node.UUID}) keeps its pool on an md ${pool.level} array with a write journal, which the kernel cannot reshape: the pool cannot grow`,
    );
  }
}

/**
 * A device is listed while its agent reports it, or while a node still uses it (it is then
 * Failed). An unused device that is no longer reported (pulled) is gone: not listed, 404.
 */
function isListed(view: InventoryView, device: DeviceRecord): boolean {
  return device.present || view.assignmentOf(device.serial) !== undefined;
}

/** The device in its node's last pool report. */
function poolDeviceOf(view: InventoryView, serial: string, nodeUUID: string | undefined): NodePoolRecord['devices'][number] | undefined {
  return nodeUUID === undefined ? undefined : view.snapshot.nodePools.get(nodeUUID)?.record.devices.find((d) => d.serial === serial);
}

export function deviceToWire(view: InventoryView, stored: Stored<DeviceRecord>): NvmeDeviceWire {
  const device = stored.record;
  const assignment = view.assignmentOf(device.serial);
  const usage = view.usageOf(device);
  const pooled = assignment ? poolStateOf(view, device, assignment) : undefined;
  const state: DeviceState = pooled?.state ?? 'None';
  return {
    size: int64(bytes(device.sizeBytes)),
    // -1 (sysfs: the platform does not say) is passed through as "-1".
    numaNodeID: String(device.numaNode ?? -1),
    model: device.model,
    serial: device.serial,
    serverUUID: device.serverUUID,
    state,
    failureTime: state === 'Failed' ? timestamp(pooled?.failedAt) : null,
    rebuildCompletionTime: usage === 'Data' ? timestamp(pooled?.rebuildCompletedAt) : null,
    // The kernel controller name at the last report (nvme0...).
    name: device.controller ?? '',
    nodeUUID: assignment?.nodeUUID ?? '',
    ETag: etagOf(stored),
    // md's corrected read errors of the device as its node's pool reports them; 0 when not
    // measured. btrfs' unrecoverable errors belong to the node (btrfs sees only the md array):
    // not measured per device (docs/api.md "Measured and not measured").
    statistics:
      usage === 'Data'
        ? { UnrecoverableDataIntegrityErrors: 0, RecoverableDataIntegrityErrors: errorCountWire(poolDeviceOf(view, device.serial, assignment?.nodeUUID)?.recoverableIntegrityErrors) }
        : null,
    deviceUsage: usage,
  };
}

/**
 * The state of a device a node uses. Before the node's pool first reports: Healthy while its
 * agent reports the device, Failed once it does not. Afterwards what the pool says (a device
 * that is gone is Failed whatever the pool last said); a data device the pool does not list yet
 * is Adding (the agent is about to add it), or Failed when the pool is Failed; a journal device
 * the array does not use (raid0 has no write journal) is Healthy while present.
 */
function poolStateOf(
  view: InventoryView,
  device: DeviceRecord,
  assignment: DeviceAssignment,
): { state: DeviceState; failedAt?: string; rebuildCompletedAt?: string } {
  // When it failed = when its agent last reported it (the record's time of that change).
  if (!device.present) return { state: 'Failed', failedAt: device.reportedAt };
  const pool = view.snapshot.nodePools.get(assignment.nodeUUID)?.record;
  if (!pool) return { state: 'Healthy' };
  const listed = pool.devices.find((d) => d.serial === device.serial);
  if (listed) {
    const rebuildCompletedAt = listed.rebuildCompletedAt || undefined;
    return listed.state === 'Failed' ? { state: 'Failed', failedAt: listed.stateSince } : { state: listed.state, ...(rebuildCompletedAt ? { rebuildCompletedAt } : {}) };
  }
  if (pool.state === 'Failed') return { state: 'Failed', failedAt: pool.reportedAt };
  return { state: assignment.usage === 'Data' ? 'Adding' : 'Healthy' };
}
