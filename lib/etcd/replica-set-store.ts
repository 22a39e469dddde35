// The replica set of a replicated volume in etcd (ReplicaSetRecord, docs/replication.md): the one
// place that reads and changes /strata/replica-sets/. Every change is a compare-and-swap on the
// record's mod_revision that also checks the epoch and primary the caller acts for, so a primary
// that was replaced behind its back cannot change the set (it learns it is fenced instead).
import type { Etcd3 } from 'etcd3';
import type { ReplicaSetRecord } from '../records.js';
import { keys } from './keys.js';
import { RecordStore, type Versioned } from './record-store.js';

/** done: the change is durable (or was already so); fenced: the caller is not the epoch's primary. */
export type ReplicaSetChange = 'done' | 'fenced';

/** What the primary's agent may change about its volume's replica set. */
export interface ReplicaSetWriter {
  /** Takes copies out of the in-sync set: only then may writes be acknowledged without them. */
  markOutOfSync(volumeUUID: string, epoch: number, primaryNodeUUID: string, nodes: readonly string[], reason: string): Promise<ReplicaSetChange>;
  /** Puts a copy back once its resync finished. */
  markInSync(volumeUUID: string, epoch: number, primaryNodeUUID: string, node: string, reason: string): Promise<ReplicaSetChange>;
}

const CAS_ATTEMPTS = 20;

export class ReplicaSetStore implements ReplicaSetWriter {
  private readonly records: RecordStore;

  constructor(etcd: Etcd3, private readonly now: () => Date = () => new Date()) {
    this.records = new RecordStore(etcd);
  }

  get(volumeUUID: string): Promise<Versioned<ReplicaSetRecord> | null> {
    return this.records.get<ReplicaSetRecord>(keys.replicaSet(volumeUUID));
  }

  markOutOfSync(volumeUUID: string, epoch: number, primaryNodeUUID: string, nodes: readonly string[], reason: string): Promise<ReplicaSetChange> {
    return this.change(volumeUUID, epoch, primaryNodeUUID, (inSync) => inSync.filter((n) => !nodes.includes(n)), reason);
  }

  markInSync(volumeUUID: string, epoch: number, primaryNodeUUID: string, node: string, reason: string): Promise<ReplicaSetChange> {
    return this.change(volumeUUID, epoch, primaryNodeUUID, (inSync) => (inSync.includes(node) ? inSync : [...inSync, node]), reason);
  }

  /**
   * Read, check the caller's epoch and primary, write by CAS; a lost race reads again (another
   * writer changed the record: the leader, or a retry of our own that did commit).
   */
  private async change(volumeUUID: string, epoch: number, primaryNodeUUID: string, next: (inSync: string[]) => string[], reason: string): Promise<ReplicaSetChange> {
    const key = keys.replicaSet(volumeUUID);
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const stored = await this.get(volumeUUID);
      if (!stored || stored.record.epoch !== epoch || stored.record.primaryNodeUUID !== primaryNodeUUID) return 'fenced';
      const inSync = next(stored.record.inSync);
      if (sameMembers(inSync, stored.record.inSync)) return 'done';
      const record: ReplicaSetRecord = { ...stored.record, inSync, reason, updatedAt: this.now().toISOString() };
      if (await this.records.commitIf([[key, stored.revision]], [this.records.put(key, record)])) return 'done';
    }
    throw new Error(`the replica set of volume ${volumeUUID} kept changing under ${CAS_ATTEMPTS} attempts`);
  }
}

function sameMembers(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x) => b.includes(x));
}
