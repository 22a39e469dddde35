// The agent's side of node stop / start / restart (docs/node-operations.md). The control plane
// records the command in etcd (/strata/node-commands/<node>); this module watches the commands of
// this server's nodes and makes them true, then records what it did (/strata/node-run-states/<node>):
//
//   stop:  Stopping → the node's volumes are frozen in the kernel (no pass touches them), the
//          replicated volumes it is the primary of are handed over (host paths ANA-inaccessible,
//          device-mapper drained onto the error target), the node leaves the presence key (it is
//          Inactive: the leader promotes an in-sync copy elsewhere), the mirrors stop cleanly,
//          its host paths and replication exports leave the kernel target (backings stay) → Stopped
//   start: Starting → back in the presence key, its volumes served again (its copies rejoin by
//          bitmap resync on their primaries) → Running
//   restart: stop, then start (the run state remembers the stop half across an agent restart);
//          with considerBackend, between the two the node's storage pool is reassembled (btrfs
//          unmounted, md array stopped, assembled again from the managed devices, mounted): the
//          pool is down for every reader meanwhile; a failed reassembly fails the command with the
//          kernel's reason and the node stays stopped (the run state remembers `reassembled`)
//
// A stopped node stays stopped across agent restarts: at start, before the agent registers or
// serves, the commands are read and stopped nodes are left out of presence and of the data path.
import { commandFailed, NodeCommandStore, reassemblyPending, wantsStopped } from '../../lib/etcd/node-command-store.js';
import type { StoreWatch } from '../../lib/etcd/record-store.js';
import type { Logger } from '../../lib/logger.js';
import type { NodeCommandRecord, NodeRunState, NodeRunStateRecord } from '../../lib/records.js';
import { retry, sleep } from '../../lib/retry.js';

/** The data path as node operations drive it (DataPathReconciler). */
export interface NodeDataPath {
  freezeNode(nodeUUID: string): Promise<void>;
  handOverNode(nodeUUID: string): Promise<string[]>;
  finishHandOver(): Promise<void>;
  holdNode(nodeUUID: string): Promise<string[]>;
  holdNodeAtStart(nodeUUID: string): void;
  releaseNode(nodeUUID: string): Promise<unknown>;
}

/** The node's storage pool as node operations drive it (NodePools). */
export interface NodePoolControl {
  holdDownAtStart(nodeUUID: string, reason: string): void;
  reassemble(nodeUUID: string, reason: string): Promise<{ readonly steps: readonly string[] }>;
  bringUp(nodeUUID: string): Promise<void>;
}

/** The presence key as node operations drive it (Membership). */
export interface NodePresence {
  setListedNodes(nodes: readonly string[]): Promise<void>;
  listedNodes(): string[];
}

export interface NodeOperationsOptions {
  readonly store: NodeCommandStore;
  readonly nodeUUIDs: readonly string[];
  readonly dataPath: NodeDataPath;
  readonly pools: NodePoolControl;
  readonly presence: NodePresence;
  readonly logger: Logger;
}

export class NodeOperations {
  private readonly commands = new Map<string, NodeCommandRecord>();
  private readonly runStates = new Map<string, NodeRunStateRecord>();
  /** Nodes this agent serves nothing of now. */
  private readonly stopped = new Set<string>();
  private watcher: StoreWatch | undefined;
  private working: Promise<void> | undefined;
  private dirty = false;
  private readonly abort = new AbortController();
  private started = false;

  constructor(private readonly options: NodeOperationsOptions) {}

  /**
   * Before the agent registers or serves: reads the commands (retrying while etcd is away) and
   * leaves the nodes that are to be stopped out of the presence key and the data path.
   */
  async load(): Promise<void> {
    const { store, nodeUUIDs, logger } = this.options;
    const read = await retry(() => store.commandsOf(nodeUUIDs), {
      signal: this.abort.signal,
      onRetry: (err) => logger.warn({ err }, 'reading the node commands failed; retrying'),
    });
    for (const [node, command] of read.commands) this.commands.set(node, command);
    for (const [node, run] of read.runStates) this.runStates.set(node, run);
    for (const node of nodeUUIDs) {
      const command = this.commands.get(node);
      const run = this.runStates.get(node);
      if (!wantsStopped(command, run)) continue;
      this.stopped.add(node);
      this.options.dataPath.holdNodeAtStart(node);
      // Its pool stays down until the reassembly (resumed) or a start brings it up.
      if (command && reassemblyPending(command, run)) this.options.pools.holdDownAtStart(node, `being reassembled (restart ${command.id}, resumed after an agent restart)`);
      else if (command && commandFailed(command, run)) this.options.pools.holdDownAtStart(node, run?.failure ?? '');
      logger.info({ nodeUUID: node, command: command?.id }, 'node stopped by an administrator: not serving it');
    }
    if (this.stopped.size > 0) await this.options.presence.setListedNodes(nodeUUIDs.filter((n) => !this.stopped.has(n)));
    this.watcher = store.watchCommands(
      read.revision,
      (node, command) => {
        if (!nodeUUIDs.includes(node)) return;
        if (command) this.commands.set(node, command);
        else this.commands.delete(node);
        if (this.started) this.kick();
      },
      (err) => logger.warn({ err }, 'the node command watch failed; etcd3 re-establishes it'),
    );
  }

  /** Once the agent serves: carries out what the commands ask and what an earlier run left half done. */
  start(): void {
    this.started = true;
    this.kick();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    // A cancel sent to an etcd that does not answer must not hold the agent's stop up.
    await Promise.race([this.watcher?.cancel().catch(() => undefined), sleep(1000)]);
    await this.working?.catch(() => undefined);
  }

  /** Nodes that serve nothing now (for the agent's state in the diagnostic bundle). */
  stoppedNodes(): string[] {
    return [...this.stopped];
  }

  private kick(): void {
    this.dirty = true;
    if (this.working) return;
    this.working = (async () => {
      while (this.dirty && !this.abort.signal.aborted) {
        this.dirty = false;
        for (const node of this.options.nodeUUIDs) {
          try {
            await this.converge(node);
          } catch (err) {
            if (this.abort.signal.aborted) return;
            this.options.logger.error({ err, nodeUUID: node }, 'carrying out the node command failed; retrying');
            this.dirty = true;
            await sleep(1000, this.abort.signal);
          }
        }
      }
    })().finally(() => (this.working = undefined));
  }

  private async converge(node: string): Promise<void> {
    const command = this.commands.get(node);
    if (!command) return;
    if (wantsStopped(command, this.runStates.get(node))) {
      if (!this.stopped.has(node)) await this.stopNode(node, command);
      else if (!reportedStopped(command, this.runStates.get(node))) await this.confirmStopped(node, command);
      if (command.kind !== 'restart' || commandFailed(command, this.runStates.get(node))) return;
    }
    if (reassemblyPending(command, this.runStates.get(node)) && !(await this.reassemblePool(node, command))) return;
    const run = this.runStates.get(node);
    if (command.desired === 'Running' && (this.stopped.has(node) || run?.commandId !== command.id || run.state !== 'Running')) await this.startNode(node, command);
  }

  private async stopNode(node: string, command: NodeCommandRecord): Promise<void> {
    const { dataPath, presence, logger } = this.options;
    await this.report(node, command, 'Stopping', 'handing over the volumes this node is the primary of');
    await dataPath.freezeNode(node);
    const handedOver = await dataPath.handOverNode(node);
    // Out of the presence key: the node is Inactive, and the leader promotes another in-sync
    // copy of each volume handed over (its promotion compares this presence revision).
    await presence.setListedNodes(presence.listedNodes().filter((n) => n !== node));
    this.stopped.add(node);
    await dataPath.finishHandOver();
    logger.info({ nodeUUID: node, command: command.id, handedOver }, 'node stopping: volumes handed over');
    await this.confirmStopped(node, command);
  }

  /** The node's exports gone from the kernel target (a pass checked), then Stopped. */
  private async confirmStopped(node: string, command: NodeCommandRecord): Promise<void> {
    if (!this.stopped.has(node)) {
      this.stopped.add(node);
      await this.options.presence.setListedNodes(this.options.presence.listedNodes().filter((n) => n !== node));
    }
    const left = await this.options.dataPath.holdNode(node);
    if (left.length > 0) throw new Error(`the node's subsystems ${left.join(', ')} are still in the kernel target`);
    await this.report(node, command, 'Stopped', 'serving nothing: its volumes were handed over and its exports removed', { stopDone: command.kind === 'restart' });
    this.options.logger.info({ nodeUUID: node, command: command.id }, 'node stopped');
  }

  /**
   * Restart with considerBackend, between the stop and the start: the node's pool is reassembled.
   * Returns whether it was; a failure is recorded as the command's, with the kernel's reason.
   */
  private async reassemblePool(node: string, command: NodeCommandRecord): Promise<boolean> {
    const { pools, logger } = this.options;
    await this.report(node, command, 'Stopped', 'reassembling the storage pool: unmounting its btrfs, stopping its md array, assembling it from the managed devices, mounting it', { stopDone: true });
    try {
      const { steps } = await pools.reassemble(node, `being reassembled (restart ${command.id})`);
      await this.report(node, command, 'Stopped', `storage pool reassembled: ${steps.join('; ')}`, { stopDone: true, reassembled: true });
      logger.info({ nodeUUID: node, command: command.id, steps }, 'node pool reassembled');
      return true;
    } catch (err) {
      if (this.abort.signal.aborted) throw err;
      const failure = `reassembling the storage pool failed: ${(err as Error).message}`;
      const detail = `${failure}; the node stays stopped and its data stays on its devices: POST /api/v2/nodes/${node}/start serves it again`;
      await this.report(node, command, 'Stopped', detail, { stopDone: true, failure });
      logger.error({ err, nodeUUID: node, command: command.id }, 'node restart failed: reassembling its storage pool failed; it stays stopped');
      return false;
    }
  }

  private async startNode(node: string, command: NodeCommandRecord): Promise<void> {
    const { dataPath, pools, presence, logger } = this.options;
    const previous = this.runStates.get(node);
    const flags = {
      stopDone: command.kind === 'restart',
      ...(previous?.commandId === command.id && previous.reassembled ? { reassembled: true } : {}),
    };
    const reassembled = flags.reassembled ? ', its storage pool reassembled' : '';
    await this.report(node, command, 'Starting', `serving the node's volumes again${reassembled}`, flags);
    await presence.setListedNodes([...new Set([...presence.listedNodes(), node])]);
    this.stopped.delete(node);
    await pools.bringUp(node);
    await dataPath.releaseNode(node);
    await this.report(node, command, 'Running', `serving its volumes${reassembled}`, flags);
    logger.info({ nodeUUID: node, command: command.id }, 'node started');
  }

  private async report(node: string, command: NodeCommandRecord, state: NodeRunState, detail: string, flags: Pick<NodeRunStateRecord, 'stopDone' | 'reassembled' | 'failure'> = {}): Promise<void> {
    const set = Object.fromEntries(Object.entries(flags).filter(([, v]) => v !== undefined && v !== false));
    const record: NodeRunStateRecord = { nodeUUID: node, state, commandId: command.id, ...set, updatedAt: new Date().toISOString(), detail };
    await retry(() => this.options.store.putRunState(record), {
      signal: this.abort.signal,
      onRetry: (err) => this.options.logger.warn({ err, nodeUUID: node }, 'recording the node run state failed; retrying'),
    });
    this.runStates.set(node, record);
  }
}

/** The agent already recorded this command's stop (half) as done. */
function reportedStopped(command: NodeCommandRecord, run: NodeRunStateRecord | undefined): boolean {
  return run?.commandId === command.id && (run.state === 'Stopped' || run.stopDone === true);
}
