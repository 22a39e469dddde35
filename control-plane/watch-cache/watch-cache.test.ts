// The watch cache against a real etcd: after sync() it holds every write committed before the
// call, made anywhere (here: straight to etcd, as another control plane or an agent would),
// including when the newest revision lies outside /strata/ (an etcd shared with others).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { VolumeRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { WatchCache } from './watch-cache.js';

describe('watch cache', () => {
  let testEtcd: TestEtcd;
  let etcd: Etcd3;
  let cache: WatchCache;

  before(async () => {
    testEtcd = await startEtcd();
    etcd = createEtcdClient([testEtcd.endpoint]);
    cache = new WatchCache(etcd, silentLogger('watch-cache-test'));
    await cache.start();
  });
  after(async () => {
    await cache.stop();
    etcd.close();
    await testEtcd.stop();
  });

  const volume = (UUID: string, name: string, projectName = 'default'): VolumeRecord => ({ UUID, name, projectName, state: 'Available' }) as VolumeRecord;
  const put = (key: string, value: unknown) => etcd.put(key).value(JSON.stringify(value)).exec();

  test('sync() makes every earlier write visible, deletes included', async () => {
    for (let i = 0; i < 20; i++) {
      const UUID = randomUUID();
      await put(keys.volume(UUID), volume(UUID, `v${i}`));
      await cache.sync();
      assert.equal(cache.volume(UUID)?.record.name, `v${i}`, `write ${i} seen after sync`);
      await etcd.delete().key(keys.volume(UUID)).exec();
      await cache.sync();
      assert.equal(cache.volume(UUID), null, `delete ${i} seen after sync`);
    }
  });

  test('the cluster record is held, the cluster CA beside it (its private key) never is', async () => {
    await put(keys.cluster(), { UUID: 'c', clusterName: 'held' });
    await put(keys.clusterCa(), { certificate: 'cert', privateKey: 'never held' });
    await cache.sync();
    assert.equal(cache.cluster()?.record.clusterName, 'held');
    assert.deepEqual([...cache.state.all(keys.cluster()).keys()], [keys.cluster()]);
    assert.equal(cache.state.get(keys.cluster(), keys.clusterCa()), undefined);
    await cache.state.resync(); // and not after a load either
    assert.deepEqual([...cache.state.all(keys.cluster()).keys()], [keys.cluster()]);
    assert.equal(cache.cluster()?.record.clusterName, 'held');
  });

  test('the revision to wait for may come from a key outside /strata/', async () => {
    const UUID = randomUUID();
    await put(keys.volume(UUID), volume(UUID, 'inside'));
    await put(`/someone-else/${randomUUID()}`, { not: 'ours' });
    const started = performance.now();
    await cache.sync();
    assert.ok(performance.now() - started < 1500, 'sync did not wait for a revision that never comes');
    assert.equal(cache.volume(UUID)?.record.name, 'inside');
  });

  test('the revision of a cached record is its etcd mod_revision (the ETag)', async () => {
    const UUID = randomUUID();
    const res = await etcd.put(keys.volume(UUID)).value(JSON.stringify(volume(UUID, 'etag'))).exec();
    await cache.sync();
    assert.equal(cache.volume(UUID)?.revision, res.header.revision);
  });

  test('volumes in key order from any start, across creates made while iterating', async () => {
    const project = `order-${randomUUID().slice(0, 8)}`;
    const uuids = Array.from({ length: 30 }, () => randomUUID());
    await Promise.all(uuids.map((u, i) => put(keys.volume(u), volume(u, `o${i}`, project))));
    await cache.sync();
    const ours = () => [...cache.volumesInOrder()].filter((v) => v.record.projectName === project).map((v) => v.record.UUID);
    assert.deepEqual(ours(), [...uuids].sort());
    const sorted = [...uuids].sort();
    const afterTenth = [...cache.volumesInOrder(sorted[9])].filter((v) => v.record.projectName === project).map((v) => v.record.UUID);
    assert.deepEqual(afterTenth, sorted.slice(10));

    // Creates and deletes between two steps of an iteration: it neither repeats nor skips a
    // volume that exists throughout.
    const seen: string[] = [];
    let step = 0;
    for (const v of cache.volumesInOrder()) {
      if (v.record.projectName === project) seen.push(v.record.UUID);
      if (step++ === 3) {
        const extra = randomUUID();
        await put(keys.volume(extra), volume(extra, 'extra', `${project}-other`));
        await etcd.delete().key(keys.volume(sorted[0]!)).exec();
        await cache.sync();
      }
    }
    assert.equal(new Set(seen).size, seen.length, 'no volume repeated');
    for (const u of sorted.slice(1)) assert.ok(seen.includes(u), `volume ${u} not skipped`);
  });

  test('lookups by name, by policy name, and status reports by volume', async () => {
    const a = randomUUID();
    const b = randomUUID();
    await put(keys.volume(a), volume(a, 'twin', 'pa'));
    await put(keys.volume(b), { ...volume(b, 'twin', 'pa'), state: 'Deleting' });
    const policy = randomUUID();
    await put(keys.policy(policy), { UUID: policy, name: 'gold-watch' });
    await put(keys.volumeStatus(a, 'node-1'), { volumeUUID: a, nodeUUID: 'node-1' });
    await put(keys.volumeStatus(a, 'node-2'), { volumeUUID: a, nodeUUID: 'node-2' });
    await cache.sync();
    assert.deepEqual(cache.volumesNamed('pa', 'twin').map((v) => v.record.UUID).sort(), [a, b].sort());
    assert.deepEqual(cache.volumesNamed('pb', 'twin'), []);
    assert.equal(cache.policyNamed('gold-watch')?.record.UUID, policy);
    assert.deepEqual(cache.statusesOf(a).map((s) => s.nodeUUID).sort(), ['node-1', 'node-2']);

    await put(keys.policy(policy), { UUID: policy, name: 'silver-watch' });
    await etcd.delete().key(keys.volumeStatus(a, 'node-1')).exec();
    await cache.sync();
    assert.equal(cache.policyNamed('gold-watch'), null, 'a renamed policy leaves the old name');
    assert.equal(cache.policyNamed('silver-watch')?.record.UUID, policy);
    assert.deepEqual(cache.statusesOf(a).map((s) => s.nodeUUID), ['node-2']);
  });

  test('concurrent syncs share barriers and all resolve', async () => {
    const UUID = randomUUID();
    const writes = Array.from({ length: 10 }, (_, i) => put(keys.volume(UUID), volume(UUID, `n${i}`)));
    await Promise.all(writes);
    await Promise.all(Array.from({ length: 50 }, () => cache.sync()));
    assert.match(cache.volume(UUID)!.record.name, /^n\d$/);
  });

  test('the state is shared: an index added after the load covers what it holds; listeners come and go; the leader key keeps its create revision', async () => {
    const project = `p-${randomUUID().slice(0, 8)}`;
    const before = randomUUID();
    await put(keys.volume(before), volume(before, 'before-index', project));
    await cache.sync();
    cache.state.addIndex('test-volumes-by-project', keys.volumesPrefix(), (_key, record) => (record as VolumeRecord).projectName);
    assert.deepEqual([...cache.state.lookup('test-volumes-by-project', project)], [keys.volume(before)], 'built from the records held');
    const seen: string[] = [];
    const unsubscribe = cache.state.onChange((changes) => seen.push(...changes.map((c) => c.key)));
    const after = randomUUID();
    await put(keys.volume(after), volume(after, 'after-index', project));
    await cache.sync();
    assert.deepEqual([...cache.state.lookup('test-volumes-by-project', project)].sort(), [keys.volume(before), keys.volume(after)].sort(), 'kept current');
    assert.ok(seen.includes(keys.volume(after)), 'a listener sees the change');
    unsubscribe();
    const created = await etcd.put(keys.leader()).value(JSON.stringify({ instanceId: 'x', since: '' })).exec();
    await etcd.put(keys.leader()).value(JSON.stringify({ instanceId: 'y', since: '' })).exec();
    await cache.sync();
    assert.ok(!seen.includes(keys.leader()), 'no call after unsubscribing');
    const leader = cache.state.get<{ instanceId: string }>(keys.leader(), keys.leader());
    assert.equal(leader?.record.instanceId, 'y');
    assert.equal(leader?.createRevision, created.header.revision, 'the key\'s create_revision (a leader\'s term)');
    await etcd.delete().key(keys.leader()).exec();
  });
});
