// Node commands in etcd (docs/node-operations.md): the command an administrator last gave a node
// (/strata/node-commands/<node>, written by the control plane) and what the node's agent did about
// it (/strata/node-run-states/<node>, written by the agent). The one place both daemons read and
// write these keys through.
import type { Etcd3 } from 'etcd3';
import type { NodeCommandRecord, NodeRunStateRecord } from '../records.js';
import { keys, idOfKey } from './keys.js';
import { parseRecord } from './client.js';
import { RecordStore, type StoreWatch, type Versioned } from './record-store.js';

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

  constructor(private readonly etcd: Etcd3) {
    this.records = new RecordStore(etcd);
  }

  command(nodeUUID: string): Promise<Versioned<NodeCommandRecord> | null> {
    return this.records.get<NodeCommandRecord>(keys.nodeCommand(nodeUUID));
  }

  runState(nodeUUID: string): Promise<Versioned<NodeRunStateRecord> | null> {
    return this.records.get<NodeRunStateRecord>(keys.nodeRunState(nodeUUID));
  }

  /** The agent's answer (a plain put: only the node's agent writes it). */
  async putRunState(record: NodeRunStateRecord): Promise<void> {
    await this.etcd.put(keys.nodeRunState(record.nodeUUID)).value(JSON.stringify(record));
  }

  /**
   * Watches every node's command from the revision after `fromRevision`; `onCommand` gets the
   * node and its command (undefined when deleted). Corrupt records are reported as undefined.
   */
  watchCommands(fromRevision: string, onCommand: (nodeUUID: string, command: NodeCommandRecord | undefined) => void, onError: (err: Error) => void): StoreWatch {
    const watcher = this.etcd.watch().prefix(keys.nodeCommandsPrefix()).startRevision(String(BigInt(fromRevision) + 1n)).watcher();
    watcher.on('put', (kv) => {
      const key = kv.key.toString('utf8');
      let record: NodeCommandRecord | undefined;
      try {
        record = parseRecord<NodeCommandRecord>(key, kv.value) ?? undefined;
      } catch {
        record = undefined;
      }
      onCommand(idOfKey(key), record);
    });
    watcher.on('delete', (kv) => onCommand(idOfKey(kv.key.toString('utf8')), undefined));
    watcher.on('error', onError);
    return watcher;
  }

  /** The commands of `nodes` and the etcd revision they were read at. */
  async commandsOf(nodes: readonly string[]): Promise<{ revision: string; commands: Map<string, NodeCommandRecord>; runStates: Map<string, NodeRunStateRecord> }> {
    const response = await this.etcd.getAll().prefix(keys.nodeCommandsPrefix()).exec();
    const commands = new Map<string, NodeCommandRecord>();
    for (const kv of response.kvs) {
      const key = kv.key.toString('utf8');
      const node = idOfKey(key);
      if (!nodes.includes(node)) continue;
      try {
        const record = parseRecord<NodeCommandRecord>(key, kv.value);
        if (record) commands.set(node, record);
      } catch {
        // A corrupt command is no command.
      }
    }
    const runStates = new Map<string, NodeRunStateRecord>();
    for (const node of nodes) {
      const run = await this.runState(node).catch(() => null);
      if (run) runStates.set(node, run.record);
    }
    return { revision: response.header.revision, commands, runStates };
  }
}
