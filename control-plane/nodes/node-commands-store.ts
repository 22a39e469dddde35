// etcd writes of the node commands (POST /api/v2/nodes/{UUID}/stop|start|restart|replace):
// the command record, with its event, in one transaction guarded by what the checks read.
import type { KvClient } from '../../lib/etcd/kv.js';
import { keys } from '../../lib/etcd/keys.js';
import { commitTransaction, type Guard } from '../../lib/etcd/transaction.js';
import type { NodeCommandRecord, NodeRecord } from '../../lib/records.js';
import type { Stored } from '../inventory/inventory-reader.js';
import type { PreparedEvent } from '../events/event-log-store.js';

/** A node as the checks saw it: its record and its command (absent: none ever given). */
export interface CheckedNode {
  readonly node: Stored<NodeRecord>;
  readonly command: Stored<NodeCommandRecord> | undefined;
}

export class NodeCommandsStore {
  constructor(private readonly etcd: KvClient) {}

  /**
   * Records `command` for its node, in one transaction with its event (if any), only while
   * every node checked (the command's node, and a replace's target) and its command are as the
   * checks read them, and no node's command was written after `countedAt` (the revision the
   * commands in progress were counted at: the limit of commands in progress holds across
   * concurrent requests and control planes). False when any of that changed: read and check again.
   */
  async record(command: NodeCommandRecord, checked: readonly CheckedNode[], event: PreparedEvent | null, countedAt: string): Promise<boolean> {
    if (checked.length === 0) throw new Error('a node command is recorded against the node it was checked on');
    const guards: Guard[] = checked.flatMap(({ node, command: current }): Guard[] => [
      { key: node.key, revision: node.modRevision },
      { key: keys.nodeCommand(node.record.UUID), revision: current?.modRevision ?? '0' },
    ]);
    guards.push({ prefix: keys.nodeCommandsPrefix(), unchangedSince: countedAt });
    const result = await commitTransaction(this.etcd, { guards, writes: [{ put: keys.nodeCommand(command.nodeUUID), value: command }, ...(event?.writes ?? [])] });
    return result.succeeded;
  }
}
