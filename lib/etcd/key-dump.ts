// The etcd half of the diagnostic bundle's dump: every key of the cluster's prefix at one
// revision, read in pages (never the whole store in memory), as plain values. What is written
// and what is redacted is the bundle's (control-plane/logs/etcd-dump.ts); this driver only reads.
import type { Etcd3 } from 'etcd3';
import { ROOT } from './keys.js';
import { prefixEnd } from './kv.js';

const PAGE = 500;

/** One key as etcd holds it, its value as text. */
export interface DumpedKey {
  readonly key: string;
  readonly value: string;
  readonly createRevision: string;
  readonly modRevision: string;
  readonly version: string;
  readonly lease: string;
}

/** One page of the dump; every page is read at the first page's revision. */
export interface KeyPage {
  readonly revision: string;
  readonly keys: readonly DumpedKey[];
}

/** The keys a dump reads: the prefix it covers, and its pages, read one at a time as iterated. */
export interface KeyDumpSource {
  readonly prefix: string;
  pages(): AsyncIterable<KeyPage>;
}

/** Every key under the cluster's prefix (`/strata/`). */
export function clusterKeyDump(etcd: Etcd3): KeyDumpSource {
  return { prefix: ROOT, pages: () => keyPages(etcd, ROOT) };
}

async function* keyPages(etcd: Etcd3, root: string): AsyncGenerator<KeyPage> {
  const prefix = Buffer.from(root);
  const end = prefixEnd(root);
  let revision = '0';
  let from = prefix;
  for (;;) {
    const page = await etcd.kv.range({ key: from, range_end: end, limit: PAGE, ...(revision !== '0' ? { revision } : {}) });
    if (revision === '0') revision = String(page.header.revision);
    yield {
      revision,
      keys: page.kvs.map((kv) => ({ key: kv.key.toString(), value: kv.value.toString(), createRevision: kv.create_revision, modRevision: kv.mod_revision, version: kv.version, lease: kv.lease })),
    };
    if (!page.more || page.kvs.length === 0) break;
    from = Buffer.concat([(page.kvs.at(-1) as { key: Buffer }).key, Buffer.alloc(1)]);
  }
}
