// Node, server and device events (docs/events.md, "Membership events"), run by the active
// cluster manager only. Node state is derived, not stored (docs/decisions.md: present ⇒ Active),
// so nobody writes "node became Inactive": this controller watches the records the state is
// derived from, re-derives after every change, and reports what differs from what it last
// reported. What it last reported lives in etcd and is written in the SAME transaction as the
// event (fenced by the leader's term: membership-events-store.ts), so a restart or a failover
// neither repeats nor loses an event.
import { StrataError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { Backoff, retry, sleep, type BackoffOptions } from '../../lib/retry.js';
import type { DeviceRecord, NodeRecord, ServerRecord } from '../../lib/records.js';
import { catalogued } from '../events/event-catalogue.js';
import type { EventPreparer } from '../events/etcd-event-log.js';
import type { EventInput } from '../events/event-recorder.js';
import type { InventoryReader, InventorySnapshot, Stored } from '../inventory/inventory-reader.js';
import { InventoryView } from '../inventory/inventory-view.js';
import type { MembershipEventsStore, MembershipWatch, ReportedDevice, ReportedNodeState, ReportedServer, ReportedWrite } from './membership-events-store.js';

export type { ReportedDevice, ReportedNodeState, ReportedServer } from './membership-events-store.js';

export interface MembershipEventsDeps {
  /** What was last reported, written with its events (fenced when the store was given the fence). */
  readonly store: MembershipEventsStore;
  /** This controller's own reader: its reads are incremental from the last one. */
  readonly inventory: InventoryReader;
  /** The event log (EtcdEventLog): events are committed together with the controller's own state. */
  readonly events: EventPreparer;
  readonly logger: Logger;
}

export interface MembershipEvents {
  /** Resolves once the first evaluation is committed (or the controller stopped first). */
  readonly ready: Promise<void>;
  stop(): Promise<void>;
}

/** Changes committed per transaction: two ops each, under etcd's 128-op limit with the fence. */
const CHANGES_PER_TXN = 40;
/** The wait before another start, and before another evaluation after one failed. */
const BACKOFF: BackoffOptions = { initialMs: 250, maxMs: 5000, jitter: 0 };

export function startMembershipEvents(deps: MembershipEventsDeps): MembershipEvents {
  const controller = new MembershipEventsController(deps);
  const ready = controller.start();
  return { ready, stop: () => controller.stop() };
}

/** What to report: the new state (null forgets it; `eventID` is filled in at commit), its event. */
type Change = Omit<ReportedWrite, 'event'> & {
  readonly event?: EventInput;
  readonly apply: (eventID: string) => void;
};

class MembershipEventsController {
  private nodes = new Map<string, ReportedNodeState>();
  private servers = new Map<string, ReportedServer>();
  private devices = new Map<string, ReportedDevice>();
  private readonly reader: InventoryReader;
  private watch: MembershipWatch | undefined;
  private stopped = false;
  private dirty = false;
  private loop: Promise<void> | undefined;
  private readonly evaluationBackoff = new Backoff(BACKOFF);
  private readonly abort = new AbortController();

  constructor(private readonly deps: MembershipEventsDeps) {
    this.reader = deps.inventory;
  }

  /** Reads what was reported, follows the state's changes, then evaluates (reading the records after subscribing: no change falls between). */
  async start(): Promise<void> {
    if (!this.stopped) {
      await retry(() => this.loadReported(), {
        backoff: BACKOFF,
        signal: this.abort.signal,
        onRetry: (err) => this.deps.logger.warn({ err: err.message }, 'membership events: start failed; retrying'),
      }).catch((err: unknown) => {
        if (!this.stopped) throw err;
      });
      if (!this.stopped) this.watch = this.deps.store.watch(() => this.poke());
    }
    // Evaluations run one at a time in the drain loop, the first one included.
    this.poke();
    await this.loop;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    await this.cancelWatchers();
    await this.loop;
  }

  private async loadReported(): Promise<void> {
    ({ nodes: this.nodes, servers: this.servers, devices: this.devices } = await this.deps.store.loadReported());
  }

  private async cancelWatchers(): Promise<void> {
    const watch = this.watch;
    this.watch = undefined;
    await watch?.cancel();
  }

  /** Something changed: evaluate again (changes arriving meanwhile fold into one more pass). */
  private poke(): void {
    this.dirty = true;
    this.loop ??= this.drain().finally(() => {
      this.loop = undefined;
    });
  }

  private async drain(): Promise<void> {
    while (this.dirty && !this.stopped) {
      this.dirty = false;
      try {
        await this.evaluate(await this.reader.read());
        this.evaluationBackoff.reset();
      } catch (err) {
        if (this.haltIfDeposed(err)) return;
        const retryInMs = this.evaluationBackoff.next();
        this.deps.logger.warn({ err: (err as Error).message, retryInMs }, 'membership events: evaluation failed; retrying');
        this.dirty = true;
        await sleep(retryInMs);
      }
    }
  }

  /** A fenced write was refused: this control plane no longer leads; the new leader carries on. */
  private haltIfDeposed(err: unknown): boolean {
    if (!(err instanceof StrataError && err.code === 'NOT_LEADER')) return false;
    this.deps.logger.info('membership events: no longer the active cluster manager; stopping');
    this.stopped = true;
    this.abort.abort();
    void this.cancelWatchers();
    return true;
  }

  private async evaluate(snapshot: InventorySnapshot): Promise<void> {
    if (this.stopped) return;
    const view = new InventoryView(snapshot);
    const changes = [...this.serverChanges(snapshot), ...this.nodeChanges(view), ...this.deviceChanges(view)];
    for (let i = 0; i < changes.length && !this.stopped; i += CHANGES_PER_TXN) {
      await this.commit(changes.slice(i, i + CHANGES_PER_TXN));
    }
  }

  private async commit(changes: readonly Change[]): Promise<void> {
    const writes: ReportedWrite[] = [];
    const ids: string[] = [];
    for (const change of changes) {
      const prepared = change.event ? await this.deps.events.prepare(change.event) : null;
      const eventID = prepared?.id ?? '';
      ids.push(eventID);
      writes.push({ kind: change.kind, id: change.id, reported: change.reported && { ...change.reported, eventID }, event: prepared } as ReportedWrite);
    }
    await this.deps.store.commit(writes);
    changes.forEach((change, i) => change.apply(ids[i]!));
  }

  private serverChanges(snapshot: InventorySnapshot): Change[] {
    const changes: Change[] = [];
    const at = new Date().toISOString();
    for (const [uuid, { record }] of snapshot.servers) {
      if (this.servers.has(uuid)) continue;
      changes.push({
        kind: 'server', id: uuid,
        reported: { serverUUID: uuid, eventID: '', at },
        event: catalogued('ServerJoined', {
          component: { kind: 'server', ID: uuid, Name: record.name },
          description: `server ${record.name} (${record.hostname}) joined the cluster with ${record.nodeUUIDs?.length ?? 0} node(s)`,
        }),
        apply: (eventID) => this.servers.set(uuid, { serverUUID: uuid, eventID, at }),
      });
    }
    for (const uuid of this.servers.keys()) {
      if (!snapshot.servers.has(uuid)) changes.push({ kind: 'server', id: uuid, reported: null, apply: () => this.servers.delete(uuid) });
    }
    return changes;
  }

  private nodeChanges(view: InventoryView): Change[] {
    const changes: Change[] = [];
    const at = new Date().toISOString();
    const nodes = view.snapshot.nodes;
    for (const [uuid, stored] of nodes) {
      const state = view.isNodeActive(stored.record) ? 'Active' : 'Inactive';
      const last = this.nodes.get(uuid);
      if (last?.state === state) continue;
      const remember = (eventID: string) => this.nodes.set(uuid, { nodeUUID: uuid, state, eventID, at });
      const reported: ReportedNodeState = { nodeUUID: uuid, state, eventID: '', at };
      // First seen Inactive: an agent writes its node record just before its presence.
      if (!last && state === 'Inactive') {
        changes.push({ kind: 'node', id: uuid, reported, apply: remember });
        continue;
      }
      changes.push({ kind: 'node', id: uuid, reported, event: nodeEvent(view, stored, state, last?.eventID ?? ''), apply: remember });
    }
    for (const uuid of this.nodes.keys()) {
      if (!nodes.has(uuid)) changes.push({ kind: 'node', id: uuid, reported: null, apply: () => this.nodes.delete(uuid) });
    }
    return changes;
  }

  private deviceChanges(view: InventoryView): Change[] {
    const changes: Change[] = [];
    const at = new Date().toISOString();
    const devices = view.snapshot.devices;
    for (const [serial, { record }] of devices) {
      const present = record.present !== false;
      const last = this.devices.get(serial);
      if (last ? last.present === present : !present) {
        // Unchanged, or first seen already gone: remember silently.
        if (!last) changes.push({ kind: 'device', id: serial, reported: { serial, present, eventID: '', at }, apply: (eventID) => this.devices.set(serial, { serial, present, eventID, at }) });
        continue;
      }
      changes.push({
        kind: 'device', id: serial,
        reported: { serial, present, eventID: '', at },
        event: deviceEvent(view, record, present, last?.eventID ?? ''),
        apply: (eventID) => this.devices.set(serial, { serial, present, eventID, at }),
      });
    }
    for (const serial of this.devices.keys()) {
      if (!devices.has(serial)) changes.push({ kind: 'device', id: serial, reported: null, apply: () => this.devices.delete(serial) });
    }
    return changes;
  }
}

function nodeEvent(view: InventoryView, stored: Stored<NodeRecord>, state: 'Active' | 'Inactive', previousEventID: string): EventInput {
  const node = stored.record;
  const where = serverLabel(view.snapshot.servers.get(node.serverUUID)?.record, node.serverUUID);
  const component = { kind: 'node', ID: node.UUID, Name: node.name } as const;
  const associated = previousEventID ? { associatedEventID: previousEventID } : {};
  return state === 'Active'
    ? catalogued('NodeEnteredActiveState', { component, ...associated, description: `node ${node.name} (${node.UUID}) on ${where} entered the Active state: its agent is connected${restartedWith(view, node.UUID)}` })
    : catalogued('NodeEnteredInactiveState', {
        component,
        ...associated,
        // The agent runs but left the node out of its presence: an administrator stopped it.
        description: view.isServerPresent(node.serverUUID)
          ? `node ${node.name} (${node.UUID}) on ${where} entered the Inactive state: it was stopped (node stop) and serves nothing`
          : `node ${node.name} (${node.UUID}) on ${where} entered the Inactive state: its agent is not connected to the cluster`,
      });
}

/** A restart with considerBackend that brought the node back says so (its run state). */
function restartedWith(view: InventoryView, nodeUUID: string): string {
  const command = view.snapshot.nodeCommands.get(nodeUUID)?.record;
  const run = view.snapshot.nodeRunStates.get(nodeUUID)?.record;
  if (command?.kind !== 'restart' || run?.commandId !== command.id) return '';
  return run.reassembled ? ` (restarted, command ${command.id}: its storage pool was reassembled)` : ` (restarted, command ${command.id})`;
}

function deviceEvent(view: InventoryView, device: DeviceRecord, present: boolean, previousEventID: string): EventInput {
  const component = { kind: 'nvmeSsd', ID: device.serial, Name: device.controller ?? '' } as const;
  const where = serverLabel(view.snapshot.servers.get(device.serverUUID)?.record, device.serverUUID);
  const associated = previousEventID ? { associatedEventID: previousEventID } : {};
  if (present) {
    return catalogued('NVMeSSDAdded', { component, ...associated, description: `NVMe device ${device.serial} (${device.model}, ${device.sizeBytes} bytes) is reported by ${where}` });
  }
  const assignment = view.assignmentOf(device.serial);
  if (assignment) {
    const node = view.snapshot.nodes.get(assignment.nodeUUID)?.record;
    const role = assignment.usage === 'Journal' ? 'journal' : 'data';
    return catalogued('NVMeSSDFailed', { component, ...associated, description: `NVMe device ${device.serial}, the ${role} device of node ${node?.name ?? assignment.nodeUUID}, is no longer reported by ${where}` });
  }
  return catalogued('NVMeSSDRemoved', { component, ...associated, description: `NVMe device ${device.serial} is no longer reported by ${where}` });
}

function serverLabel(server: ServerRecord | undefined, serverUUID: string): string {
  return server ? `server ${server.name} (${server.hostname})` : `server ${serverUUID}`;
}
