// Feature flags in etcd: /strata/feature-flags/<name>. A flag never written has its default.
import type { KvClient } from '../../lib/etcd/kv.js';
import { keys } from '../../lib/etcd/keys.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import { commitTransaction } from '../../lib/etcd/transaction.js';
import type { ClusterRecord } from '../../lib/records.js';
import type { FeatureFlagName } from '../volumes/volume-dependencies.js';

/** /strata/feature-flags/<name>. Lives here until lib/records.ts takes it. */
export interface FeatureFlagRecord {
  name: FeatureFlagName;
  enabled: boolean;
  updatedAt: string;
  /** `sub` of the token that last changed it. */
  updatedBy: string;
}

export class FeatureFlagsStore {
  private readonly records: RecordStore;

  constructor(etcd: KvClient) {
    this.records = new RecordStore(etcd);
  }

  get(name: FeatureFlagName): Promise<Versioned<FeatureFlagRecord> | null> {
    return this.records.get<FeatureFlagRecord>(keys.featureFlag(name));
  }

  list(): Promise<Versioned<FeatureFlagRecord>[]> {
    return this.records.list<FeatureFlagRecord>(keys.featureFlagsPrefix());
  }

  /** Writes the flag if it is still at `expectedRevision` ('0': never written). */
  async put(record: FeatureFlagRecord, expectedRevision: string): Promise<boolean> {
    const key = keys.featureFlag(record.name);
    return (await commitTransaction(this.records.kv, { guards: [{ key, revision: expectedRevision }], writes: [{ put: key, value: record }] })).succeeded;
  }

  /** The cluster's identity, for the events a change records. */
  async cluster(): Promise<Pick<ClusterRecord, 'UUID' | 'clusterName'> | null> {
    return (await this.records.get<ClusterRecord>(keys.cluster()))?.record ?? null;
  }
}
