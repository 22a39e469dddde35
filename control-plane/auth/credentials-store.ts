// Credentials (RS256 public keys) per project, in etcd.
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
import type { CredentialRecord } from '../../lib/records.js';

export interface StoredCredential {
  readonly record: CredentialRecord;
  /** etcd mod_revision: lets the verifier cache the imported key until the record changes. */
  readonly revision: string;
}

export class CredentialStore {
  constructor(private readonly etcd: Etcd3) {}

  async get(project: string, name: string): Promise<StoredCredential | null> {
    const key = keys.credential(project, name);
    const res = await this.etcd.get(key).exec();
    const kv = res.kvs[0];
    if (!kv) return null;
    const record = parseRecord<CredentialRecord>(key, kv.value);
    return record ? { record, revision: kv.mod_revision } : null;
  }
}
