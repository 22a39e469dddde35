// The one way to make a guarded write to etcd: a transaction is typed guards and typed writes,
// committed together or not at all. Stores build them (stores are the only code that knows keys);
// an event recorded with a change contributes its writes to the change's transaction; the
// active cluster manager adds its leader-term guard (LeaderElection.fencedCommit); and
// TransactionBatcher shares one etcd transaction between writes submitted in the same tick.
//
// Guards:
//   - a key is at an exact mod_revision ('0' = the key must not exist);
//   - a key exists (whatever its revision);
//   - a key was created at a revision: the leader key's create_revision is the leader's term;
//   - no key under a prefix was created or modified after a revision: etcd's range compare
//     (`mod_revision < R+1` over [prefix, prefixEnd)). It closes the gap a key guard leaves:
//     "delete project P if it has no volumes" must also fail when a volume of P is created
//     between the count and the delete, and a new key is not among the keys a key guard names.
//     Callers read a revision first, count, then commit with "nothing under these prefixes
//     changed since"; a conflict retries.
import { kvOf, type KvClient } from './kv.js';

export { prefixEnd } from './kv.js';

export type Guard =
  /** The key's mod_revision equals `revision`; '0' means the key must not exist. */
  | { readonly key: string; readonly revision: string }
  /** The key exists. */
  | { readonly key: string; readonly exists: true }
  /** The key was created at `createRevision` (the leader key: the leader's term). */
  | { readonly key: string; readonly createRevision: string }
  /** No key under `prefix` was created or modified after revision `unchangedSince`. */
  | { readonly prefix: string; readonly unchangedSince: string };

export type Write =
  /** Puts the value, as JSON. */
  | { readonly put: string; readonly value: unknown }
  | { readonly delete: string }
  /** Deletes every key under the prefix. */
  | { readonly deletePrefix: string };

export interface Transaction {
  readonly guards: readonly Guard[];
  readonly writes: readonly Write[];
}

export interface CommitResult {
  readonly succeeded: boolean;
  /** The store revision after the transaction: the new ETag of every key it put. */
  readonly revision: string;
}

/** Commits a transaction (or its writes alone, when every guard held) to etcd; the caller decides what a refusal means. */
export type Committer = (transaction: Transaction) => Promise<boolean>;

/**
 * Commits the writes if every guard holds. `readWhenRefused`: keys to look up in the same
 * transaction when it is refused, so the caller can tell which guard failed (`existing`: those of
 * them that exist at the refusal).
 */
export function commitTransaction(client: KvClient, transaction: Transaction, readWhenRefused: readonly string[] = []): Promise<CommitResult & { readonly existing: ReadonlySet<string> }> {
  return kvOf(client).commit(transaction, readWhenRefused);
}

/**
 * Commits writes that depend on nothing read: through `fencedCommit` (the leader's, which adds
 * its term guard) when given, else as a plain transaction. Fenced, the only guard is the term,
 * so a refusal is the term's end, and the fenced commit throws NOT_LEADER for it.
 */
export async function commitUnguarded(etcd: KvClient, writes: readonly Write[], fencedCommit?: Committer): Promise<void> {
  const transaction: Transaction = { guards: [], writes };
  if (fencedCommit) await fencedCommit(transaction);
  else await commitTransaction(etcd, transaction);
}

/** etcd's default limit is 128 operations per transaction (--max-txn-ops); guards count too. */
const MAX_OPS_PER_TXN = 120;

interface Submission {
  readonly transaction: Transaction;
  resolve(ok: boolean): void;
  reject(err: unknown): void;
}

/**
 * Groups small transactions into shared etcd transactions. Writers running concurrently (the
 * controller's reconciles) each want a few guards and writes; etcd's cost is per transaction, so
 * submissions arriving in the same tick are committed together. When a shared transaction is
 * refused (one of its guards no longer holds), each submission is committed alone, so one stale
 * record never blocks the others.
 *
 * Each submission gets the outcome it would have had committed alone, in submission order: two
 * submissions share a transaction only when neither writes a key the other writes or guards (a
 * put and a deletePrefix over it count). Otherwise etcd would refuse the shared transaction with
 * "duplicate key given in txn request" (an error for all of them), or a guard would be checked
 * before a write submitted ahead of it. A submission touching such a key starts the next shared
 * transaction, committed after the previous one has; a submission that writes a key twice itself
 * goes alone, so its error is its own.
 */
export class TransactionBatcher {
  private queue: Submission[] = [];
  private scheduled = false;

  constructor(private readonly commit: Committer) {}

  /** True when the transaction committed, false when one of its guards did not hold. */
  submit(transaction: Transaction): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.queue.push({ transaction, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    const queue = this.queue;
    this.queue = [];
    const batches: Submission[][] = [];
    let batch: Submission[] = [];
    let footprint = new Footprint();
    let size = 0;
    for (const submission of queue) {
      const { transaction } = submission;
      const cost = transaction.guards.length + transaction.writes.length;
      const alone = writesOverlap(transaction.writes);
      if (batch.length > 0 && (alone || size + cost > MAX_OPS_PER_TXN || footprint.conflicts(transaction))) {
        batches.push(batch);
        batch = [];
        footprint = new Footprint();
        size = 0;
      }
      batch.push(submission);
      footprint.add(transaction);
      size += alone ? MAX_OPS_PER_TXN : cost;
    }
    if (batch.length > 0) batches.push(batch);
    // In order: a later batch may write what an earlier one writes or guards.
    for (const b of batches) await this.commitBatch(b);
  }

  private async commitBatch(batch: Submission[]): Promise<void> {
    try {
      if (batch.length > 1 && (await this.commit(combined(batch.map((s) => s.transaction))))) {
        for (const s of batch) s.resolve(true);
        return;
      }
      // Alone (or after the shared transaction was refused): each gets its own answer.
      await Promise.all(batch.map(async (s) => s.resolve(await this.commit(s.transaction))));
    } catch (err) {
      for (const s of batch) s.reject(err);
    }
  }
}

/** The keys and prefixes a transaction reaches: a put or delete names a key, a deletePrefix a prefix. */
type Span = { readonly key: string } | { readonly prefix: string };

function spanOfWrite(write: Write): Span {
  if ('put' in write) return { key: write.put };
  if ('delete' in write) return { key: write.delete };
  return { prefix: write.deletePrefix };
}

function spanOfGuard(guard: Guard): Span {
  return 'prefix' in guard ? { prefix: guard.prefix } : { key: guard.key };
}

function overlap(a: Span, b: Span): boolean {
  if ('key' in a && 'key' in b) return a.key === b.key;
  if ('key' in a) return a.key.startsWith((b as { prefix: string }).prefix);
  if ('key' in b) return b.key.startsWith(a.prefix);
  return a.prefix.startsWith(b.prefix) || b.prefix.startsWith(a.prefix);
}

/** Whether the writes put a key twice or put a key another of them deletes (etcd's duplicate key). */
function writesOverlap(writes: readonly Write[]): boolean {
  const spans = writes.map(spanOfWrite);
  return writes.some((write, i) => 'put' in write && spans.some((other, j) => j !== i && overlap(spans[i]!, other)));
}

/** What the transactions of a shared one write and guard. */
class Footprint {
  private readonly writes: Span[] = [];
  private readonly guards: Span[] = [];

  add(transaction: Transaction): void {
    this.writes.push(...transaction.writes.map(spanOfWrite));
    this.guards.push(...transaction.guards.map(spanOfGuard));
  }

  /** Whether the transaction writes what these write or guard, or guards what these write. */
  conflicts(transaction: Transaction): boolean {
    const writes = transaction.writes.map(spanOfWrite);
    const guards = transaction.guards.map(spanOfGuard);
    const hits = (ours: readonly Span[], theirs: readonly Span[]) => ours.some((a) => theirs.some((b) => overlap(a, b)));
    return hits(writes, this.writes) || hits(writes, this.guards) || hits(guards, this.writes);
  }
}

/** One transaction holding every guard and write of the given ones. */
export function combined(transactions: readonly Transaction[]): Transaction {
  return { guards: transactions.flatMap((t) => t.guards), writes: transactions.flatMap((t) => t.writes) };
}

/** The guard that the record is still at the revision it was read at. */
export function unchanged(stored: { readonly key: string; readonly revision: string }): Guard {
  return { key: stored.key, revision: stored.revision };
}

/** The store's current revision (any read returns it in its header). */
export function currentRevision(client: KvClient): Promise<string> {
  return kvOf(client).revision();
}

/** How many times a guarded write is retried when concurrent changes keep invalidating it. */
export const GUARDED_ATTEMPTS = 10;
