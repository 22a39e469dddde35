// Credentials in etcd (/strata/credentials/<project>/<name>): the records the Authenticator
// reads on every request, so a write here takes effect on the next request.
import type { KvClient } from '../../lib/etcd/kv.js';
import { keys } from '../../lib/etcd/keys.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import { commitTransaction, unchanged, type CommitResult } from '../../lib/etcd/transaction.js';
import type { CredentialRecord, ProjectRecord } from '../../lib/records.js';

export class CredentialRecordsStore {
  private readonly records: RecordStore;

  constructor(private readonly etcd: KvClient) {
    this.records = new RecordStore(etcd);
  }

  get(project: string, name: string): Promise<Versioned<CredentialRecord> | null> {
    return this.records.get<CredentialRecord>(keys.credential(project, name));
  }

  /** The project's credentials, by name. */
  list(project: string): Promise<Versioned<CredentialRecord>[]> {
    return this.records.list<CredentialRecord>(keys.credentialsPrefix(project));
  }

  /** Creates the credential if its name is free and the project is still as read (not deleted meanwhile). */
  create(record: CredentialRecord, project: Versioned<ProjectRecord>): Promise<CommitResult> {
    const key = keys.credential(record.project, record.name);
    return commitTransaction(this.etcd, { guards: [{ key, revision: '0' }, unchanged(project)], writes: [{ put: key, value: record }] });
  }

  async delete(current: Versioned<CredentialRecord>): Promise<boolean> {
    return (await commitTransaction(this.etcd, { guards: [unchanged(current)], writes: [{ delete: current.key }] })).succeeded;
  }
}
