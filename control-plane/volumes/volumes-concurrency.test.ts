// Volumes under concurrent requests, against a real etcd over HTTP: one winner per name,
// racing updates that never lose one, paging that never skips or repeats while volumes are
// being created, a name free again the moment its volume is Deleting.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { ReplicaSetRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import { kvOf } from '../../lib/etcd/kv.js';
import type { Write } from '../../lib/etcd/transaction.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { joinServer, readText } from '../../test/helpers/records.js';
import { startVolumesHarness, type VolumesHarness } from '../../test/kits/volume-test-support.js';

const GIB = 1024 ** 3;

describeForEveryBackend('volumes under concurrency', (backend) => {
  let h: VolumesHarness;
  const admin = () => h.tokens.admin;

  before(async () => {
    h = await startVolumesHarness({ backend });
  });
  after(async () => {
    await h?.close();
  });

  test('50 parallel creates of one name: exactly one 200, 49 409, one record and one index', async () => {
    const name = `race-${randomUUID().slice(0, 8)}`;
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => h.create({ name, size: `${i + 1}GiB` })));
    const statuses = results.map((r) => r.status);
    assert.equal(statuses.filter((s) => s === 200).length, 1, JSON.stringify(statuses));
    assert.equal(statuses.filter((s) => s === 409).length, 49, JSON.stringify(statuses));
    for (const r of results.filter((r) => r.status === 409)) assert.equal(r.body.code, 6);
    const winner = results.find((r) => r.status === 200)!.body;
    await h.sync();
    const all = await h.store.scan((v) => v.name === name);
    assert.deepEqual(all.map((v) => v.record.UUID), [winner.UUID]);
    assert.deepEqual(JSON.parse((await readText(h.etcd, keys.volumeName('default', name)))!), { UUID: winner.UUID });
  });

  test('racing updates never lose one: labels vs rename both land; labels vs size as the state rules allow', async () => {
    for (let round = 0; round < 10; round++) {
      const v = (await h.create({ name: `upd-${round}-${randomUUID().slice(0, 6)}`, size: '1GiB' })).body;
      await h.setState(v.UUID, 'Available');
      const label = [{ key: 'round', value: String(round) }];
      const newName = `renamed-${round}-${randomUUID().slice(0, 6)}`;
      const [a, b] = await Promise.all([
        h.request('PUT', `/api/v2/volumes/${v.UUID}`, { token: admin(), body: { labels: label } }),
        h.request('PUT', `/api/v2/volumes/${v.UUID}`, { token: admin(), body: { newName } }),
      ]);
      assert.deepEqual([a.status, b.status], [200, 200], JSON.stringify([a.body, b.body]));
      const record = (await h.record(v.UUID))!;
      assert.deepEqual(record.labels, label, `round ${round}: labels kept`);
      assert.equal(record.name, newName, `round ${round}: rename kept`);
      assert.equal(record.state, 'Available');

      // Size moves the volume to Updating: the other request either landed first (both kept)
      // or is refused with 503. A 200 whose change is missing would be a lost update.
      const [labels, size] = await Promise.all([
        h.request('PUT', `/api/v2/volumes/${v.UUID}`, { token: admin(), body: { labels: [{ key: 'second', value: String(round) }] } }),
        h.request('PUT', `/api/v2/volumes/${v.UUID}`, { token: admin(), body: { size: '2GiB' } }),
      ]);
      const after = (await h.record(v.UUID))!;
      for (const [res, applied] of [[labels, after.labels[0]?.key === 'second'], [size, after.sizeBytes === String(2 * GIB)]] as const) {
        assert.ok(res.status === 200 || res.status === 503, JSON.stringify(res.body));
        assert.equal(applied, res.status === 200, `round ${round}: ${JSON.stringify(res.body)} vs record`);
      }
      assert.ok(labels.status === 200 || size.status === 200, 'one of them lands');
    }
  });

  test('two racing updates with the same If-Match: one 200, one 412', async () => {
    const v = (await h.create({ name: `etag-${randomUUID().slice(0, 6)}`, size: '1GiB' })).body;
    await h.setState(v.UUID, 'Available');
    const etag = (await h.request('GET', `/api/v2/volumes/${v.UUID}`, { token: admin() })).body.ETag;
    const results = await Promise.all(
      ['a', 'b'].map((key) => h.request('PUT', `/api/v2/volumes/${v.UUID}`, { token: admin(), body: { labels: [{ key, value: '1' }] }, headers: { 'If-Match': etag } })),
    );
    assert.deepEqual(results.map((r) => r.status).sort(), [200, 412]);
    const winner = results[0]!.status === 200 ? 'a' : 'b';
    assert.deepEqual((await h.record(v.UUID))!.labels, [{ key: winner, value: '1' }]);
  });

  test('parallel deletes of one volume: one 200, the others 400', async () => {
    const v = (await h.create({ name: `del-${randomUUID().slice(0, 6)}`, size: '1GiB' })).body;
    await h.setState(v.UUID, 'Available');
    const results = await Promise.all(Array.from({ length: 10 }, () => h.request('DELETE', `/api/v2/volumes/${v.UUID}`, { token: admin() })));
    const statuses = results.map((r) => r.status).sort();
    assert.deepEqual(statuses, [200, ...Array(9).fill(400)]);
    assert.equal((await h.record(v.UUID))!.generation, 2, 'bumped once');
  });

  test('a name is free as soon as its volume is Deleting, even while creates race for it', async () => {
    const name = `reuse-${randomUUID().slice(0, 6)}`;
    const first = (await h.create({ name, size: '1GiB' })).body;
    await h.setState(first.UUID, 'Available');
    const [deleted, ...creates] = await Promise.all([
      h.request('DELETE', `/api/v2/projects/default/volumes/?name=${name}`, { token: admin() }),
      ...Array.from({ length: 10 }, () => h.create({ name, size: '1GiB' })),
    ]);
    assert.equal(deleted!.status, 200);
    let winners = creates.filter((r) => r.status === 200);
    assert.ok(winners.length <= 1, 'at most one live volume per name');
    if (winners.length === 0) winners = [await h.create({ name, size: '1GiB' })];
    assert.equal(winners[0]!.status, 200);
    await h.sync();
    const live = await h.store.scan((v) => v.name === name && v.state !== 'Deleting');
    assert.deepEqual(live.map((v) => v.record.UUID), [winners[0]!.body.UUID]);
  });

  test('paging while volumes are created: every volume that existed throughout appears exactly once', async () => {
    await h.putProject('paging');
    const existing = new Set<string>();
    for (let i = 0; i < 60; i++) existing.add((await h.create({ name: `page-${i}`, size: '1GiB' }, 'paging')).body.UUID);
    let creating = true;
    const created: string[] = [];
    const writer = (async () => {
      for (let i = 0; creating && i < 200; i++) {
        const res = await h.create({ name: `during-${i}`, size: '1GiB' }, 'paging');
        assert.equal(res.status, 200);
        created.push(res.body.UUID);
      }
    })();
    const seen: string[] = [];
    let offset = '';
    for (let pages = 0; pages < 100; pages++) {
      const res = await h.request('GET', `/api/v2/projects/paging/volumes?limit=7${offset ? `&offsetUUID=${offset}` : ''}`, { token: admin() });
      assert.equal(res.status, 200);
      const page = res.body.volumes as { UUID: string }[];
      if (page.length === 0) break;
      seen.push(...page.map((v) => v.UUID));
      offset = page[page.length - 1]!.UUID;
    }
    creating = false;
    await writer;
    assert.ok(created.length > 0, 'creates ran during paging');
    assert.equal(new Set(seen).size, seen.length, 'no volume repeated');
    for (const uuid of existing) assert.ok(seen.includes(uuid), `volume ${uuid} skipped`);
    assert.deepEqual(seen, [...seen].sort(), 'UUID order');
  });

  test('a full page (1000 volumes, 3 replicas each) is read in a few round trips, not one per volume', async () => {
    await h.putProject('big');
    const server = await joinServer(h.etcd, { nodes: [{}, {}, {}] });
    const nodes = server.nodes.map((node) => node.UUID);
    const now = new Date().toISOString();
    const ops: Write[] = [];
    for (let i = 0; i < 1000; i++) {
      const UUID = randomUUID();
      const volume: VolumeRecord = {
        UUID, name: `big-${i}`, projectName: 'big', sizeBytes: String(GIB), acl: ['ALLOW_ANY'], ipAcl: ['ALLOW_ANY'], compression: false, replicaCount: 3,
        sectorSize: 4096, labels: [], qosPolicyUUID: '', placementRestrictions: [], sourceSnapshotUUID: '', sourceSnapshotName: '', encrypted: false,
        state: 'Available', generation: 1, placement: { nodeList: nodes, primaryNodeUUID: nodes[0]!, nsid: i + 1, port: 4420 }, failureReason: '',
        rollbackSnapshotUUID: '', creationTime: now,
      };
      ops.push({ put: keys.volume(UUID), value: volume });
      // As the controller places a replicated volume: its replica set, every copy in sync.
      const replicaSet: ReplicaSetRecord = { volumeUUID: UUID, epoch: 1, primaryNodeUUID: nodes[0]!, inSync: [...nodes], reason: 'created', announced: 'Unknown', updatedAt: now };
      ops.push({ put: keys.replicaSet(UUID), value: replicaSet });
      for (const node of nodes) {
        const status: VolumeStatusRecord = {
          volumeUUID: UUID, nodeUUID: node, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [{ hostNQN: 'nqn.2014-08.org.x:h', address: '10.0.0.1' }],
          logicalUsedBytes: String(i), physicalUsedBytes: String(i), reportedAt: now,
        };
        ops.push({ put: keys.volumeStatus(UUID, node), value: status });
      }
    }
    for (let i = 0; i < ops.length; i += 100) await kvOf(h.etcd).commit({ guards: [{ key: keys.cluster(), exists: true }], writes: ops.slice(i, i + 100) });

    const timings: number[] = [];
    for (let round = 0; round < 3; round++) {
      const started = Date.now();
      const res = await h.request('GET', '/api/v2/projects/big/volumes', { token: admin() });
      timings.push(Date.now() - started);
      assert.equal(res.status, 200);
      assert.equal(res.body.volumes.length, 1000);
      for (const v of res.body.volumes) {
        assert.equal(v.protectionState, 'FullyProtected');
        assert.equal(v.statistics.logicalUsedStorage, v.name.slice('big-'.length), 'each volume gets its own reports');
      }
    }
    console.log(`list of 1000 volumes with 3000 status reports: ${timings.join(', ')} ms`);
    assert.ok(Math.min(...timings) < 2000, `too slow: ${timings.join(', ')} ms`);
  });
});
