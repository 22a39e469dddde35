// The replica set of a replicated volume in etcd (ReplicaSetRecord, docs/replication.md): the one
// place that reads and changes /strata/replica-sets/. Every change is a compare-and-swap on the
// record's mod_revision that also checks the epoch and primary the caller acts for, so a primary
// that was replaced behind its back cannot change the set (it learns it is fenced instead).
import type { KvClient } from './kv.js';
import type { NodeRecord, ReplicaSetRecord } from '../records.js';
import { LOST_RACE, retryLostRaces } from '../retry.js';
import { keys } from './keys.js';
import { RecordStore, type Versioned } from './record-store.js';
import { commitTransaction, unchanged } from './transaction.js';

/** done: the change is durable (or was already so); fenced: the caller is not the epoch's primary. */
export type ReplicaSetChange = 'done' | 'fenced';

/** What the primary's agent may change about its volume's replica set. */
export interface ReplicaSetWriter {
  /** Takes copies out of the in-sync set: only then may writes be acknowledged without them. */
  markOutOfSync(volumeUUID: string, epoch: number, primaryNodeUUID: string, nodes: readonly string[], reason: string): Promise<ReplicaSetChange>;
  /** Puts a copy back once its resync finished. */
  markInSync(volumeUUID: string, epoch: number, primaryNodeUUID: string, node: string, reason: string): Promise<ReplicaSetChange>;
  /**
   * Planned failover, by the primary itself once it has drained and fenced its host path: the
   * primary moves to an in-sync copy whose server is alive (epoch + 1), and the handing-over copy
   * leaves the in-sync set in the same transaction (the new primary writes without it).
   */
  handOver(volumeUUID: string, epoch: number, primaryNodeUUID: string, candidates: readonly string[]): Promise<HandOverOutcome>;
  /** Records the size the primary's host path serves now: the replicas' paths may show it from then on. */
  recordHostSize(volumeUUID: string, epoch: number, primaryNodeUUID: string, bytes: bigint): Promise<ReplicaSetChange>;
}

/** moved: the new primary (and epoch) is durable; none: no in-sync copy alive; fenced: not the epoch's primary. */
export type HandOverOutcome = { readonly outcome: 'moved'; readonly primaryNodeUUID: string; readonly epoch: number } | { readonly outcome: 'none' | 'fenced' };

const CAS_ATTEMPTS = 20;

/** How a replica set moved by its primary's hand-over begins its reason (the leader announces it). */
export const HANDED_OVER = 'handed over';

export class ReplicaSetStore implements ReplicaSetWriter {
  private readonly records: RecordStore;

  constructor(private readonly etcd: KvClient, private readonly now: () => Date = () => new Date()) {
    this.records = new RecordStore(etcd);
  }

  get(volumeUUID: string): Promise<Versioned<ReplicaSetRecord> | null> {
    return this.records.get<ReplicaSetRecord>(keys.replicaSet(volumeUUID));
  }

  markOutOfSync(volumeUUID: string, epoch: number, primaryNodeUUID: string, nodes: readonly string[], reason: string): Promise<ReplicaSetChange> {
    return this.change(volumeUUID, epoch, primaryNodeUUID, (set) => ({ ...set, inSync: set.inSync.filter((n) => !nodes.includes(n)), reason }));
  }

  markInSync(volumeUUID: string, epoch: number, primaryNodeUUID: string, node: string, reason: string): Promise<ReplicaSetChange> {
    return this.change(volumeUUID, epoch, primaryNodeUUID, (set) => ({ ...set, inSync: set.inSync.includes(node) ? set.inSync : [...set.inSync, node], reason }));
  }

  recordHostSize(volumeUUID: string, epoch: number, primaryNodeUUID: string, bytes: bigint): Promise<ReplicaSetChange> {
    return this.change(volumeUUID, epoch, primaryNodeUUID, (set) => ({ ...set, hostSizeBytes: bytes.toString() }));
  }

  async handOver(volumeUUID: string, epoch: number, primaryNodeUUID: string, candidates: readonly string[]): Promise<HandOverOutcome> {
    const key = keys.replicaSet(volumeUUID);
    const dead = new Set<string>();
    return retryLostRaces<HandOverOutcome>(CAS_ATTEMPTS, async () => {
      const stored = await this.get(volumeUUID);
      if (!stored || stored.record.epoch !== epoch || stored.record.primaryNodeUUID !== primaryNodeUUID) return { outcome: 'fenced' };
      const candidate = candidates.find((n) => n !== primaryNodeUUID && !dead.has(n) && stored.record.inSync.includes(n));
      if (!candidate) return { outcome: 'none' };
      const node = await this.records.get<NodeRecord>(keys.node(candidate));
      if (!node) {
        // A dead candidate costs an attempt too: the next one is tried with the set read again.
        dead.add(candidate);
        return LOST_RACE;
      }
      const why = `${HANDED_OVER} to in-sync copy on ${candidate} by primary ${primaryNodeUUID}`;
      const record: ReplicaSetRecord = {
        ...stored.record,
        epoch: epoch + 1,
        primaryNodeUUID: candidate,
        inSync: stored.record.inSync.filter((n) => n !== primaryNodeUUID),
        reason: why,
        epochReason: why,
        updatedAt: this.now().toISOString(),
      };
      // Only while nothing else changed the set and the candidate's server is alive (its presence
      // key exists); otherwise the next candidate, or the leader's failover once the lease is gone.
      const result = await commitTransaction(this.etcd, {
        guards: [unchanged(stored), { key: keys.presence(node.record.serverUUID), exists: true }],
        writes: [{ put: key, value: record }],
      });
      if (result.succeeded) return { outcome: 'moved', primaryNodeUUID: candidate, epoch: epoch + 1 };
      const again = await this.get(volumeUUID);
      if (again?.revision === stored.revision) dead.add(candidate); // the set held: the candidate's server is gone
      return LOST_RACE;
    }, () => changing(volumeUUID));
  }

  /**
   * Read, check the caller's epoch and primary, write by CAS; a lost race reads again (another
   * writer changed the record: the leader, or a retry of our own that did commit).
   */
  private async change(volumeUUID: string, epoch: number, primaryNodeUUID: string, next: (set: ReplicaSetRecord) => ReplicaSetRecord): Promise<ReplicaSetChange> {
    const key = keys.replicaSet(volumeUUID);
    return retryLostRaces<ReplicaSetChange>(CAS_ATTEMPTS, async () => {
      const stored = await this.get(volumeUUID);
      if (!stored || stored.record.epoch !== epoch || stored.record.primaryNodeUUID !== primaryNodeUUID) return 'fenced';
      const changed = next(stored.record);
      if (sameMembers(changed.inSync, stored.record.inSync) && changed.hostSizeBytes === stored.record.hostSizeBytes) return 'done';
      const record: ReplicaSetRecord = { ...changed, updatedAt: this.now().toISOString() };
      return (await commitTransaction(this.etcd, { guards: [unchanged(stored)], writes: [{ put: key, value: record }] })).succeeded ? 'done' : LOST_RACE;
    }, () => changing(volumeUUID));
  }
}

function changing(volumeUUID: string): Error {
  return new Error(`the replica set of volume ${volumeUUID} kept changing under ${CAS_ATTEMPTS} attempts`);
}

function sameMembers(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x) => b.includes(x));
}
