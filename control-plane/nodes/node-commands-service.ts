// Node commands (spec 4.8: POST /api/v2/nodes/{UUID}/stop|start|restart|replace;
// docs/node-operations.md). The control plane checks the request and records the command in etcd
// (the node's desired run state, with its event, in one transaction); the node's agent carries out
// stop, start and restart and records what it did; the active cluster manager carries out replace.
// Nothing here reports a command as done: the node's state says what the agent did.
import { randomUUID } from 'node:crypto';
import { commandDone } from '../../lib/etcd/node-command-store.js';
import { StrataError, errors } from '../../lib/errors.js';
import type { NodeCommandKind, NodeCommandRecord, NodeRecord } from '../../lib/records.js';
import type { EventPreparer } from '../events/etcd-event-log.js';
import { catalogued, type EventName } from '../events/event-catalogue.js';
import type { InventorySource, Stored } from '../inventory/inventory-reader.js';
import { InventoryView } from '../inventory/inventory-view.js';
import { GUARDED_ATTEMPTS } from '../../lib/etcd/transaction.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import { nameSome, type NodeCopiesSource } from './node-copies.js';
import type { CheckedNode, NodeCommandsStore } from './node-commands-store.js';
import { nodeETag, nodeStateAndInfo } from './nodes-service.js';

export interface StopNodeInput {
  readonly force: boolean;
}
export interface RestartNodeInput {
  readonly force: boolean;
  readonly considerBackend: boolean;
}
export interface ReplaceNodeInput {
  readonly targetNodeUUID: string;
  readonly replaceWhileActive: boolean;
}

export interface NodeCommandsDeps {
  readonly inventory: InventorySource;
  readonly copies: NodeCopiesSource;
  readonly store: NodeCommandsStore;
  readonly events: EventPreparer;
  /** Commands in progress in the cluster at most (more: 429). */
  readonly maxInProgress: number;
  readonly now?: () => Date;
}

const requestedEvent: Record<NodeCommandKind, EventName> = {
  stop: 'NodeStopRequested',
  start: 'NodeStartRequested',
  restart: 'NodeRestartRequested',
  replace: 'NodeReplaceRequested',
};

/** Whether a command still runs: its agent (alive) has not done it yet, or a replace not finished. */
export function commandInProgress(view: InventoryView, command: NodeCommandRecord): boolean {
  if (command.kind === 'replace') return !command.completedAt && !command.failure;
  const node = view.snapshot.nodes.get(command.nodeUUID)?.record;
  // A node whose agent is not running carries it out when the agent returns; meanwhile a new
  // command may replace it.
  if (!node || !view.isServerPresent(node.serverUUID)) return false;
  return !commandDone(command, view.snapshot.nodeRunStates.get(command.nodeUUID)?.record);
}

export class NodeCommandsService {
  constructor(private readonly deps: NodeCommandsDeps) {}

  async stop(nodeUUID: string, input: StopNodeInput, expectedETag?: string): Promise<void> {
    await this.give(nodeUUID, 'stop', expectedETag, async (view, node) => {
      if (!input.force) await this.refuseIfOnlyCopy(node.record, 'stopping');
      return { desired: 'Stopped', force: input.force, considerBackend: false, checked: [] };
    });
  }

  async start(nodeUUID: string, expectedETag?: string): Promise<void> {
    await this.give(nodeUUID, 'start', expectedETag, async () => {
      return { desired: 'Running', force: false, considerBackend: false, checked: [] };
    });
  }

  async restart(nodeUUID: string, input: RestartNodeInput, expectedETag?: string): Promise<void> {
    await this.give(nodeUUID, 'restart', expectedETag, async (view, node) => {
      if (!view.isServerPresent(node.record.serverUUID)) {
        throw errors.invalid(`node ${nodeUUID} is Inactive: the agent of server ${node.record.serverUUID} is not running, so it cannot be restarted`);
      }
      if (input.considerBackend && node.record.managedDeviceSerials.length === 0) {
        throw errors.invalid(`node ${nodeUUID} has no managed devices, so no storage pool (md array and btrfs) to reassemble: restart it without considerBackend`);
      }
      if (!input.force) await this.refuseIfOnlyCopy(node.record, 'restarting');
      // considerBackend: the agent reassembles the node's pool between the stop and the start.
      return { desired: 'Running', force: input.force, considerBackend: input.considerBackend, checked: [] };
    });
  }

  async replace(nodeUUID: string, input: ReplaceNodeInput, expectedETag?: string): Promise<void> {
    await this.give(nodeUUID, 'replace', expectedETag, async (view, source) => {
      const target = view.snapshot.nodes.get(input.targetNodeUUID);
      if (!target) throw errors.notFound('node', input.targetNodeUUID);
      if (target.record.UUID === source.record.UUID) throw errors.invalid('a node cannot replace itself: TargetNodeUUID names the source node');
      const targetCommand = view.snapshot.nodeCommands.get(target.record.UUID);
      if (targetCommand && commandInProgress(view, targetCommand.record)) {
        throw new StrataError('OPERATION_IN_PROGRESS', `a ${targetCommand.record.kind} command (${targetCommand.record.id}) is in progress on node ${target.record.UUID}`);
      }
      const sourceState = nodeStateOf(view, source);
      const targetState = nodeStateOf(view, target);
      if (sourceState !== 'Inactive' || targetState !== 'Unattached') {
        const active = sourceState !== 'Inactive' && input.replaceWhileActive ? ' (ReplaceWhileActive: replacing a node that is not Inactive is not supported yet)' : '';
        throw errors.invalid(`replace needs the source node Inactive and the target node Unattached: node ${source.record.UUID} is ${sourceState}, node ${target.record.UUID} is ${targetState}${active}`);
      }
      const stranded = await this.deps.copies.onlyCopyOn(source.record.UUID, false);
      if (stranded.length > 0) {
        throw errors.invalid(`node ${source.record.UUID} holds the only in-sync copy of volume(s) ${nameSome(stranded)}: there is nothing to copy to the target from`);
      }
      return { desired: 'Stopped', force: false, considerBackend: false, targetNodeUUID: target.record.UUID, checked: [{ node: target, command: targetCommand }] };
    });
  }

  /** 400 naming the volumes whose only live in-sync copy the node holds. */
  private async refuseIfOnlyCopy(node: NodeRecord, doing: string): Promise<void> {
    const volumes = await this.deps.copies.onlyCopyOn(node.UUID, true);
    if (volumes.length === 0) return;
    throw errors.invalid(
      `${doing} node ${node.UUID} would make volume(s) ${nameSome(volumes)} unavailable: the node holds their only in-sync copy (force: true overrides)`,
    );
  }

  /**
   * Checks and records one command. The write is guarded by everything the checks read, the
   * count of commands in progress included: a request that lost a race with another command
   * (any node, any control plane) reads and checks again, so it ends recorded, 409 or 429,
   * never past the limit.
   */
  private async give(
    nodeUUID: string,
    kind: NodeCommandKind,
    expectedETag: string | undefined,
    check: (view: InventoryView, node: Stored<NodeRecord>) => Promise<Pick<NodeCommandRecord, 'desired' | 'force' | 'considerBackend' | 'targetNodeUUID'> & { checked: CheckedNode[] }>,
  ): Promise<void> {
    await retryLostRaces<void>(GUARDED_ATTEMPTS, async () => {
      const view = new InventoryView(await this.deps.inventory.read());
      const node = view.snapshot.nodes.get(nodeUUID);
      if (!node) throw errors.notFound('node', nodeUUID);
      if (expectedETag !== undefined && expectedETag !== nodeETag(view, node)) throw errors.etagMismatch('node', nodeUUID);
      const current = view.snapshot.nodeCommands.get(nodeUUID);
      if (current && commandInProgress(view, current.record)) {
        throw new StrataError('OPERATION_IN_PROGRESS', `a ${current.record.kind} command (${current.record.id}) is in progress on node ${nodeUUID}`);
      }
      const running = [...view.snapshot.nodeCommands.values()].filter((c) => commandInProgress(view, c.record)).length;
      if (running >= this.deps.maxInProgress) {
        throw new StrataError('TOO_MANY_REQUESTS', `${running} node commands are in progress (at most ${this.deps.maxInProgress}); retry when one has finished`);
      }
      const { checked, ...fields } = await check(view, node);
      const command: NodeCommandRecord = {
        nodeUUID,
        id: randomUUID(),
        kind,
        ...fields,
        requestedAt: (this.deps.now?.() ?? new Date()).toISOString(),
      };
      const target = fields.targetNodeUUID ? ` to node ${fields.targetNodeUUID}` : '';
      const prepared = await this.deps.events.prepare(
        catalogued(requestedEvent[kind], {
          component: { kind: 'node', ID: nodeUUID, Name: node.record.name },
          description: `${kind}${target} of node ${node.record.name} (${nodeUUID}) requested (command ${command.id}${command.force ? ', forced' : ''})`,
        }),
      );
      const checkedNodes = [{ node, command: current }, ...checked];
      if (!(await this.deps.store.record(command, checkedNodes, prepared, view.snapshot.revision))) return LOST_RACE;
    }, () => new StrataError('OPERATION_IN_PROGRESS', `node commands kept changing while the ${kind} command for node ${nodeUUID} was being recorded; retry`));
  }
}

/** A node's state as GET shows it (nodes-service.ts), for the replace checks. */
function nodeStateOf(view: InventoryView, node: Stored<NodeRecord>): string {
  return nodeStateAndInfo(view, node).state;
}
