// Credentials in etcd (/strata/credentials/<project>/<name>): the records the Authenticator
// reads on every request, so a write here takes effect on the next request.
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import type { CredentialRecord, ProjectRecord } from '../../lib/records.js';
import { commitGuarded, type CommitResult } from '../projects/etcd-guards.js';

export class CredentialRecordsStore {
  private readonly records: RecordStore;

  constructor(private readonly etcd: Etcd3) {
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
    return commitGuarded(
      this.etcd,
      [
        { key, revision: '0' },
        { key: project.key, revision: project.revision },
      ],
      [{ put: key, value: record }],
    );
  }

  async delete(current: Versioned<CredentialRecord>): Promise<boolean> {
    return this.records.commitIf([[current.key, current.revision]], [this.records.delete(current.key)]);
  }
}
