// Where a cluster's founding records live in etcd (docs/etcd-keys.md, "Bootstrap"): the cluster
// record, its CA, the bootstrap audit, the built-in projects and the installation credential,
// created together in ONE transaction guarded by "the cluster key does not exist", so exactly one
// of the control planes starting together creates them.
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
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
  constructor(private readonly etcd: Etcd3) {}

  async cluster(): Promise<ClusterRecord | null> {
    return parseRecord<ClusterRecord>(keys.cluster(), await this.etcd.get(keys.cluster()).string());
  }

  async credential(project: string, name: string): Promise<CredentialRecord | null> {
    const key = keys.credential(project, name);
    return parseRecord<CredentialRecord>(key, await this.etcd.get(key).string());
  }

  /** Creates them all if there is no cluster yet; false when another instance created one first. */
  async create(founding: FoundingRecords): Promise<boolean> {
    const { etcd } = this;
    const result = await etcd
      .if(keys.cluster(), 'Create', '==', 0)
      .then(
        etcd.put(keys.cluster()).value(JSON.stringify(founding.cluster)),
        etcd.put(keys.clusterCa()).value(JSON.stringify(founding.ca)),
        etcd.put(keys.bootstrap()).value(JSON.stringify(founding.bootstrap)),
        ...founding.projects.map((p) => etcd.put(keys.project(p.name)).value(JSON.stringify(p))),
        etcd.put(keys.credential(founding.credential.project, founding.credential.name)).value(JSON.stringify(founding.credential)),
      )
      .commit();
    return result.succeeded;
  }
}
