// Where the cluster CA lives in etcd (docs/etcd-keys.md, /strata/cluster-ca; docs/security.md):
// created in the bootstrap transaction; a cluster bootstrapped before the CA existed gets one
// from the first control plane that finds none, in a `create_revision == 0` transaction, so
// racing creators agree. The certificates themselves are lib/tls/cluster-ca.ts's.
import type { ClusterCaRecord } from '../tls/cluster-ca.js';
import { parseRecord } from './client.js';
import { keys } from './keys.js';
import { kvOf, type Kv, type KvClient } from './kv.js';

export class ClusterCaStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  async read(): Promise<ClusterCaRecord | null> {
    return parseRecord<ClusterCaRecord>(keys.clusterCa(), (await this.kv.get(keys.clusterCa()))?.value ?? null);
  }

  /** The stored CA, storing `fresh()` when the cluster has none (the one stored first wins a race). */
  async ensure(fresh: () => Promise<ClusterCaRecord>): Promise<ClusterCaRecord> {
    const existing = await this.read();
    if (existing) return existing;
    const created = await fresh();
    await this.kv.commit({ guards: [{ key: keys.clusterCa(), revision: '0' }], writes: [{ put: keys.clusterCa(), value: created }] });
    const stored = await this.read();
    if (!stored) throw new Error('the cluster CA vanished right after it was created');
    return stored;
  }
}
