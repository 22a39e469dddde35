// POST /api/v2/servers (spec 4.12; issue 15 item 2): adds a server before it is installed. The
// server record is written first (create-only: a second add of the UUID is 409), with what the add
// asked for (`added`: the etcd peer URL, extendCluster); then the new etcd member is added, as a
// learner where etcd has learners. A refused member add removes the record again: nothing is left
// half-done. The active cluster manager (etcd-member-promotion.ts) finishes what a control plane
// killed in between left (a record without its member), and promotes the learner once it caught
// up. The server's agent, started with `serverUUID` set to the same UUID, then joins the record;
// its nodes join Active with extendCluster, Unattached without (agent/membership).
import { addressOf } from '../../lib/endpoints.js';
import { StrataError, toStrataError } from '../../lib/errors.js';
import type { EtcdMembership } from '../../lib/etcd/membership.js';
import { retry } from '../../lib/retry.js';
import type { ServerRecord } from '../../lib/records.js';
import type { InventorySource } from '../inventory/inventory-reader.js';
import type { AddServerInput } from './servers-schema.js';
import type { ServersStore } from './servers-store.js';

export class ServerAdder {
  constructor(
    private readonly store: ServersStore,
    private readonly inventory: InventorySource,
    private readonly membership: EtcdMembership,
  ) {}

  /** Adds the server and its etcd member; the UUID of the server (read it back as a server). */
  async add(input: AddServerInput, now = new Date()): Promise<string> {
    const snapshot = await this.inventory.read();
    if (snapshot.servers.has(input.serverUUID)) throw new StrataError('ALREADY_EXISTS', `server ${input.serverUUID} already exists`);
    const address = addressOf(input.peerURL);
    const members = await this.membership.list();
    const sameURL = members.find((m) => m.peerURLs.includes(input.peerURL));
    if (sameURL) throw new StrataError('ALREADY_EXISTS', `etcd member ${sameURL.name || sameURL.ID} already has peer URL ${input.peerURL}`);
    if (!input.reuseIP) {
      for (const { record } of snapshot.servers.values()) {
        const peer = record.added?.etcdPeerURL;
        if ((record.endpoints ?? []).some((e) => addressOf(e) === address) || (peer && addressOf(peer) === address)) {
          throw new StrataError('ALREADY_EXISTS', `address ${address} is already an endpoint of server ${record.name || record.UUID} (${record.UUID}); give reuseIP true to add it anyway`);
        }
      }
      const member = members.find((m) => [...m.peerURLs, ...m.clientURLs].some((u) => addressOf(u) === address));
      if (member) throw new StrataError('ALREADY_EXISTS', `address ${address} is already used by etcd member ${member.name || member.ID}; give reuseIP true to add it anyway`);
    }
    const record: ServerRecord = {
      UUID: input.serverUUID,
      name: '',
      hostname: '',
      nodeUUIDs: [],
      endpoints: [address],
      createdAt: now.toISOString(),
      added: { etcdPeerURL: input.peerURL, etcdMemberID: '', extendCluster: input.extendCluster, promotedAt: '' },
    };
    const revision = await this.store.create(record);
    if (revision === null) throw new StrataError('ALREADY_EXISTS', `server ${input.serverUUID} already exists`);
    let memberID: string;
    try {
      memberID = await this.membership.add(input.peerURL, await this.membership.supportsLearners());
    } catch (err) {
      // Nothing half-done: the record goes again (unless something already changed it).
      if (!(await this.removeRecord(input.serverUUID, revision))) {
        const error = toStrataError(err);
        throw new StrataError(error.code, `${error.message}; the server record could not be removed: the active cluster manager adds its member later`, { cause: err });
      }
      throw err;
    }
    const withID: ServerRecord = { ...record, added: { ...record.added!, etcdMemberID: memberID } };
    // The promotion task fills the ID in as well, should this write lose a race with the agent.
    await this.store.replaceAt(withID, revision);
    return input.serverUUID;
  }

  /**
   * Deletes the record written at `revision`; true when it is gone. Retried for ~3 s: etcd's
   * refusal of the member add may have made the client skip the host for a second.
   */
  private async removeRecord(serverUUID: string, revision: string): Promise<boolean> {
    return retry(
      () => this.store.removeAt(serverUUID, revision),
      { maxRetries: 9, backoff: { initialMs: 300, maxMs: 300, jitter: 0 } },
    ).catch(() => false);
  }
}
