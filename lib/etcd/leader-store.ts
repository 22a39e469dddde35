// The leader key's etcd mechanics (docs/decisions.md "Leader election without etcd3's
// Election"): one key, bound to the candidate's lease, created only when absent; its
// create_revision is the term, and a leader's fenced commit is a transaction guarded on it. Who
// campaigns when, and when a term is over, is the control plane's (control-plane/leadership/
// leader-election.ts, which takes this store through its LeaderKey interface).
import type { Etcd3 } from 'etcd3';
import type { LeaderRecord } from '../records.js';
import { parseRecord } from './client.js';
import { keys } from './keys.js';
import type { MirrorChange, PrefixMirror } from './prefix-mirror.js';
import { commitTransaction, type Guard, type Transaction } from './transaction.js';

export class LeaderStore {
  /** `state`: the process's watched state, started; it must hold the leader key (keys.leader()). */
  constructor(
    private readonly etcd: Etcd3,
    private readonly state: PrefixMirror,
  ) {}

  /** The leader key as the watched state holds it: the record and its term, or undefined when absent. */
  watched(): { readonly record: LeaderRecord; readonly term: string } | undefined {
    const leader = this.state.get<LeaderRecord>(keys.leader(), keys.leader());
    return leader && { record: leader.record, term: leader.createRevision };
  }

  /**
   * `changed` whenever the watched state saw the leader key change (or read everything again: it
   * may have). It learns of them from the process's one watch, not from a watch of its own.
   */
  onChange(changed: () => void): () => void {
    return this.state.onChange((changes, reloaded) => {
      if (reloaded || changes.some(isLeaderKey)) changed();
    });
  }

  /** Who leads now, from etcd. */
  async current(): Promise<LeaderRecord | null> {
    return parseRecord<LeaderRecord>(keys.leader(), await this.etcd.get(keys.leader()).string());
  }

  /** Creates the leader key with `record`, bound to the lease, if it is absent: the new term, or undefined when another holds it. */
  async claim(record: LeaderRecord, leaseId: string): Promise<string | undefined> {
    const result = await this.etcd
      .if(keys.leader(), 'Create', '==', 0)
      .then(this.etcd.put(keys.leader()).value(JSON.stringify(record)).lease(leaseId))
      .else(this.etcd.get(keys.leader()))
      .commit();
    // The txn created the key, so its revision is the key's create_revision: the term.
    return result.succeeded ? result.header.revision : undefined;
  }

  /** Commits the transaction with the term's guard added to its own; false when a guard failed. */
  async commitInTerm(term: string, transaction: Transaction): Promise<boolean> {
    const result = await commitTransaction(this.etcd, { guards: [termGuard(term), ...transaction.guards], writes: transaction.writes });
    return result.succeeded;
  }

  /** The term the leader key holds now, from etcd (undefined when absent). */
  async currentTerm(): Promise<string | undefined> {
    const leader = await this.etcd.get(keys.leader()).exec();
    return leader.kvs[0]?.create_revision;
  }

  /** Deletes the leader key if it is still the term's. */
  async resign(term: string): Promise<void> {
    await commitTransaction(this.etcd, { guards: [termGuard(term)], writes: [{ delete: keys.leader() }] });
  }
}

function isLeaderKey(change: MirrorChange): boolean {
  return change.key === keys.leader();
}

/** The leader-term guard: the leader key is still the one created when the term was won. */
function termGuard(term: string): Guard {
  return { key: keys.leader(), createRevision: term };
}
