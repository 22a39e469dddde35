// Where a cluster's founding records live in etcd (docs/etcd-keys.md, "Bootstrap"): the cluster
// record, its CA, the bootstrap audit, the built-in projects and the installation credential,
// created together in ONE transaction guarded by "the cluster key does not exist", so exactly one
// of the control planes starting together creates them.
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import type { ClusterCaRecord } from '../../lib/tls/cluster-ca.js';
import type { ClusterRecord, CredentialRecord, ProjectRecord } from '../../lib/records.js';

/** Everything a new cluster starts with. */
export interface FoundingRecords {
  readonly cluster: ClusterRecord;
  readonly ca: ClusterCaRecord;
  /** Which instance bootstrapped, and when. */
  readonly bootstrap: { readonly by: string; readonly at: string };
  /** The built-in projects. */
  readonly projects: readonly ProjectRecord[];
  /** The installation credential (system:root). */
  readonly credential: CredentialRecord;
}

export class BootstrapStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  async cluster(): Promise<ClusterRecord | null> {
    return parseRecord<ClusterRecord>(keys.cluster(), (await this.kv.get(keys.cluster()))?.value ?? null);
  }

  async credential(project: string, name: string): Promise<CredentialRecord | null> {
    const key = keys.credential(project, name);
    return parseRecord<CredentialRecord>(key, (await this.kv.get(key))?.value ?? null);
  }

  /** Creates them all if there is no cluster yet; false when another instance created one first. */
  async create(founding: FoundingRecords): Promise<boolean> {
    const result = await this.kv.commit({
      guards: [{ key: keys.cluster(), revision: '0' }],
      writes: [
        { put: keys.cluster(), value: founding.cluster },
        { put: keys.clusterCa(), value: founding.ca },
        { put: keys.bootstrap(), value: founding.bootstrap },
        ...founding.projects.map((p) => ({ put: keys.project(p.name), value: p })),
        { put: keys.credential(founding.credential.project, founding.credential.name), value: founding.credential },
      ],
    });
    return result.succeeded;
  }
}
