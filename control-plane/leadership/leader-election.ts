// The active cluster manager: one control-plane instance at a time holds the leader key, bound
// to its lease. We do not use etcd3's Election helper (it has been seen to elect two leaders);
// the protocol here is one key and one compare:
//   campaign  = txn(if leader key absent) put leader key with my lease
//   term      = the leader key's create_revision when I won (unique per term)
//   fenced commit = a transaction (lib/etcd/transaction.ts) guarded on the leader key's
//                   create_revision == my term, and on whatever else the writer read
// A deposed leader's fenced commit fails even if it has not noticed yet; it then steps down.
// It learns of the leader key's changes from the process's watched state (WatchCache.state),
// not from a watch of its own: one watch per process.
import type { Etcd3, Lease } from 'etcd3';
import { StrataError } from '../../lib/errors.js';
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
import type { MirrorChange, PrefixMirror } from '../../lib/etcd/prefix-mirror.js';
import { commitTransaction, type Guard, type Transaction } from '../../lib/etcd/transaction.js';
import type { Logger } from '../../lib/logger.js';
import type { LeaderRecord } from '../../lib/records.js';

export type LeadershipListener = (isLeader: boolean) => void;

export class LeaderElection {
  private term: string | undefined;
  private lease: Lease | undefined;
  private unsubscribe: (() => void) | undefined;
  private readonly listeners = new Set<LeadershipListener>();
  private stopped = false;
  private campaigning: Promise<void> | undefined;

  /** `state`: the process's watched state, started; it must hold the leader key (keys.leader()). */
  constructor(
    private readonly etcd: Etcd3,
    private readonly state: PrefixMirror,
    private readonly instanceId: string,
    private readonly logger: Logger,
  ) {}

  get isLeader(): boolean {
    return this.term !== undefined;
  }

  onChange(listener: LeadershipListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Starts campaigning with the instance's lease; call again with each re-granted lease. */
  async start(lease: Lease): Promise<void> {
    this.lease = lease;
    this.unsubscribe ??= this.state.onChange((changes, reloaded) => {
      if (reloaded || changes.some(isLeaderKey)) this.leaderKeyChanged();
    });
    await this.campaign();
  }

  /** The leader key changed (or may have): campaign when it is gone, step down when another term holds it. */
  private leaderKeyChanged(): void {
    const leader = this.state.get<LeaderRecord>(keys.leader(), keys.leader());
    if (!leader) {
      void this.campaign();
      return;
    }
    const term = this.term;
    // The watch may still deliver a key older than the term this instance just won: it says nothing about that term.
    if (term === undefined || BigInt(leader.createRevision) < BigInt(term)) return;
    if (leader.record.instanceId !== this.instanceId || leader.createRevision !== term) this.stepDown('the leader key now belongs to another term');
  }

  /** The lease behind leadership was lost: we are no longer leader, whatever etcd says later. */
  leaseLost(): void {
    this.lease = undefined;
    this.stepDown('etcd lease lost');
  }

  /** Who leads now, from etcd (for the API and tests). */
  async currentLeader(): Promise<LeaderRecord | null> {
    return parseRecord<LeaderRecord>(keys.leader(), await this.etcd.get(keys.leader()).string());
  }

  /**
   * Commits the transaction only while this instance is the leader of the current term (its
   * leader-term guard is added to the transaction's own). Returns false when one of the
   * transaction's guards failed (the caller re-reads and retries); throws NOT_LEADER (and steps
   * down) when the leadership term ended.
   */
  async fencedCommit(transaction: Transaction): Promise<boolean> {
    const term = this.term;
    if (term === undefined) throw new StrataError('NOT_LEADER', 'this control plane is not the active cluster manager');
    const result = await commitTransaction(this.etcd, { guards: [termGuard(term), ...transaction.guards], writes: transaction.writes });
    if (result.succeeded) return true;
    const leader = await this.etcd.get(keys.leader()).exec();
    if (leader.kvs[0]?.create_revision !== term) {
      this.stepDown('fenced write refused: leadership term ended');
      throw new StrataError('NOT_LEADER', 'leadership term ended before the write');
    }
    return false;
  }

  /** Deletes the leader key if it is still this term's. */
  private async resign(term: string): Promise<void> {
    await commitTransaction(this.etcd, { guards: [termGuard(term)], writes: [{ delete: keys.leader() }] });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    const term = this.term;
    this.stepDown('stopping');
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (term !== undefined) {
      // Resign at once so another instance takes over without waiting for the TTL.
      await this.resign(term).catch(() => undefined);
    }
  }

  private campaign(): Promise<void> {
    // One campaign at a time; a delete event during a campaign re-runs it afterwards.
    const run = async () => {
      const lease = this.lease;
      if (this.stopped || !lease || this.term !== undefined) return;
      const record: LeaderRecord = { instanceId: this.instanceId, since: new Date().toISOString() };
      try {
        const leaseId = await lease.grant();
        const result = await this.etcd
          .if(keys.leader(), 'Create', '==', 0)
          .then(this.etcd.put(keys.leader()).value(JSON.stringify(record)).lease(leaseId))
          .else(this.etcd.get(keys.leader()))
          .commit();
        if (!result.succeeded) return;
        // The txn created the key, so its revision is the key's create_revision: the term.
        this.term = result.header.revision;
        if (this.stopped || this.lease !== lease) {
          await this.resign(this.term);
          this.term = undefined;
          return;
        }
        this.logger.info({ term: this.term }, 'became the active cluster manager');
        this.emit(true);
      } catch (err) {
        this.logger.warn({ err: (err as Error).message }, 'leader campaign failed; will retry on the next change');
      }
    };
    const next = (this.campaigning ?? Promise.resolve()).then(run);
    this.campaigning = next;
    return next;
  }

  private stepDown(reason: string): void {
    if (this.term === undefined) return;
    this.term = undefined;
    this.logger.warn({ reason }, 'no longer the active cluster manager');
    this.emit(false);
  }

  private emit(isLeader: boolean): void {
    for (const listener of this.listeners) {
      try {
        listener(isLeader);
      } catch (err) {
        this.logger.error({ err }, 'leadership listener failed');
      }
    }
  }
}

function isLeaderKey(change: MirrorChange): boolean {
  return change.key === keys.leader();
}

/** The leader-term guard: the leader key is still the one created when the term was won. */
function termGuard(term: string): Guard {
  return { key: keys.leader(), createRevision: term };
}
