// The one transaction helper against a real etcd: each kind of guard holds and fails as its
// doc says, writes land together or not at all, and the batcher shares one transaction between
// same-tick submissions and falls back to committing each alone when the shared one is refused;
// same-tick submissions reaching a common key (on etcd and on the in-memory etcd) each get the
// outcome they have alone, in submission order.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { etcdForSuite } from '../../test/helpers/etcd.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { kvOf, type KvClient } from './kv.js';
import { commitTransaction, currentRevision, TransactionBatcher, type Transaction, type Write } from './transaction.js';

describe('transaction helper', () => {
  const suite = etcdForSuite();
  let n = 0;
  /** A fresh key (or prefix) per test: tests share one etcd. */
  const fresh = (what: string) => `/strata/test/tx/${what}-${++n}`;
  const read = async (key: string) => JSON.parse((await suite.client.get(key).string()) ?? 'null') as unknown;
  const modRevision = async (key: string) => (await suite.client.get(key).exec()).kvs[0]?.mod_revision ?? '0';
  const put = (key: string, value: unknown): Write => ({ put: key, value });

  it('a key at a revision: commits while the key is at it, is refused once it moved', async () => {
    const { client } = suite;
    const key = fresh('at-revision');
    const created = await commitTransaction(client, { guards: [], writes: [put(key, 1)] });
    assert.equal(created.succeeded, true);
    assert.equal(await modRevision(key), created.revision, 'the result is the revision the write made');
    assert.equal((await commitTransaction(client, { guards: [{ key, revision: created.revision }], writes: [put(key, 2)] })).succeeded, true);
    const stale = await commitTransaction(client, { guards: [{ key, revision: created.revision }], writes: [put(key, 3)] });
    assert.equal(stale.succeeded, false);
    assert.equal(await read(key), 2);
  });

  it("a key at revision '0': commits while the key is absent, is refused once it exists", async () => {
    const { client } = suite;
    const key = fresh('absent');
    const other = fresh('other');
    assert.equal((await commitTransaction(client, { guards: [{ key, revision: '0' }], writes: [put(key, 'first'), put(other, 'with it')] })).succeeded, true);
    const again = await commitTransaction(client, { guards: [{ key, revision: '0' }], writes: [put(key, 'second'), { delete: other }] });
    assert.equal(again.succeeded, false);
    assert.equal(await read(key), 'first');
    assert.equal(await read(other), 'with it', 'a refused transaction writes nothing');
  });

  it('a key exists: refused while absent, and the keys to read tell which exist at the refusal', async () => {
    const { client } = suite;
    const key = fresh('exists');
    const present = fresh('present');
    await client.put(present).value('{}');
    const refused = await commitTransaction(client, { guards: [{ key, exists: true }], writes: [put(fresh('x'), 1)] }, [key, present]);
    assert.equal(refused.succeeded, false);
    assert.deepEqual([...refused.existing], [present]);
    await client.put(key).value('{}');
    const committed = await commitTransaction(client, { guards: [{ key, exists: true }], writes: [] }, [key]);
    assert.equal(committed.succeeded, true);
    assert.equal(committed.existing.size, 0, 'nothing is read when the transaction commits');
  });

  it('a key created at a revision (the leader term): holds across updates, refused once the key is created again', async () => {
    const { client } = suite;
    const key = fresh('leader');
    await client.put(key).value('"term 1"');
    const term = (await client.get(key).exec()).kvs[0]!.create_revision;
    await client.put(key).value('"term 1, updated"');
    const target = fresh('fenced');
    assert.equal((await commitTransaction(client, { guards: [{ key, createRevision: term }], writes: [put(target, 'in term')] })).succeeded, true);
    await client.delete().key(key);
    await client.put(key).value('"term 2"');
    assert.equal((await commitTransaction(client, { guards: [{ key, createRevision: term }], writes: [put(target, 'stale')] })).succeeded, false);
    assert.equal(await read(target), 'in term');
  });

  it('a prefix unchanged since a revision: a key created or changed under it afterwards refuses the transaction', async () => {
    const { client } = suite;
    const prefix = `${fresh('prefix')}/`;
    await client.put(`${prefix}a`).value('1');
    const checkedAt = await currentRevision(client);
    const target = fresh('guarded');
    const guarded: Transaction = { guards: [{ prefix, unchangedSince: checkedAt }], writes: [put(target, 'written')] };
    // A key outside the prefix that sorts right after it does not count.
    await client.put(`${prefix.slice(0, -1)}0`).value('1');
    assert.equal((await commitTransaction(client, guarded)).succeeded, true);
    const checkedAgain = await currentRevision(client);
    await client.put(`${prefix}b`).value('concurrent create');
    const refused = await commitTransaction(client, { guards: [{ prefix, unchangedSince: checkedAgain }], writes: [put(target, 'stale')] });
    assert.equal(refused.succeeded, false);
    assert.equal(await read(target), 'written');
  });

  it('deletes a prefix, and no key beside it', async () => {
    const { client } = suite;
    const prefix = `${fresh('doomed')}/`;
    const beside = `${prefix.slice(0, -1)}-kept`;
    await Promise.all([client.put(`${prefix}a`).value('1'), client.put(`${prefix}b/c`).value('1'), client.put(beside).value('1')]);
    await commitTransaction(client, { guards: [], writes: [{ deletePrefix: prefix }] });
    assert.deepEqual(await client.getAll().prefix(prefix).keys(), []);
    assert.equal(await read(beside), 1);
  });

  it('the batcher commits same-tick submissions in one transaction', async () => {
    const { client } = suite;
    const commits: Transaction[] = [];
    const batcher = new TransactionBatcher(async (t) => {
      commits.push(t);
      return (await commitTransaction(client, t)).succeeded;
    });
    const keys = [fresh('batched'), fresh('batched'), fresh('batched')];
    const results = await Promise.all(keys.map((key) => batcher.submit({ guards: [{ key, revision: '0' }], writes: [put(key, key)] })));
    assert.deepEqual(results, [true, true, true]);
    assert.equal(commits.length, 1);
    assert.equal(commits[0]!.guards.length, 3);
    for (const key of keys) assert.equal(await read(key), key);
  });

  it('the batcher splits under etcd\'s operation limit', async () => {
    const { client } = suite;
    const sizes: number[] = [];
    const batcher = new TransactionBatcher(async (t) => {
      sizes.push(t.guards.length + t.writes.length);
      return (await commitTransaction(client, t)).succeeded;
    });
    const prefix = fresh('many');
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) => batcher.submit({ guards: [{ key: `${prefix}/${i}`, revision: '0' }], writes: [put(`${prefix}/${i}`, i)] })));
    assert.ok(results.every((r) => r));
    assert.ok(sizes.length >= 2 && sizes.every((s) => s <= 128), JSON.stringify(sizes));
    assert.equal(sizes.reduce((a, b) => a + b, 0), 200);
  });

  it('the batcher commits each alone when the shared transaction is refused: only the stale one fails', async () => {
    const { client } = suite;
    let commits = 0;
    const batcher = new TransactionBatcher(async (t) => {
      commits++;
      return (await commitTransaction(client, t)).succeeded;
    });
    const taken = fresh('taken');
    await client.put(taken).value('"already"');
    const [a, b] = [fresh('a'), fresh('b')];
    const results = await Promise.all([
      batcher.submit({ guards: [{ key: a, revision: '0' }], writes: [put(a, 'a')] }),
      batcher.submit({ guards: [{ key: taken, revision: '0' }], writes: [put(taken, 'stale')] }),
      batcher.submit({ guards: [{ key: b, revision: '0' }], writes: [put(b, 'b')] }),
    ]);
    assert.deepEqual(results, [true, false, true]);
    assert.equal(commits, 4, 'the shared transaction, then each alone');
    assert.equal(await read(a), 'a');
    assert.equal(await read(b), 'b');
    assert.equal(await read(taken), 'already');
  });

  it('the batcher rejects every submission of a batch whose commit throws', async () => {
    const { client } = suite;
    const batcher = new TransactionBatcher(() => Promise.reject(new Error('not the leader')));
    const results = await Promise.allSettled([batcher.submit({ guards: [], writes: [] }), batcher.submit({ guards: [], writes: [] })]);
    assert.deepEqual(results.map((r) => r.status), ['rejected', 'rejected']);
  });

  batcherOverlapCases('etcd', () => suite.client);
});

/** Same-tick submissions that reach a common key: each gets the outcome it has alone, in submission order. */
function batcherOverlapCases(backend: string, clientOf: () => KvClient): void {
  describe(`the batcher, submissions reaching a common key, on ${backend}`, () => {
    let n = 0;
    const fresh = (what: string) => `/strata/test/tx-overlap/${what}-${++n}`;
    const put = (key: string, value: unknown): Write => ({ put: key, value });
    const read = async (key: string) => {
      const stored = await kvOf(clientOf()).get(key);
      return stored ? (JSON.parse(stored.value.toString()) as unknown) : undefined;
    };
    /** A batcher over the client, recording what it commits. */
    const batcherOn = () => {
      const commits: Transaction[] = [];
      const batcher = new TransactionBatcher(async (t) => {
        commits.push(t);
        return (await commitTransaction(clientOf(), t)).succeeded;
      });
      return { batcher, commits };
    };

    it('two puts of one key: both commit, in successive transactions, the later value stays; the others share the first', async () => {
      const { batcher, commits } = batcherOn();
      const [key, other] = [fresh('same'), fresh('other')];
      const results = await Promise.all([
        batcher.submit({ guards: [], writes: [put(key, 'first')] }),
        batcher.submit({ guards: [], writes: [put(key, 'second')] }),
        batcher.submit({ guards: [{ key: other, revision: '0' }], writes: [put(other, 'other')] }),
      ]);
      assert.deepEqual(results, [true, true, true]);
      assert.equal(await read(key), 'second');
      assert.equal(await read(other), 'other');
      assert.deepEqual(commits.map((t) => t.writes.length), [1, 2], 'the first alone, then the second with the one after it');
    });

    it('a put under another\'s deletePrefix: the delete, then the put', async () => {
      const { batcher } = batcherOn();
      const prefix = `${fresh('dir')}/`;
      await commitTransaction(clientOf(), { guards: [], writes: [put(`${prefix}old`, 'old')] });
      const results = await Promise.all([
        batcher.submit({ guards: [], writes: [{ deletePrefix: prefix }] }),
        batcher.submit({ guards: [], writes: [put(`${prefix}new`, 'new')] }),
      ]);
      assert.deepEqual(results, [true, true]);
      assert.equal(await read(`${prefix}old`), undefined);
      assert.equal(await read(`${prefix}new`), 'new');
    });

    it('a guard on a key written ahead of it is checked after that write: it is refused alone, the others commit', async () => {
      const { batcher } = batcherOn();
      const [key, guarded, other] = [fresh('created'), fresh('guarded'), fresh('other')];
      const results = await Promise.all([
        batcher.submit({ guards: [{ key, revision: '0' }], writes: [put(key, 'created')] }),
        batcher.submit({ guards: [{ key, revision: '0' }], writes: [put(guarded, 'stale')] }),
        batcher.submit({ guards: [], writes: [put(other, 'other')] }),
      ]);
      assert.deepEqual(results, [true, false, true]);
      assert.equal(await read(guarded), undefined);
      assert.equal(await read(other), 'other');
    });

    it('a submission that puts a key twice itself fails alone; the others commit', async () => {
      const { batcher } = batcherOn();
      const [a, twice, b] = [fresh('a'), fresh('twice'), fresh('b')];
      const results = await Promise.allSettled([
        batcher.submit({ guards: [], writes: [put(a, 'a')] }),
        batcher.submit({ guards: [], writes: [put(twice, 1), put(twice, 2)] }),
        batcher.submit({ guards: [], writes: [put(b, 'b')] }),
      ]);
      assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
      assert.match(String((results[1] as PromiseRejectedResult).reason), /duplicate key/);
      assert.equal(await read(a), 'a');
      assert.equal(await read(b), 'b');
      assert.equal(await read(twice), undefined);
    });
  });
}

const memory = new MemoryEtcd();
batcherOverlapCases('the in-memory etcd', () => memory);
