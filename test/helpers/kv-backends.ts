// Where a suite runs its store cases twice: on a real etcd (the integration layer) and on the
// in-memory fake (test/fakes/memory-etcd.ts); and what its fake-only cases need: a concurrent
// writer let in before a guarded commit, and a record that is not JSON.
import { after, before, describe } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { EtcdKv, kvOf, type KvClient } from '../../lib/etcd/kv.js';
import { MemoryEtcd } from '../fakes/memory-etcd.js';
import { startEtcd } from './etcd.js';

/** The store client, and how to stop it. */
export interface KvBackend {
  readonly client: KvClient;
  close(): Promise<void>;
}

/** A private etcd and a client of it, both stopped by close(). */
export async function etcdBackend(): Promise<KvBackend & { readonly client: Etcd3 }> {
  const testEtcd = await startEtcd();
  const etcd = createEtcdClient([testEtcd.endpoint]);
  return {
    client: etcd,
    async close() {
      etcd.close();
      await testEtcd.stop();
    },
  };
}

export async function memoryBackend(): Promise<KvBackend> {
  return { client: new MemoryEtcd(), close: async () => {} };
}

/**
 * A backend for the tests of one suite: opened before them, closed after (read `client` inside
 * the tests), as etcdForSuite() does for etcd alone.
 */
export function backendForSuite(open: () => Promise<KvBackend>): { readonly client: KvClient } {
  const suite = {} as { client: KvClient };
  let close: KvBackend['close'] = async () => {};
  before(async () => ({ client: suite.client, close } = await open()));
  after(() => close());
  return suite;
}

/**
 * Runs `cases` twice, in a suite `${title} on etcd` and in one `${title} on the in-memory fake`,
 * each with its own backend (backendForSuite()).
 */
export function describeOnEveryBackend(title: string, cases: (suite: { readonly client: KvClient }) => void): void {
  describeForEveryBackend(title, (open) => cases(backendForSuite(open)));
}

/**
 * describeOnEveryBackend() for a suite whose harness opens and closes the backend itself
 * (startApiHarnessOn in records.ts): `cases` get how to open it.
 */
export function describeForEveryBackend(title: string, cases: (open: () => Promise<KvBackend>) => void): void {
  for (const [name, open] of [['etcd', etcdBackend], ['the in-memory fake', memoryBackend]] as const) {
    describe(`${title} on ${name}`, () => cases(open));
  }
}

/** Lets a concurrent writer in before each of the first `times` guarded commits; counts the commits it saw. */
export function racing(kv: MemoryEtcd, times: number, write: (n: number) => Promise<unknown>): { commits: () => number } {
  let commits = 0;
  kv.interleave = async () => {
    commits += 1;
    if (commits <= times) await write(commits);
  };
  return { commits: () => commits };
}

/** Puts `text` as it is, not as JSON: a damaged record. */
export async function putText(client: KvClient, key: string, text: string): Promise<void> {
  const kv = kvOf(client);
  if (kv instanceof EtcdKv) await kv.etcd.put(key).value(text);
  else if (kv instanceof MemoryEtcd) kv.putRaw(key, text);
  else throw new Error('putText: neither etcd nor the in-memory fake');
}
