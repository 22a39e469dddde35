// Node commands in etcd (docs/node-operations.md): the command an administrator last gave a node
// (/strata/node-commands/<node>, written by the control plane) and what the node's agent did about
// it (/strata/node-run-states/<node>, written by the agent). The one place both daemons read and
// write these keys through.
import type { NodeCommandRecord, NodeRunStateRecord } from '../records.js';
import { keys, idOfKey } from './keys.js';
import type { KvClient } from './kv.js';
import { followKeys, readKeys, recordOf, requireMirrored, seenAfter, type KeysRead } from './mirror-follower.js';
import type { MirroredRecord, PrefixMirror } from './prefix-mirror.js';
import { RecordStore, type StoreWatch, type Versioned } from './record-store.js';
import { commitUnguarded } from './transaction.js';

/** Whether the agent has done what the command asks (its run state answers it, finally), or it failed. */
export function commandDone(command: NodeCommandRecord, run: NodeRunStateRecord | undefined): boolean {
  if (command.kind === 'replace') return command.completedAt !== undefined && command.completedAt !== '';
  if (!run || run.commandId !== command.id) return false;
  return run.state === command.desired || commandFailed(command, run);
}

/** Whether the agent recorded the command (a restart's reassembly) as failed. */
export function commandFailed(command: NodeCommandRecord, run: NodeRunStateRecord | undefined): boolean {
  return run?.commandId === command.id && run.failure !== undefined && run.failure !== '';
}

/** A restart with considerBackend whose reassembly of the node's pool is not done (nor failed). */
export function reassemblyPending(command: NodeCommandRecord | undefined, run: NodeRunStateRecord | undefined): boolean {
  if (command?.kind !== 'restart' || !command.considerBackend || commandFailed(command, run)) return false;
  return !(run?.commandId === command.id && (run.reassembled === true || run.state === 'Running'));
}

/**
 * Whether a node is to serve nothing now: stopped, in the stop half of a restart or its pool's
 * reassembly, or after a restart that failed.
 */
export function wantsStopped(command: NodeCommandRecord | undefined, run: NodeRunStateRecord | undefined): boolean {
  if (!command) return false;
  if (command.desired === 'Stopped') return true;
  if (command.kind !== 'restart') return false;
  if (commandFailed(command, run) || reassemblyPending(command, run)) return true;
  return !(run?.commandId === command.id && (run.stopDone === true || run.state === 'Running'));
}

export class NodeCommandStore {
  private readonly records: RecordStore;
  /** The last commandsOf() read, which the watch that follows it starts from. */
  private lastRead: KeysRead | undefined;

  /** `state`: the agent's watched state, which the commands are read and followed from. */
  constructor(
    client: KvClient,
    private readonly state: PrefixMirror,
  ) {
    this.records = new RecordStore(client);
    requireMirrored(state, [keys.nodeCommandsPrefix()], 'the node command store');
  }

  command(nodeUUID: string): Promise<Versioned<NodeCommandRecord> | null> {
    return this.records.get<NodeCommandRecord>(keys.nodeCommand(nodeUUID));
  }

  runState(nodeUUID: string): Promise<Versioned<NodeRunStateRecord> | null> {
    return this.records.get<NodeRunStateRecord>(keys.nodeRunState(nodeUUID));
  }

  /** The agent's answer (a plain put: only the node's agent writes it). */
  async putRunState(record: NodeRunStateRecord): Promise<void> {
    await commitUnguarded(this.records.kv, [{ put: keys.nodeRunState(record.nodeUUID), value: record }]);
  }

  /**
   * Follows every node's command from the revision after `fromRevision` (the one commandsOf()
   * returned): first, at once, what changed since that read, then each change; `onCommand` gets
   * the node and its command (undefined when deleted or corrupt). `onError` is not called: the
   * watched state reloads by itself after a watch failure, and what changed arrives as commands.
   */
  watchCommands(fromRevision: string, onCommand: (nodeUUID: string, command: NodeCommandRecord | undefined) => void, _onError: (err: Error) => void): StoreWatch {
    const prefix = keys.nodeCommandsPrefix();
    const seen = seenAfter(this.state, prefix, prefix, BigInt(fromRevision), this.lastRead);
    const stop = followKeys(this.state, prefix, prefix, seen, {
      put: (key, entry) => onCommand(idOfKey(key), commandOf(entry)),
      delete: (key) => onCommand(idOfKey(key), undefined),
    });
    return { cancel: async () => void stop() };
  }

  /** The commands of `nodes` and the etcd revision they were read at. */
  async commandsOf(nodes: readonly string[]): Promise<{ revision: string; commands: Map<string, NodeCommandRecord>; runStates: Map<string, NodeRunStateRecord> }> {
    await this.state.catchUp();
    const read = readKeys(this.state, keys.nodeCommandsPrefix(), keys.nodeCommandsPrefix());
    this.lastRead = read;
    const commands = new Map<string, NodeCommandRecord>();
    for (const [key, entry] of read.entries) {
      const node = idOfKey(key);
      const record = commandOf(entry);
      if (nodes.includes(node) && record) commands.set(node, record);
    }
    const runStates = new Map<string, NodeRunStateRecord>();
    for (const node of nodes) {
      const run = await this.runState(node).catch(() => null);
      if (run) runStates.set(node, run.record);
    }
    return { revision: String(read.revision), commands, runStates };
  }
}

/** A corrupt command is no command. */
function commandOf(entry: MirroredRecord<unknown>): NodeCommandRecord | undefined {
  try {
    return recordOf<NodeCommandRecord>(entry) ?? undefined;
  } catch {
    return undefined;
  }
}
