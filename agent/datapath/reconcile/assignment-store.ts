// What the reconciler reads and watches in etcd (docs/datapath.md): the cluster record, each of
// this agent's nodes' assignments (/strata/assignments/<node>/<volume>, read at one revision and
// watched from the next), and, for replicated volumes, the replica sets and presence keys (their
// puts only). Records are handed over unparsed (`record()` throws on one that is not JSON) so
// the reconciler decides what a corrupt one means, as before.
import type { Etcd3, IKeyValue } from 'etcd3';
import { parseRecord } from '../../../lib/etcd/client.js';
import { ClusterStore } from '../../../lib/etcd/cluster-store.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { StoreWatch } from '../../../lib/etcd/record-store.js';
import type { ClusterRecord, PresenceRecord, ReplicaSetRecord, VolumeAssignment } from '../../../lib/records.js';

/** One key under a node's assignments, as read or as a watch event. */
export interface AssignmentKey {
  readonly key: string;
  /** What follows the node's prefix: the volume's UUID ('' or with a '/': not an assignment's key). */
  readonly volumeUUID: string;
  /** The key's mod_revision (of the delete, for a delete event). */
  readonly revision: bigint;
  /** The assignment; null when the value is JSON null; throws when it is not JSON. */
  record(): VolumeAssignment | null;
}

/** A record of a watch event, parsed when asked (throws when it is not JSON). */
export interface WatchedRecord<T> {
  readonly key: string;
  record(): T | null;
}

export class AssignmentStore {
  private readonly clusterStore: ClusterStore;

  constructor(private readonly etcd: Etcd3) {
    this.clusterStore = new ClusterStore(etcd);
  }

  cluster(): Promise<ClusterRecord | null> {
    return this.clusterStore.read();
  }

  /** The node's assignment keys and the revision they were read at. */
  async read(nodeUUID: string): Promise<{ revision: bigint; keys: AssignmentKey[] }> {
    const response = await this.etcd.getAll().prefix(keys.assignmentsPrefix(nodeUUID)).exec();
    return { revision: BigInt(response.header.revision), keys: response.kvs.map((kv) => assignmentKey(nodeUUID, kv)) };
  }

  /**
   * Watches the node's assignments from `fromRevision` on. It starts connecting at once and keeps
   * retrying while etcd is away (not waiting for the connection); `error` e.g. when that revision
   * was compacted.
   */
  watch(nodeUUID: string, fromRevision: bigint, on: { put(key: AssignmentKey): void; delete(key: AssignmentKey): void; error(err: Error): void }): StoreWatch {
    const watcher = this.etcd.watch().prefix(keys.assignmentsPrefix(nodeUUID)).startRevision(String(fromRevision)).watcher();
    watcher.on('put', (kv: IKeyValue) => on.put(assignmentKey(nodeUUID, kv)));
    watcher.on('delete', (kv: IKeyValue) => on.delete(assignmentKey(nodeUUID, kv)));
    watcher.on('error', (err) => on.error(err));
    return watcher;
  }

  /** Every replica set written from now on, with its volume's UUID. */
  watchReplicaSets(onPut: (volumeUUID: string, set: WatchedRecord<ReplicaSetRecord>) => void, onError: (err: Error) => void): StoreWatch {
    const prefix = keys.replicaSetsPrefix();
    const watcher = this.etcd.watch().prefix(prefix).watcher();
    watcher.on('put', (kv: IKeyValue) => {
      const key = kv.key.toString('utf8');
      onPut(key.slice(prefix.length), watched<ReplicaSetRecord>(key, kv));
    });
    watcher.on('error', onError);
    return watcher;
  }

  /** Every presence key written from now on (a server registering). */
  watchPresence(onPut: (presence: WatchedRecord<PresenceRecord>) => void, onError: (err: Error) => void): StoreWatch {
    const watcher = this.etcd.watch().prefix(keys.presencePrefix()).watcher();
    watcher.on('put', (kv: IKeyValue) => onPut(watched<PresenceRecord>(kv.key.toString('utf8'), kv)));
    watcher.on('error', onError);
    return watcher;
  }
}

function watched<T>(key: string, kv: IKeyValue): WatchedRecord<T> {
  return { key, record: () => parseRecord<T>(key, kv.value) };
}

function assignmentKey(nodeUUID: string, kv: IKeyValue): AssignmentKey {
  const key = kv.key.toString('utf8');
  return {
    key,
    volumeUUID: key.slice(keys.assignmentsPrefix(nodeUUID).length),
    revision: BigInt(kv.mod_revision),
    record: () => parseRecord<VolumeAssignment>(key, kv.value),
  };
}
