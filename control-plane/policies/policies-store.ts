// Policies in etcd: /strata/policies/<UUID> and the cluster-wide name index
// /strata/policy-names/<name> → {UUID}, always written and removed in the same transaction.
// Guards (lib/etcd/transaction.ts) keep policies and the projects that name them consistent:
// a scope never names a project deleted concurrently, and a policy is never deleted or narrowed
// while a project default or a volume is being pointed at it.
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import { commitTransaction, currentRevision, unchanged, type CommitResult } from '../../lib/etcd/transaction.js';
import type { ProjectRecord } from '../../lib/records.js';
import type { PolicyNameRecord, PolicyRecord } from './policy-record.js';

export class PoliciesStore {
  private readonly records: RecordStore;

  constructor(client: KvClient) {
    this.records = new RecordStore(client);
  }

  get(uuid: string): Promise<Versioned<PolicyRecord> | null> {
    return this.records.get<PolicyRecord>(keys.policy(uuid));
  }

  async getByName(name: string): Promise<Versioned<PolicyRecord> | null> {
    const index = await this.records.get<PolicyNameRecord>(keys.policyName(name));
    if (!index) return null;
    const policy = await this.get(index.record.UUID);
    return policy && policy.record.name === name ? policy : null;
  }

  async nameTaken(name: string): Promise<boolean> {
    return (await this.records.get<PolicyNameRecord>(keys.policyName(name))) !== null;
  }

  /** Every policy, in UUID order. */
  list(): Promise<Versioned<PolicyRecord>[]> {
    return this.records.list<PolicyRecord>(keys.policiesPrefix());
  }

  currentRevision(): Promise<string> {
    return currentRevision(this.records.kv);
  }

  /** Creates the policy if its UUID and name are free and every scoped project is still as read. */
  create(record: PolicyRecord, scopeProjects: readonly Versioned<ProjectRecord>[]): Promise<CommitResult> {
    const index: PolicyNameRecord = { UUID: record.UUID };
    return commitTransaction(this.records.kv, {
      guards: [{ key: keys.policy(record.UUID), revision: '0' }, { key: keys.policyName(record.name), revision: '0' }, ...scopeProjects.map(unchanged)],
      writes: [
        { put: keys.policy(record.UUID), value: record },
        { put: keys.policyName(record.name), value: index },
      ],
    });
  }

  /**
   * Replaces the policy if it is unchanged, every scoped project is still as read, and no
   * project changed since `checkedAt` (the caller checked which projects use it as default).
   */
  update(current: Versioned<PolicyRecord>, record: PolicyRecord, scopeProjects: readonly Versioned<ProjectRecord>[], checkedAt: string): Promise<CommitResult> {
    return commitTransaction(this.records.kv, {
      guards: [unchanged(current), ...scopeProjects.map(unchanged), { prefix: keys.projectsPrefix(), unchangedSince: checkedAt }],
      writes: [{ put: current.key, value: record }],
    });
  }

  /**
   * Deletes the policy and its name if it is unchanged and no project or volume changed since
   * `checkedAt` (the caller counted the projects and volumes that use it).
   */
  async delete(current: Versioned<PolicyRecord>, checkedAt: string): Promise<boolean> {
    const result = await commitTransaction(this.records.kv, {
      guards: [unchanged(current), { prefix: keys.projectsPrefix(), unchangedSince: checkedAt }, { prefix: keys.volumesPrefix(), unchangedSince: checkedAt }],
      writes: [{ delete: current.key }, { delete: keys.policyName(current.record.name) }],
    });
    return result.succeeded;
  }
}
