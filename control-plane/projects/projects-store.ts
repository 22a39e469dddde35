// Projects in etcd (/strata/projects/<name>), and the counts a project's deletion depends on.
// Every write is one guarded transaction (lib/etcd/transaction.ts): a project never refers to a policy
// that was deleted or narrowed concurrently, and is never deleted while something is being
// created in it.
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import { commitTransaction, currentRevision, unchanged, type CommitResult, type Guard } from '../../lib/etcd/transaction.js';
import type { ProjectRecord, SnapshotRecord } from '../../lib/records.js';

export class ProjectsStore {
  private readonly records: RecordStore;

  constructor(client: KvClient) {
    this.records = new RecordStore(client);
  }

  get(name: string): Promise<Versioned<ProjectRecord> | null> {
    return this.records.get<ProjectRecord>(keys.project(name));
  }

  /** Every project, by name. */
  list(): Promise<Versioned<ProjectRecord>[]> {
    return this.records.list<ProjectRecord>(keys.projectsPrefix());
  }

  currentRevision(): Promise<string> {
    return currentRevision(this.records.kv);
  }

  /** Creates the project if its name is free and each referenced record is still at the revision read. */
  create(record: ProjectRecord, references: readonly Versioned<unknown>[]): Promise<CommitResult> {
    return commitTransaction(this.records.kv, {
      guards: [{ key: keys.project(record.name), revision: '0' }, ...references.map(unchanged)],
      writes: [{ put: keys.project(record.name), value: record }],
    });
  }

  update(current: Versioned<ProjectRecord>, record: ProjectRecord, references: readonly Versioned<unknown>[]): Promise<CommitResult> {
    return commitTransaction(this.records.kv, { guards: [unchanged(current), ...references.map(unchanged)], writes: [{ put: current.key, value: record }] });
  }

  /**
   * Deletes the project if it is unchanged and nothing that belongs to or names it (volumes,
   * snapshots, credentials, policy scopes) was created or changed since `checkedAt`, the
   * revision read before the caller counted them.
   */
  async delete(current: Versioned<ProjectRecord>, checkedAt: string): Promise<boolean> {
    const name = current.record.name;
    const since = (prefix: string): Guard => ({ prefix, unchangedSince: checkedAt });
    const result = await commitTransaction(this.records.kv, {
      guards: [
        unchanged(current),
        since(keys.volumeNamesPrefix(name)),
        since(keys.volumesPrefix()),
        since(keys.snapshotNamesPrefix(name)),
        since(keys.snapshotsPrefix()),
        since(keys.credentialsPrefix(name)),
        since(keys.policiesPrefix()),
      ],
      writes: [{ delete: current.key }],
    });
    return result.succeeded;
  }

  async countCredentials(project: string): Promise<number> {
    return this.records.count(keys.credentialsPrefix(project));
  }

  /** Trusted hosts of in-band authentication (docs/in-band-auth.md). */
  async countTrustedHosts(project: string): Promise<number> {
    return this.records.count(keys.trustedHostsPrefix(project));
  }

  /** Snapshots of the project that are not on their way out. */
  async countSnapshots(project: string): Promise<number> {
    const snapshots = await this.records.list<SnapshotRecord>(keys.snapshotsPrefix());
    return snapshots.filter((s) => s.record.projectName === project && s.record.state !== 'Deleting').length;
  }
}
