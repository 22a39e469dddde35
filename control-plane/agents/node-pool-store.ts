// Persists the storage pools agents report: /strata/node-pools/<nodeUUID> (docs/etcd-keys.md).
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { commitTransaction, type Guard, type Write } from '../../lib/etcd/transaction.js';
import type { NodePoolRecord } from '../../lib/records.js';

/** A reported pool before the store adds what it derives from the previous record. */
export type ReportedPool = Omit<NodePoolRecord, 'devices'> & {
  devices: Omit<NodePoolRecord['devices'][number], 'stateSince' | 'rebuildCompletedAt'>[];
};

export class NodePoolStore {
  constructor(private readonly etcd: Etcd3) {}

  /**
   * Writes the pools of an agent's nodes in one transaction: the reported ones (only when more
   * than their measurement time changed), and deletes the records of the agent's other nodes
   * (a report lists every pool the agent has). Compares the mod_revision of every key it read,
   * so two reports racing (an agent failing over between control planes) never interleave.
   */
  async save(agentNodes: readonly string[], reported: readonly ReportedPool[]): Promise<void> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const current = await Promise.all(agentNodes.map((node) => this.etcd.get(keys.nodePool(node)).exec()));
      const guards: Guard[] = [];
      const writes: Write[] = [];
      agentNodes.forEach((node, i) => {
        const kv = current[i]?.kvs[0];
        const key = keys.nodePool(node);
        guards.push({ key, revision: kv?.mod_revision ?? '0' });
        const before = kv ? parseRecord<NodePoolRecord>(key, kv.value) : null;
        const pool = reported.find((p) => p.nodeUUID === node);
        if (!pool) {
          if (kv) writes.push({ delete: key });
          return;
        }
        const next = withDeviceHistory(pool, before);
        if (!before || !samePool(before, next)) writes.push({ put: key, value: next });
      });
      if (writes.length === 0) return;
      if ((await commitTransaction(this.etcd, { guards, writes })).succeeded) return;
    }
    throw new Error(`the pools of nodes ${agentNodes.join(', ')} kept changing under concurrent writes`);
  }
}

/** Adds when each device entered its state, and when it last finished adding or rebuilding. */
function withDeviceHistory(pool: ReportedPool, before: NodePoolRecord | null): NodePoolRecord {
  const previous = new Map((before?.devices ?? []).map((d) => [d.serial, d]));
  return {
    ...pool,
    devices: pool.devices.map((d) => {
      const last = previous.get(d.serial);
      const changed = !last || last.state !== d.state;
      const finished = changed && last !== undefined && d.state === 'Healthy' && (last.state === 'Adding' || last.state === 'Rebuilding');
      return {
        ...d,
        stateSince: changed ? pool.reportedAt : last.stateSince,
        rebuildCompletedAt: finished ? pool.reportedAt : (last?.rebuildCompletedAt ?? ''),
      };
    }),
  };
}

/** Equal in everything but the measurement and report times. */
function samePool(a: NodePoolRecord, b: NodePoolRecord): boolean {
  const strip = (p: NodePoolRecord) => JSON.stringify({ ...p, measuredAt: '', reportedAt: '' });
  return strip(a) === strip(b);
}
