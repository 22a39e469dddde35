// The replica set's compare-and-swap changes against a real etcd: the planned hand-over moves the
// primary only to an in-sync copy whose server is alive, only from the epoch's primary.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from './client.js';
import { keys } from './keys.js';
import { ReplicaSetStore } from './replica-set-store.js';
import type { ReplicaSetRecord } from '../records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';

describe('ReplicaSetStore (real etcd)', () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let store: ReplicaSetStore;

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    store = new ReplicaSetStore(client);
  });
  after(async () => {
    client.close();
    await etcd.stop();
  });

  /** Three nodes (one server each); `alive` ones have a presence key. */
  async function volumeOn(alive: readonly number[], inSync: readonly number[] = [0, 1, 2]) {
    const nodes = [randomUUID(), randomUUID(), randomUUID()];
    for (const [i, node] of nodes.entries()) {
      const server = randomUUID();
      await client.put(keys.node(node)).value(JSON.stringify({ UUID: node, serverUUID: server }));
      if (alive.includes(i)) await client.put(keys.presence(server)).value('{}');
    }
    const volumeUUID = randomUUID();
    const set: ReplicaSetRecord = { volumeUUID, epoch: 3, primaryNodeUUID: nodes[0]!, inSync: inSync.map((i) => nodes[i]!), reason: 'created', announced: 'Unknown', updatedAt: '' };
    await client.put(keys.replicaSet(volumeUUID)).value(JSON.stringify(set));
    return { volumeUUID, nodes };
  }

  it('handOver moves the primary to an alive in-sync copy, bumps the epoch and takes the old primary out of the in-sync set, in one change', async () => {
    const { volumeUUID, nodes } = await volumeOn([0, 1, 2]);
    const moved = await store.handOver(volumeUUID, 3, nodes[0]!, [nodes[1]!, nodes[2]!]);
    assert.deepEqual(moved, { outcome: 'moved', primaryNodeUUID: nodes[1], epoch: 4 });
    const stored = (await store.get(volumeUUID))!.record;
    assert.equal(stored.epoch, 4);
    assert.equal(stored.primaryNodeUUID, nodes[1]);
    assert.deepEqual(stored.inSync, [nodes[1], nodes[2]]);
  });

  it('handOver skips a copy whose server has no presence key and one out of sync; with none left the set is unchanged', async () => {
    const skipDead = await volumeOn([0, 2]);
    assert.deepEqual(await store.handOver(skipDead.volumeUUID, 3, skipDead.nodes[0]!, [skipDead.nodes[1]!, skipDead.nodes[2]!]), {
      outcome: 'moved',
      primaryNodeUUID: skipDead.nodes[2],
      epoch: 4,
    });

    const none = await volumeOn([0, 1, 2], [0, 1]);
    await client.delete().key(keys.presence(JSON.parse((await client.get(keys.node(none.nodes[1]!)).string())!).serverUUID));
    assert.deepEqual(await store.handOver(none.volumeUUID, 3, none.nodes[0]!, [none.nodes[1]!, none.nodes[2]!]), { outcome: 'none' });
    const stored = (await store.get(none.volumeUUID))!.record;
    assert.equal(stored.epoch, 3);
    assert.equal(stored.primaryNodeUUID, none.nodes[0]);
    assert.deepEqual(stored.inSync, [none.nodes[0], none.nodes[1]]);
  });

  it('handOver by a node that is not the epoch\'s primary (or at an older epoch) is fenced and changes nothing', async () => {
    const { volumeUUID, nodes } = await volumeOn([0, 1, 2]);
    assert.deepEqual(await store.handOver(volumeUUID, 2, nodes[0]!, [nodes[1]!]), { outcome: 'fenced' });
    assert.deepEqual(await store.handOver(volumeUUID, 3, nodes[1]!, [nodes[2]!]), { outcome: 'fenced' });
    const stored = (await store.get(volumeUUID))!.record;
    assert.equal(stored.epoch, 3);
    assert.equal(stored.primaryNodeUUID, nodes[0]);
  });

  it('recordHostSize: the epoch\'s primary records the size its path serves, in-sync set kept; a retry writes nothing; another node is fenced', async () => {
    const { volumeUUID, nodes } = await volumeOn([0, 1, 2]);
    assert.equal(await store.recordHostSize(volumeUUID, 3, nodes[1]!, 2n << 30n), 'fenced');
    assert.equal((await store.get(volumeUUID))!.record.hostSizeBytes, undefined);
    assert.equal(await store.recordHostSize(volumeUUID, 3, nodes[0]!, 2n << 30n), 'done');
    const stored = await store.get(volumeUUID);
    assert.equal(stored!.record.hostSizeBytes, String(2n << 30n));
    assert.deepEqual(stored!.record.inSync, nodes);
    assert.equal(await store.recordHostSize(volumeUUID, 3, nodes[0]!, 2n << 30n), 'done');
    assert.equal((await store.get(volumeUUID))!.revision, stored!.revision, 'the same size again: no write');
  });
});
