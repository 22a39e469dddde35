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
//
// Split in two: the key, the lease binding, the compare and the guard are etcd mechanism and live
// in lib/etcd/leader-store.ts; this file keeps what the control plane decides with them (one
// campaign at a time, when a term begins and ends, who is told) and takes the store as the
// LeaderKey interface below. The election is the control plane's, not etcd's: moving it whole
// under lib/etcd/ would put the term's life cycle and its listeners in the driver layer.
import { StrataError } from '../../lib/errors.js';
import type { Transaction } from '../../lib/etcd/transaction.js';
import type { Logger } from '../../lib/logger.js';
import type { LeaderRecord } from '../../lib/records.js';

export type LeadershipListener = (isLeader: boolean) => void;

/** What the election does with the leader key (lib/etcd/leader-store.ts, `LeaderStore`). */
export interface LeaderKey {
  /** The key as the process's watched state holds it: its record and term, undefined when absent. */
  watched(): { readonly record: LeaderRecord; readonly term: string } | undefined;
  /** Calls `changed` when the key changed (or may have); returns the unsubscribe. */
  onChange(changed: () => void): () => void;
  /** Who leads now, from etcd. */
  current(): Promise<LeaderRecord | null>;
  /** Creates the key bound to the lease if it is absent: the new term, or undefined. */
  claim(record: LeaderRecord, leaseId: string): Promise<string | undefined>;
  /** Commits the transaction guarded on the term too: false when one of its guards failed. */
  commitInTerm(term: string, transaction: Transaction): Promise<boolean>;
  /** The term the key holds now, from etcd. */
  currentTerm(): Promise<string | undefined>;
  /** Deletes the key if it is still the term's. */
  resign(term: string): Promise<void>;
}

/** The instance's lease, as the election uses it: granted (again) for each campaign. */
export interface LeadershipLease {
  grant(): Promise<string>;
}

export class LeaderElection {
  private term: string | undefined;
  private lease: LeadershipLease | undefined;
  private unsubscribe: (() => void) | undefined;
  private readonly listeners = new Set<LeadershipListener>();
  private stopped = false;
  private campaigning: Promise<void> | undefined;

  constructor(
    private readonly leaderKey: LeaderKey,
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
  async start(lease: LeadershipLease): Promise<void> {
    this.lease = lease;
    this.unsubscribe ??= this.leaderKey.onChange(() => this.leaderKeyChanged());
    await this.campaign();
  }

  /** The leader key changed (or may have): campaign when it is gone, step down when another term holds it. */
  private leaderKeyChanged(): void {
    const leader = this.leaderKey.watched();
    if (!leader) {
      void this.campaign();
      return;
    }
    const term = this.term;
    // The watch may still deliver a key older than the term this instance just won: it says nothing about that term.
    if (term === undefined || BigInt(leader.term) < BigInt(term)) return;
    if (leader.record.instanceId !== this.instanceId || leader.term !== term) this.stepDown('the leader key now belongs to another term');
  }

  /** The lease behind leadership was lost: we are no longer leader, whatever etcd says later. */
  leaseLost(): void {
    this.lease = undefined;
    this.stepDown('etcd lease lost');
  }

  /** Who leads now, from etcd (for the API and tests). */
  currentLeader(): Promise<LeaderRecord | null> {
    return this.leaderKey.current();
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
    if (await this.leaderKey.commitInTerm(term, transaction)) return true;
    if ((await this.leaderKey.currentTerm()) !== term) {
      this.stepDown('fenced write refused: leadership term ended');
      throw new StrataError('NOT_LEADER', 'leadership term ended before the write');
    }
    return false;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    const term = this.term;
    this.stepDown('stopping');
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (term !== undefined) {
      // Resign at once so another instance takes over without waiting for the TTL.
      await this.leaderKey.resign(term).catch(() => undefined);
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
        const term = await this.leaderKey.claim(record, leaseId);
        if (term === undefined) return;
        this.term = term;
        if (this.stopped || this.lease !== lease) {
          await this.leaderKey.resign(this.term);
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
