// AssignmentStore against a real etcd: a node's assignments read at a revision and watched from
// the next (puts, deletes, a corrupt record handed over as one that throws), and the replica-set
// and presence watches of replication (puts only).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { PresenceRecord, ReplicaSetRecord, VolumeAssignment } from '../../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../../test/helpers/etcd.js';
import { WatchedStates } from '../../../test/helpers/watched-state.js';
import { waitUntil } from '../../../test/helpers/wait.js';
import { AssignmentStore, type AssignmentKey } from './assignment-store.js';

const NODE = 'a0000000-0000-4000-8000-000000000001';
const V1 = 'b0000000-0000-4000-8000-000000000001';
const V2 = 'b0000000-0000-4000-8000-000000000002';

describe('AssignmentStore (real etcd)', () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  const states = new WatchedStates();
  let store: AssignmentStore;
  const cancels: (() => Promise<void>)[] = [];

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    store = new AssignmentStore(states.of(client));
  });
  after(async () => {
    for (const cancel of cancels) await cancel();
    await states.stop();
    client?.close();
    await etcd?.stop();
  });

  it('reads a node’s assignments at a revision and watches from the next one', async () => {
    assert.equal(await store.cluster(), null, 'no cluster record yet');
    await client.put(keys.assignment(NODE, V1)).value(JSON.stringify({ volumeUUID: V1, nodeUUID: NODE, generation: 1 }));
    const read = await store.read(NODE);
    assert.deepEqual(read.keys.map((k) => [k.volumeUUID, (k.record() as VolumeAssignment).generation]), [[V1, 1]]);
    assert.ok(read.keys[0]!.revision <= read.revision);

    const events: [string, string, bigint][] = [];
    const watch = store.watch(NODE, read.revision + 1n, {
      put: (k: AssignmentKey) => events.push(['put', k.volumeUUID, k.revision]),
      delete: (k: AssignmentKey) => events.push(['delete', k.volumeUUID, k.revision]),
      error: (err) => assert.fail(err),
    });
    cancels.push(() => watch.cancel());
    await client.put(keys.assignment(NODE, V2)).value('not json');
    await client.delete().key(keys.assignment(NODE, V1));
    await waitUntil(() => events.length === 2, 'a put and a delete');
    assert.deepEqual(events.map(([kind, volume]) => [kind, volume]), [['put', V2], ['delete', V1]]);
    assert.ok(events.every(([, , revision]) => revision > read.revision), 'nothing from before the read');
    const again = await store.read(NODE);
    assert.throws(() => again.keys[0]!.record(), /corrupt record/);
  });

  it('watches replica sets and presence keys (puts)', async () => {
    const sets: [string, ReplicaSetRecord | null][] = [];
    const present: (PresenceRecord | null)[] = [];
    const a = store.watchReplicaSets((volumeUUID, set) => sets.push([volumeUUID, set.record()]), (err) => assert.fail(err));
    const b = store.watchPresence((presence) => present.push(presence.record()), (err) => assert.fail(err));
    cancels.push(() => a.cancel(), () => b.cancel());
    // A watch made with watcher() connects in the background: write until the first event arrives.
    await waitUntil(async () => {
      await client.put(keys.replicaSet(V1)).value(JSON.stringify({ volumeUUID: V1, epoch: 2 }));
      await client.put(keys.presence('s1')).value(JSON.stringify({ serverUUID: 's1', nodeUUIDs: [NODE] }));
      return sets.length > 0 && present.length > 0;
    }, 'the watches connected');
    assert.deepEqual(sets[0], [V1, { volumeUUID: V1, epoch: 2 }]);
    assert.deepEqual(present[0]?.nodeUUIDs, [NODE]);
  });
});
