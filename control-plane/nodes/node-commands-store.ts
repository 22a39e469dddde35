// etcd writes of the node commands (POST /api/v2/nodes/{UUID}/stop|start|restart|replace):
// the command record, with its event, in one transaction guarded by what the checks read.
import type { Etcd3 } from 'etcd3';
import type { IOperation } from 'etcd3/lib/builder.js';
import { keys } from '../../lib/etcd/keys.js';
import type { NodeCommandRecord, NodeRecord } from '../../lib/records.js';
import type { Stored } from '../inventory/inventory-reader.js';

/** A node as the checks saw it: its record and its command (absent: none ever given). */
export interface CheckedNode {
  readonly node: Stored<NodeRecord>;
  readonly command: Stored<NodeCommandRecord> | undefined;
}

export class NodeCommandsStore {
  constructor(private readonly etcd: Etcd3) {}

  /**
   * Records `command` for its node, in one transaction with `extraOps` (the event), only while
   * every node checked (the command's node, and a replace's target) and its command are as the
   * checks read them: false when any changed (another command won the race).
   */
  async record(command: NodeCommandRecord, checked: readonly CheckedNode[], extraOps: readonly IOperation[]): Promise<boolean> {
    const compares = checked.flatMap(({ node, command: current }): [string, 'Mod' | 'Create', string][] => [
      [node.key, 'Mod', node.modRevision],
      current ? [current.key, 'Mod', current.modRevision] : [keys.nodeCommand(node.record.UUID), 'Create', '0'],
    ]);
    const [first, ...rest] = compares;
    if (!first) throw new Error('a node command is recorded against the node it was checked on');
    let txn = this.etcd.if(first[0], first[1], '==', first[2]);
    for (const [key, target, value] of rest) txn = txn.and(key, target, '==', value);
    const result = await txn.then(this.etcd.put(keys.nodeCommand(command.nodeUUID)).value(JSON.stringify(command)), ...extraOps).commit();
    return result.succeeded;
  }
}
