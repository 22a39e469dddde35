// What the reconciler reads and follows in etcd (docs/datapath.md), all from the agent's watched
// state (agent/agent-state-store.ts, one watch per process): the cluster record, each of this
// agent's nodes' assignments (/strata/assignments/<node>/<volume>, read at one revision and
// followed from the next: every change after the read arrives, none is missed), and, for
// replicated volumes, the replica sets and presence keys (their puts only). Records are handed
// over unparsed-looking (`record()` throws on one that is not JSON) so the reconciler decides
// what a corrupt one means, as before.
import { keys } from '../../../lib/etcd/keys.js';
import { followKeys, followPuts, readKeys, recordOf, requireMirrored, seenAfter, type KeysRead } from '../../../lib/etcd/mirror-follower.js';
import type { MirroredRecord, PrefixMirror } from '../../../lib/etcd/prefix-mirror.js';
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
  /** Per node: its last read, which the watch that follows it starts from. */
  private readonly lastRead = new Map<string, KeysRead>();

  constructor(private readonly state: PrefixMirror) {
    requireMirrored(state, [keys.cluster(), keys.assignmentsPrefix(), keys.replicaSetsPrefix(), keys.presencePrefix()], 'the assignment store');
  }

  async cluster(): Promise<ClusterRecord | null> {
    await this.state.catchUp();
    return recordOf<ClusterRecord>(this.state.get(keys.cluster(), keys.cluster()));
  }

  /** The node's assignment keys and the revision they were read at. */
  async read(nodeUUID: string): Promise<{ revision: bigint; keys: AssignmentKey[] }> {
    await this.state.catchUp();
    const read = readKeys(this.state, keys.assignmentsPrefix(), keys.assignmentsPrefix(nodeUUID));
    this.lastRead.set(nodeUUID, read);
    return { revision: read.revision, keys: read.entries.map(([key, entry]) => assignmentKey(nodeUUID, key, entry)) };
  }

  /**
   * Every change of the node's assignments from `fromRevision` on: first, at once, what changed
   * since the read at `fromRevision - 1`, then each change as the state sees it (a delete carries
   * the state's revision, at or after the delete). `error` is not called: the state reloads by
   * itself after a watch failure, and what the reload changed arrives as puts and deletes.
   */
  watch(nodeUUID: string, fromRevision: bigint, on: { put(key: AssignmentKey): void; delete(key: AssignmentKey): void; error(err: Error): void }): StoreWatch {
    const prefix = keys.assignmentsPrefix(nodeUUID);
    const seen = seenAfter(this.state, keys.assignmentsPrefix(), prefix, fromRevision - 1n, this.lastRead.get(nodeUUID));
    const stop = followKeys(this.state, keys.assignmentsPrefix(), prefix, seen, {
      put: (key, entry) => on.put(assignmentKey(nodeUUID, key, entry)),
      delete: (key, revision) => on.delete({ key, volumeUUID: key.slice(prefix.length), revision, record: () => null }),
    });
    return { cancel: async () => void stop() };
  }

  /** Every replica set written from now on, with its volume's UUID (and every one after the state reloaded). */
  watchReplicaSets(onPut: (volumeUUID: string, set: WatchedRecord<ReplicaSetRecord>) => void, _onError: (err: Error) => void): StoreWatch {
    const prefix = keys.replicaSetsPrefix();
    const stop = followPuts(this.state, prefix, (key, entry) => onPut(key.slice(prefix.length), watched<ReplicaSetRecord>(key, entry)), 'all');
    return { cancel: async () => void stop() };
  }

  /** Every presence key written from now on (a server registering). */
  watchPresence(onPut: (presence: WatchedRecord<PresenceRecord>) => void, _onError: (err: Error) => void): StoreWatch {
    const stop = followPuts(this.state, keys.presencePrefix(), (key, entry) => onPut(watched<PresenceRecord>(key, entry)), 'none');
    return { cancel: async () => void stop() };
  }
}

function watched<T>(key: string, entry: MirroredRecord<unknown>): WatchedRecord<T> {
  return { key, record: () => recordOf<T>(entry) };
}

function assignmentKey(nodeUUID: string, key: string, entry: MirroredRecord<unknown>): AssignmentKey {
  return {
    key,
    volumeUUID: key.slice(keys.assignmentsPrefix(nodeUUID).length),
    revision: BigInt(entry.revision),
    record: () => recordOf<VolumeAssignment>(entry),
  };
}
