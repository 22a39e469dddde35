// The contract of the stores' seam (lib/etcd/kv.ts), run twice: against a real etcd (EtcdKv) and
// against the in-memory fake (MemoryEtcd). Every case is the same code on both, so the fake is
// proven to keep etcd's revision and guard semantics for what the stores use.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EtcdKv, type Kv, type KvEvent } from '../../lib/etcd/kv.js';
import { PrefixMirror, type MirrorChange } from '../../lib/etcd/prefix-mirror.js';
import type { Transaction, Write } from '../../lib/etcd/transaction.js';
import { etcdForSuite } from '../helpers/etcd.js';
import { silentLogger } from '../helpers/silent-logger.js';
import { MemoryEtcd } from './memory-etcd.js';

const put = (key: string, value: unknown): Write => ({ put: key, value });

function contract(backend: string, kvOf: () => Kv): void {
  describe(`the store seam on ${backend}`, () => {
    let n = 0;
    /** A fresh key (or prefix) per case: cases share one keyspace. */
    const fresh = (what: string) => `/strata/test/seam/${what}-${++n}`;
    const write = async (kv: Kv, ...writes: Write[]) => {
      const result = await kv.commit({ guards: [], writes });
      assert.equal(result.succeeded, true);
      return result.revision;
    };
    const commits = async (kv: Kv, transaction: Transaction) => (await kv.commit(transaction)).succeeded;
    const read = async (kv: Kv, key: string) => {
      const stored = await kv.get(key);
      return stored ? (JSON.parse(stored.value.toString()) as unknown) : undefined;
    };

    it('a transaction that changes keys makes one revision, whatever it writes; its result is that revision', async () => {
      const kv = kvOf();
      const [a, b] = [fresh('a'), fresh('b')];
      const before = BigInt(await kv.revision());
      const made = await write(kv, put(a, 1), put(b, 2));
      assert.equal(BigInt(made), before + 1n);
      assert.equal(await kv.revision(), made);
      for (const key of [a, b]) {
        const stored = (await kv.get(key))!;
        assert.equal(stored.modRevision, made);
        assert.equal(stored.createRevision, made);
      }
    });

    it('create_revision stays across updates and is new after a delete and put; an absent key reads as null', async () => {
      const kv = kvOf();
      const key = fresh('lives');
      const created = await write(kv, put(key, 'v1'));
      const updated = await write(kv, put(key, 'v2'));
      assert.deepEqual([(await kv.get(key))!.createRevision, (await kv.get(key))!.modRevision], [created, updated]);
      await write(kv, { delete: key });
      assert.equal(await kv.get(key), null);
      const again = await write(kv, put(key, 'v3'));
      assert.deepEqual([(await kv.get(key))!.createRevision, (await kv.get(key))!.modRevision], [again, again]);
    });

    it('no revision is made by a refused transaction, nor by one whose deletes found nothing', async () => {
      const kv = kvOf();
      const key = fresh('nothing');
      const before = await kv.revision();
      const refused = await kv.commit({ guards: [{ key, exists: true }], writes: [put(key, 1)] });
      assert.deepEqual([refused.succeeded, refused.revision], [false, before]);
      const empty = await kv.commit({ guards: [], writes: [{ delete: key }, { deletePrefix: `${key}/` }] });
      assert.deepEqual([empty.succeeded, empty.revision], [true, before]);
      assert.equal(await kv.revision(), before);
    });

    it("a key at a revision: holds at it, refused once the key moved; '0' holds while the key is absent, again after its delete", async () => {
      const kv = kvOf();
      const key = fresh('at');
      assert.equal(await commits(kv, { guards: [{ key, revision: '0' }], writes: [put(key, 1)] }), true);
      const at = (await kv.get(key))!.modRevision;
      assert.equal(await commits(kv, { guards: [{ key, revision: '0' }], writes: [put(key, 'again')] }), false);
      assert.equal(await commits(kv, { guards: [{ key, revision: at }], writes: [put(key, 2)] }), true);
      assert.equal(await commits(kv, { guards: [{ key, revision: at }], writes: [put(key, 3)] }), false);
      assert.equal(await read(kv, key), 2);
      await write(kv, { delete: key });
      assert.equal(await commits(kv, { guards: [{ key, revision: '0' }], writes: [put(key, 4)] }), true);
    });

    it('a key exists: refused while absent, and the keys to read say which exist at the refusal', async () => {
      const kv = kvOf();
      const [key, present, target] = [fresh('exists'), fresh('present'), fresh('target')];
      await write(kv, put(present, {}));
      const refused = await kv.commit({ guards: [{ key, exists: true }], writes: [put(target, 1)] }, [key, present]);
      assert.equal(refused.succeeded, false);
      assert.deepEqual([...refused.existing], [present]);
      assert.equal(await kv.get(target), null, 'a refused transaction writes nothing');
      await write(kv, put(key, {}));
      const committed = await kv.commit({ guards: [{ key, exists: true }], writes: [put(target, 1)] }, [key]);
      assert.deepEqual([committed.succeeded, committed.existing.size], [true, 0]);
    });

    it('a key created at a revision (a leader term): holds across updates, refused once the key is created again or is absent', async () => {
      const kv = kvOf();
      const [key, target] = [fresh('leader'), fresh('fenced')];
      const term = await write(kv, put(key, 'term 1'));
      await write(kv, put(key, 'term 1, updated'));
      assert.equal(await commits(kv, { guards: [{ key, createRevision: term }], writes: [put(target, 'in term')] }), true);
      await write(kv, { delete: key });
      assert.equal(await commits(kv, { guards: [{ key, createRevision: term }], writes: [put(target, 'no leader')] }), false);
      await write(kv, put(key, 'term 2'));
      assert.equal(await commits(kv, { guards: [{ key, createRevision: term }], writes: [put(target, 'stale')] }), false);
      assert.equal(await read(kv, target), 'in term');
    });

    it('a prefix unchanged since R: holds for changes up to R and beside the prefix, refused by a create or an update under it after R', async () => {
      const kv = kvOf();
      const prefix = `${fresh('prefix')}/`;
      const target = fresh('guarded');
      const empty = await kv.revision();
      assert.equal(await commits(kv, { guards: [{ prefix, unchangedSince: empty }], writes: [] }), true, 'an empty range holds');
      const checkedAt = await write(kv, put(`${prefix}a`, 1));
      await write(kv, put(`${prefix.slice(0, -1)}0`, 'sorts right after the prefix'), put(`${prefix.slice(0, -1)}`, 'the prefix without its slash'));
      assert.equal(await commits(kv, { guards: [{ prefix, unchangedSince: checkedAt }], writes: [put(target, 1)] }), true, 'a key changed at R itself');
      const beforeCreate = await kv.revision();
      await write(kv, put(`${prefix}b/deep`, 'created'));
      assert.equal(await commits(kv, { guards: [{ prefix, unchangedSince: beforeCreate }], writes: [put(target, 2)] }), false);
      const beforeUpdate = await kv.revision();
      await write(kv, put(`${prefix}a`, 'updated'));
      assert.equal(await commits(kv, { guards: [{ prefix, unchangedSince: beforeUpdate }], writes: [put(target, 3)] }), false);
      assert.equal(await read(kv, target), 1);
    });

    it("a prefix unchanged since R does not see a key deleted after R: etcd's range compare reads live keys only", async () => {
      const kv = kvOf();
      const prefix = `${fresh('deleted')}/`;
      await write(kv, put(`${prefix}a`, 1), put(`${prefix}b`, 1));
      const checkedAt = await kv.revision();
      await write(kv, { delete: `${prefix}a` });
      assert.equal(await commits(kv, { guards: [{ prefix, unchangedSince: checkedAt }], writes: [] }), true);
      await write(kv, { deletePrefix: prefix });
      assert.equal(await commits(kv, { guards: [{ prefix, unchangedSince: checkedAt }], writes: [] }), true);
    });

    it('deletes a prefix and no key beside it; ranges are in key order, page with startAfter and limit, and count', async () => {
      const kv = kvOf();
      const prefix = `${fresh('range')}/`;
      const beside = `${prefix.slice(0, -1)}-kept`;
      await write(kv, put(`${prefix}c`, 3), put(`${prefix}a`, 1), put(`${prefix}b/x`, 2), put(beside, 0));
      assert.deepEqual((await kv.range(prefix)).map((k) => k.key), [`${prefix}a`, `${prefix}b/x`, `${prefix}c`]);
      assert.deepEqual(await kv.keys(prefix), [`${prefix}a`, `${prefix}b/x`, `${prefix}c`]);
      assert.equal(await kv.count(prefix), 3);
      assert.deepEqual((await kv.range(prefix, { startAfter: `${prefix}a`, limit: 1 })).map((k) => k.key), [`${prefix}b/x`]);
      assert.deepEqual((await kv.range(prefix, { startAfter: `${prefix}b/x` })).map((k) => k.key), [`${prefix}c`]);
      await write(kv, { deletePrefix: prefix });
      assert.deepEqual(await kv.keys(prefix), []);
      assert.equal(await kv.count(prefix), 0);
      assert.equal(await read(kv, beside), 0);
    });

    it('a key put twice, or put and deleted, in one transaction is an error; deletes may overlap', async () => {
      const kv = kvOf();
      const prefix = `${fresh('dup')}/`;
      const key = `${prefix}k`;
      await assert.rejects(kv.commit({ guards: [], writes: [put(key, 1), put(key, 2)] }), /duplicate key/);
      await assert.rejects(kv.commit({ guards: [], writes: [put(key, 1), { delete: key }] }), /duplicate key/);
      await assert.rejects(kv.commit({ guards: [], writes: [{ deletePrefix: prefix }, put(key, 1)] }), /duplicate key/);
      assert.equal(await kv.get(key), null);
      await write(kv, put(key, 1));
      await write(kv, { delete: key }, { deletePrefix: prefix });
      assert.equal(await kv.get(key), null);
    });

    it("more than etcd's 128 operations in a transaction is an error", async () => {
      const kv = kvOf();
      const prefix = fresh('many');
      const writes = Array.from({ length: 129 }, (_, i) => put(`${prefix}/${i}`, i));
      await assert.rejects(kv.commit({ guards: [], writes }), /too many operations/);
      await write(kv, ...writes.slice(0, 128));
      assert.equal((await kv.keys(`${prefix}/`)).length, 128);
    });

    it('a snapshot reads every prefix at one revision', async () => {
      const kv = kvOf();
      const [p, q] = [`${fresh('snap')}/`, `${fresh('snap')}/`];
      const at = await write(kv, put(`${p}1`, 1), put(`${q}1`, 2));
      await write(kv, put(`${q}2`, 3));
      const { revision, ranges } = await kv.snapshot([p, q]);
      assert.equal(revision, await kv.revision());
      assert.deepEqual(ranges.map((r) => r.map((k) => [k.key, k.modRevision])), [[[`${p}1`, at]], [[`${q}1`, at], [`${q}2`, revision]]]);
    });

    it('a snapshot reads an exact key alone, not the keys that start with it; an absent one as no key', async () => {
      const kv = kvOf();
      const [key, p] = [fresh('exact'), `${fresh('snap')}/`];
      const at = await write(kv, put(key, 1), put(`${key}-ca`, 'secret'), put(`${key}/under`, 2), put(`${p}1`, 3));
      const { revision, ranges } = await kv.snapshot([{ key }, p, { key: `${key}-absent` }]);
      assert.equal(revision, at);
      assert.deepEqual(ranges.map((r) => r.map((k) => [k.key, k.modRevision])), [[[key, at]], [[`${p}1`, at]], []]);
    });

    it('a watch replays the changes from its start revision under its prefix, then reports new ones; a delete carries its revision', async () => {
      const kv = kvOf();
      const prefix = `${fresh('watched')}/`;
      const created = await write(kv, put(`${prefix}a`, 1));
      await write(kv, put(`${prefix.slice(0, -1)}-beside`, 0));
      const seen: KvEvent[] = [];
      let wake: () => void = () => undefined;
      const watch = await kv.watch(prefix, created, { events: (events) => (seen.push(...events), wake()), error: (err) => assert.fail(err) });
      const updated = await write(kv, put(`${prefix}a`, 2), put(`${prefix}b`, 3));
      const deleted = await write(kv, { delete: `${prefix}a` });
      while (seen.length < 4) await new Promise<void>((resolve) => (wake = resolve));
      await watch.cancel();
      assert.deepEqual(
        seen.map((e) => [e.type, e.key, e.type === 'put' ? JSON.parse(e.value.toString()) : null, e.modRevision, e.createRevision]),
        [
          ['put', `${prefix}a`, 1, created, created],
          ['put', `${prefix}a`, 2, updated, created],
          ['put', `${prefix}b`, 3, updated, updated],
          ['delete', `${prefix}a`, null, deleted, '0'],
        ],
      );
    });

    it('a read between bounds [start, end) is in key order, stops at its limit and says there is more', async () => {
      const kv = kvOf();
      const prefix = `${fresh('bounds')}/`;
      await write(kv, put(`${prefix}a`, 1), put(`${prefix}b`, 2), put(`${prefix}c`, 3), put(`${prefix}d`, 4));
      const bounds = { start: `${prefix}b`, end: `${prefix}d` };
      const all = await kv.rangeIn(bounds);
      assert.deepEqual(all.kvs.map((k) => [k.key, JSON.parse(k.value.toString())]), [[`${prefix}b`, 2], [`${prefix}c`, 3]]);
      assert.equal(all.more, false);
      const one = await kv.rangeIn(bounds, 1);
      assert.deepEqual(one.kvs.map((k) => k.key), [`${prefix}b`]);
      assert.equal(one.more, true);
      const exact = await kv.rangeIn(bounds, 2);
      assert.equal(exact.more, false, 'a limit the keys fill exactly leaves nothing more');
      assert.deepEqual((await kv.rangeIn({ start: `${prefix}b\0`, end: `${prefix}z` }, 10)).kvs.map((k) => k.key), [`${prefix}c`, `${prefix}d`], 'after a key: its NUL successor');
      assert.deepEqual(await kv.keysIn(bounds, 1), [`${prefix}b`]);
      assert.deepEqual(await kv.keysIn({ start: prefix, end: `${prefix}\xff` }), [`${prefix}a`, `${prefix}b`, `${prefix}c`, `${prefix}d`]);
      assert.equal(await kv.countIn(bounds), 2);
      assert.equal(await kv.countIn({ start: `${prefix}e`, end: `${prefix}z` }), 0);
    });

    it('a ranged delete removes [start, end), says how many went, and makes a revision only when it found keys', async () => {
      const kv = kvOf();
      const prefix = `${fresh('delete-bounds')}/`;
      await write(kv, put(`${prefix}a`, 1), put(`${prefix}b`, 2), put(`${prefix}c`, 3));
      const before = BigInt(await kv.revision());
      assert.equal(await kv.deleteIn({ start: `${prefix}b`, end: `${prefix}z` }), 2);
      assert.equal(BigInt(await kv.revision()), before + 1n);
      assert.deepEqual(await kv.keys(prefix), [`${prefix}a`]);
      assert.equal(await kv.deleteIn({ start: `${prefix}b`, end: `${prefix}z` }), 0);
      assert.equal(BigInt(await kv.revision()), before + 1n, 'nothing found: no revision');
    });

    // --- Reads of what changed (InventoryReader's incremental reads) ---

    it('one key and several prefixes at one revision: the key alone (null when absent), each prefix in key order', async () => {
      const kv = kvOf();
      const [key, p, q] = [fresh('single'), `${fresh('with')}/`, `${fresh('with')}/`];
      const at = await write(kv, put(key, 'k'), put(`${key}-beside`, 'not the key'), put(`${p}b`, 2), put(`${p}a`, 1));
      const read = await kv.readKeyAndPrefixes(key, [p, q]);
      assert.equal(read.revision, at);
      assert.deepEqual([read.key?.key, JSON.parse(read.key!.value.toString()), read.key?.modRevision], [key, 'k', at]);
      assert.deepEqual(read.ranges.map((r) => r.map((k) => k.key)), [[`${p}a`, `${p}b`], []]);
      assert.equal((await kv.readKeyAndPrefixes(fresh('absent'), [])).key, null);
    });

    it('what changed after R, at one revision: per prefix the keys modified after R in key order, and every key counted; a delete shows in the count alone', async () => {
      const kv = kvOf();
      const [key, p, q] = [fresh('cluster'), `${fresh('changes')}/`, `${fresh('changes')}/`];
      await write(kv, put(`${p}a`, 1), put(`${p}b`, 1), put(`${q}a`, 1));
      const checkedAt = await write(kv, put(key, 'k'));
      const updated = await write(kv, put(`${p}c`, 2), put(`${p}a`, 2));
      const deleted = await write(kv, { delete: `${q}a` });
      const changes = await kv.changesAfter(key, [p, q], checkedAt);
      assert.equal(changes.revision, deleted);
      assert.equal(changes.key?.modRevision, checkedAt, 'the key is read whatever its revision');
      assert.deepEqual(changes.changed.map((r) => r.map((k) => [k.key, k.modRevision])), [[[`${p}a`, updated], [`${p}c`, updated]], []]);
      assert.deepEqual(changes.counts, [3, 0]);
      const none = await kv.changesAfter(key, [p, q], deleted);
      assert.deepEqual([none.changed, none.counts], [[[], []], [3, 0]]);
    });

    it('a prefix\'s keys at a past revision: as they were then, whatever was created or deleted since; a revision not reached yet is an error', async () => {
      const kv = kvOf();
      const prefix = `${fresh('past')}/`;
      await write(kv, put(`${prefix}b`, 1), put(`${prefix}a`, 1), put(`${prefix.slice(0, -1)}-beside`, 0));
      const then = await write(kv, put(`${prefix}c`, 1), { delete: `${prefix}b` });
      await write(kv, put(`${prefix}d`, 1), { delete: `${prefix}a` });
      await write(kv, put(`${prefix}b`, 2));
      assert.deepEqual(await kv.keysAt(prefix, then), [`${prefix}a`, `${prefix}c`]);
      assert.deepEqual(await kv.keysAt(prefix, await kv.revision()), [`${prefix}b`, `${prefix}c`, `${prefix}d`]);
      await assert.rejects(kv.keysAt(prefix, String(BigInt(await kv.revision()) + 1n)), /future revision/);
    });

    it('the watched state (PrefixMirror) runs on it: loads, follows, indexes, and is current after catchUp', async () => {
      const kv = kvOf();
      const prefix = `${fresh('state')}/`;
      await write(kv, put(`${prefix}a`, { name: 'x' }));
      const state = new PrefixMirror(kv, [prefix], silentLogger(), { everyRevision: true });
      state.addIndex('name', prefix, (_key, record) => (record as { name: string }).name);
      const heard: MirrorChange[] = [];
      state.onChange((changes) => heard.push(...changes));
      await state.start();
      try {
        assert.deepEqual([...state.lookup('name', 'x')], [`${prefix}a`]);
        const revision = await write(kv, put(`${prefix}b`, { name: 'x' }), { delete: `${prefix}a` });
        await state.catchUp();
        assert.equal(state.get(prefix, `${prefix}b`)?.revision, revision);
        assert.equal(state.get(prefix, `${prefix}a`), undefined);
        assert.deepEqual([...state.lookup('name', 'x')], [`${prefix}b`]);
        assert.deepEqual(heard, [
          { prefix, key: `${prefix}b`, deleted: false },
          { prefix, key: `${prefix}a`, deleted: true },
        ]);
      } finally {
        await state.stop();
      }
    });

    it('the watched state mirrors an exact key alone: the keys that start with it are neither loaded, followed nor reported', async () => {
      const kv = kvOf();
      const [key, prefix] = [fresh('record'), `${fresh('state')}/`];
      await write(kv, put(key, { v: 1 }), put(`${key}-ca`, { secret: 1 }));
      const state = new PrefixMirror(kv, [{ key }, prefix], silentLogger(), { everyRevision: true });
      const heard: MirrorChange[] = [];
      state.onChange((changes) => heard.push(...changes));
      await state.start();
      try {
        assert.ok(state.mirrors(key));
        assert.deepEqual([...state.all(key).keys()], [key]);
        const revision = await write(kv, put(key, { v: 2 }), put(`${key}-ca`, { secret: 2 }), put(`${key}/under`, 0), put(`${prefix}a`, 1));
        await state.catchUp();
        assert.equal(state.revision, BigInt(revision));
        assert.deepEqual([...state.all(key)].map(([k, e]) => [k, e.record, e.revision]), [[key, { v: 2 }, revision]]);
        assert.deepEqual([...state.all(prefix).keys()], [`${prefix}a`]);
        assert.deepEqual(heard, [
          { prefix: key, key, deleted: false },
          { prefix, key: `${prefix}a`, deleted: false },
        ]);
        await write(kv, { delete: key });
        await state.catchUp();
        assert.equal(state.get(key, key), undefined);
        assert.deepEqual(heard.at(-1), { prefix: key, key, deleted: true });
        assert.throws(() => new PrefixMirror(kv, [key, { key }], silentLogger()), /mirrored twice/);
      } finally {
        await state.stop();
      }
    });

    it('a change count moves per mirrored range: on its own key changes (an exact key alone, not the keys it begins), deletes and loads, not on another range', async () => {
      const kv = kvOf();
      const [single, prefix] = [fresh('record'), `${fresh('others')}/`];
      await write(kv, put(single, { name: 'held' }), put(`${single}-ca`, { privateKey: 'never held' }), put(`${prefix}a`, 1));
      const state = new PrefixMirror(kv, [prefix, { key: single }], silentLogger(), { everyRevision: true });
      await state.start();
      try {
        assert.ok(state.mirrors(single));
        assert.deepEqual([...state.all(single).keys()], [single], 'the load keeps the key alone');
        assert.deepEqual(state.get(single, single)?.record, { name: 'held' });
        const [singleLoaded, prefixLoaded] = [state.changeCount(single), state.changeCount(prefix)];
        assert.ok(singleLoaded > 0 && prefixLoaded > 0, 'the load counts as a change');
        await write(kv, put(`${single}-ca`, { privateKey: 'rotated' }), put(`${single}/below`, 2));
        await state.catchUp();
        assert.deepEqual([...state.all(single).keys()], [single], 'the watch keeps the key alone');
        assert.equal(state.changeCount(single), singleLoaded, 'keys beside it change nothing');
        const updated = await write(kv, put(single, { name: 'renamed' }));
        await state.catchUp();
        assert.equal(state.get(single, single)?.revision, updated);
        assert.equal(state.changeCount(single), singleLoaded + 1);
        assert.equal(state.changeCount(prefix), prefixLoaded, 'another prefix\'s count stays');
        await write(kv, { delete: `${prefix}a` });
        await state.catchUp();
        assert.equal(state.changeCount(prefix), prefixLoaded + 1, 'a delete moves it');
        await write(kv, { delete: single });
        await state.catchUp();
        assert.equal(state.get(single, single), undefined);
      } finally {
        await state.stop();
      }
    });
  });
}

const suite = etcdForSuite();
contract('etcd', () => new EtcdKv(suite.client));
const memory = new MemoryEtcd();
contract('the in-memory fake', () => memory);

describe('the in-memory fake alone', () => {
  it('a failed watch (failWatches) makes the watched state read everything again and say so', async () => {
    const kv = new MemoryEtcd();
    const state = new PrefixMirror(kv, ['/strata/x/'], silentLogger(), { everyRevision: true });
    const reloads: boolean[] = [];
    state.onChange((_changes, reloaded) => reloads.push(reloaded));
    await state.start();
    try {
      await kv.put('/strata/x/a', 1);
      kv.failWatches();
      await state.catchUp();
      assert.equal(state.get('/strata/x/', '/strata/x/a')?.record, 1);
      assert.equal(reloads.filter((r) => r).length, 2, 'the load, then the reload');
    } finally {
      await state.stop();
    }
  });
});
