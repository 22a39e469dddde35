// Persists the storage pools agents report: /strata/node-pools/<nodeUUID> (docs/etcd-keys.md).
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import type { Guard, Write } from '../../lib/etcd/transaction.js';
import type { NodePoolRecord } from '../../lib/records.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';

/** A reported pool before the store adds what it derives from the previous record. */
export type ReportedPool = Omit<NodePoolRecord, 'devices'> & {
  devices: Omit<NodePoolRecord['devices'][number], 'stateSince' | 'rebuildCompletedAt'>[];
};

export class NodePoolStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  /**
   * Writes the pools of an agent's nodes in one transaction: the reported ones (only when more
   * than their measurement time changed), and deletes the records of the agent's other nodes
   * (a report lists every pool the agent has). Compares the mod_revision of every key it read,
   * so two reports racing (an agent failing over between control planes) never interleave.
   */
  async save(agentNodes: readonly string[], reported: readonly ReportedPool[]): Promise<void> {
    await retryLostRaces(
      5,
      async () => {
        const current = await Promise.all(agentNodes.map((node) => this.kv.get(keys.nodePool(node))));
        const guards: Guard[] = [];
        const writes: Write[] = [];
        agentNodes.forEach((node, i) => {
          const stored = current[i];
          const key = keys.nodePool(node);
          guards.push({ key, revision: stored?.modRevision ?? '0' });
          const before = stored ? parseRecord<NodePoolRecord>(key, stored.value) : null;
          const pool = reported.find((p) => p.nodeUUID === node);
          if (!pool) {
            if (stored) writes.push({ delete: key });
            return;
          }
          const next = withDeviceHistory(pool, before);
          if (!before || !samePool(before, next)) writes.push({ put: key, value: next });
        });
        if (writes.length === 0) return undefined;
        return (await this.kv.commit({ guards, writes })).succeeded ? undefined : LOST_RACE;
      },
      () => new Error(`the pools of nodes ${agentNodes.join(', ')} kept changing under concurrent writes`),
    );
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
