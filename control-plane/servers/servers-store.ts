// Server records as the control plane writes them (docs/etcd-keys.md, /strata/servers/<UUID>):
// POST /servers creates one before its agent exists (create-only), completes or removes it
// compared on the revision it wrote, and the active cluster manager completes an add's etcd
// member fields (fenced, compared on the record's revision). The agent's own writes to the
// record (its join) are the agent's. Callers see server records and revisions.
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import { commitTransaction, unchanged, type Committer } from '../../lib/etcd/transaction.js';
import type { ServerRecord } from '../../lib/records.js';

/** A server record an add wrote (`added` set). */
export type AddedServerRecord = ServerRecord & { added: NonNullable<ServerRecord['added']> };

export class ServersStore {
  /** `fencedCommit`: the leader's, for the writes only the active cluster manager makes (completeAdd). */
  private readonly kv: Kv;

  constructor(
    client: KvClient,
    private readonly fencedCommit?: Committer,
  ) {
    this.kv = kvOf(client);
  }

  /** Creates the record if no server has its UUID: its revision, or null when one exists. */
  async create(record: ServerRecord): Promise<string | null> {
    const key = keys.server(record.UUID);
    const created = await commitTransaction(this.kv, { guards: [{ key, revision: '0' }], writes: [{ put: key, value: record }] });
    return created.succeeded ? created.revision : null;
  }

  /** Replaces the record if it is still at `revision`; false when it changed meanwhile. */
  async replaceAt(record: ServerRecord, revision: string): Promise<boolean> {
    const key = keys.server(record.UUID);
    return (await commitTransaction(this.kv, { guards: [{ key, revision }], writes: [{ put: key, value: record }] })).succeeded;
  }

  /** Deletes the record if it is still at `revision`; true when no record is left under the UUID. */
  async removeAt(serverUUID: string, revision: string): Promise<boolean> {
    const key = keys.server(serverUUID);
    await commitTransaction(this.kv, { guards: [{ key, revision }], writes: [{ delete: key }] });
    return (await this.kv.get(key)) === null;
  }

  /** The records an add wrote whose member is not promoted yet (`added.promotedAt` empty). */
  async pendingAdds(): Promise<Versioned<AddedServerRecord>[]> {
    const range = await this.kv.range(keys.serversPrefix());
    return range
      .map((kv) => ({ key: kv.key, record: parseRecord<ServerRecord>(kv.key, kv.value), revision: kv.modRevision }))
      .filter((s): s is Versioned<AddedServerRecord> => !!s.record?.added && s.record.added.promotedAt === '');
  }

  /** Writes `added` into the record read as `current`, fenced and compared on its revision: false when the record changed. */
  async completeAdd(current: Versioned<AddedServerRecord>, added: AddedServerRecord['added']): Promise<boolean> {
    if (!this.fencedCommit) throw new Error('ServersStore.completeAdd needs the leader\'s fenced commit');
    return this.fencedCommit({ guards: [unchanged(current)], writes: [{ put: current.key, value: { ...current.record, added } }] });
  }
}
