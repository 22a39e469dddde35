// Multi-key etcd transactions guarded the way referential integrity between projects,
// policies, credentials and volumes needs. Two kinds of guard:
//   - a key is at an exact mod_revision ('0' = the key must not exist), as RecordStore.commitIf;
//   - no key under a prefix was modified after a revision: etcd's range compare
//     (`mod_revision < R+1` over [prefix, prefixEnd)), which RecordStore does not offer.
// The second closes the gap a plain compare leaves: "delete project P if it has no volumes"
// must also fail when a volume of P is created between the count and the delete, and a new key
// is not among the keys a plain compare names. Callers read a revision first, count, then
// commit with "nothing under these prefixes changed since"; a conflict retries.
import type { Etcd3 } from 'etcd3';
import { CompareResult, CompareTarget, type ICompare, type IRequestOp } from 'etcd3';
import type { IOperation } from 'etcd3/lib/builder.js';
import { keys } from '../../lib/etcd/keys.js';
import { prefixEnd } from '../../lib/etcd/record-store.js';

export type Guard =
  /** The key's mod_revision equals `revision`; '0' means the key must not exist. */
  | { readonly key: string; readonly revision: string }
  /** No key under `prefix` was created or modified after revision `unchangedSince`. */
  | { readonly prefix: string; readonly unchangedSince: string };

export type Write = { readonly put: string; readonly value: unknown } | { readonly delete: string };

export interface CommitResult {
  readonly succeeded: boolean;
  /** The store revision after the transaction: the new ETag of every key it put. */
  readonly revision: string;
}

/** `extraOps`: operations built elsewhere (a prepared event) committed in the same transaction. */
export async function commitGuarded(etcd: Etcd3, guards: readonly Guard[], writes: readonly Write[], extraOps: readonly IOperation[] = []): Promise<CommitResult> {
  const compare: ICompare[] = guards.map((guard) =>
    'key' in guard
      ? { key: Buffer.from(guard.key), target: CompareTarget.Mod, result: CompareResult.Equal, mod_revision: guard.revision }
      : {
          key: Buffer.from(guard.prefix),
          range_end: prefixEnd(guard.prefix),
          target: CompareTarget.Mod,
          result: CompareResult.Less,
          mod_revision: (BigInt(guard.unchangedSince) + 1n).toString(),
        },
  );
  const success: IRequestOp[] = writes.map((write) =>
    'put' in write
      ? { request_put: { key: Buffer.from(write.put), value: Buffer.from(JSON.stringify(write.value)) } }
      : { request_delete_range: { key: Buffer.from(write.delete) } },
  );
  for (const op of extraOps) success.push(await op.op());
  // etcd3's ComparatorBuilder cannot express a range compare; its KV client takes the raw request.
  const result = await etcd.kv.txn({ compare, success, failure: [] });
  return { succeeded: result.succeeded, revision: String(result.header.revision) };
}

/** The store's current revision (any read returns it in its header). */
export async function currentRevision(etcd: Etcd3): Promise<string> {
  const result = await etcd.get(keys.cluster()).exec();
  return String(result.header.revision);
}

/** How many times a guarded write is retried when concurrent changes keep invalidating it. */
export const GUARDED_ATTEMPTS = 10;
