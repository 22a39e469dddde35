// Groups the controller's fenced writes into shared etcd transactions. Reconciles run
// concurrently and each wants a small transaction (a few compares, a few ops); etcd's cost is
// per transaction, so submissions arriving in the same tick are committed together. When a
// shared transaction fails (one of its compares no longer holds), each submission is committed
// alone, so one stale volume never blocks the others.
import type { IOperation } from 'etcd3/lib/builder.js';
import type { FenceCompare } from '../leadership/leader-election.js';

/** etcd's default limit is 128 operations per transaction (--max-txn-ops); compares count too. */
const MAX_OPS_PER_TXN = 120;

export type FencedCommit = (compares: readonly FenceCompare[], ops: IOperation[]) => Promise<boolean>;

interface Submission {
  readonly compares: readonly FenceCompare[];
  readonly ops: IOperation[];
  resolve(ok: boolean): void;
  reject(err: unknown): void;
}

export class TxnBatcher {
  private queue: Submission[] = [];
  private scheduled = false;

  constructor(private readonly commit: FencedCommit) {}

  submit(compares: readonly FenceCompare[], ops: IOperation[]): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.queue.push({ compares, ops, resolve, reject });
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
    let size = 0;
    for (const submission of queue) {
      const cost = submission.compares.length + submission.ops.length;
      if (batch.length > 0 && size + cost > MAX_OPS_PER_TXN) {
        batches.push(batch);
        batch = [];
        size = 0;
      }
      batch.push(submission);
      size += cost;
    }
    if (batch.length > 0) batches.push(batch);
    await Promise.all(batches.map((b) => this.commitBatch(b)));
  }

  private async commitBatch(batch: Submission[]): Promise<void> {
    try {
      if (batch.length > 1 && (await this.commit(batch.flatMap((s) => s.compares), batch.flatMap((s) => s.ops)))) {
        for (const s of batch) s.resolve(true);
        return;
      }
      // Alone (or after the shared transaction failed): each gets its own answer.
      await Promise.all(batch.map(async (s) => s.resolve(await this.commit(s.compares, s.ops))));
    } catch (err) {
      for (const s of batch) s.reject(err);
    }
  }
}
