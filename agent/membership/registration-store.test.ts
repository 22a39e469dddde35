// The server and node records of the agent's join (RegistrationStore), run twice: on a real etcd
// (the integration layer) and on the in-memory fake (test/fakes/memory-etcd.ts). A control-plane
// edit let in between an upsert's read and its guarded commit (MemoryEtcd.interleave), which a
// real etcd gives only by chance, runs on the fake alone. The lease and presence key
// (presence-store.ts) are membership.test.ts's, on etcd.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf } from '../../lib/etcd/kv.js';
import type { NodeRecord, ServerRecord } from '../../lib/records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { describeOnEveryBackend, putText, racing } from '../../test/helpers/kv-backends.js';
import { putRecord, serverRecord } from '../../test/helpers/records.js';
import { assertFirstRegistration, assertReRegistered, editAsControlPlane, movedFacts, readRecord, registrationFacts } from '../../test/helpers/registration.js';
import { RegistrationStore } from './registration-store.js';

describeOnEveryBackend('registration store', (suite) => {

  test('creates the server and node records; a device belongs to the first node', async () => {
    const facts = registrationFacts({ nodeUUIDs: [randomUUID(), randomUUID()] });
    const store = new RegistrationStore(suite.client);
    assert.equal(await store.registerServer(facts), 'created');
    assert.deepEqual(await store.registerNodes(facts), ['created', 'created']);
    await assertFirstRegistration(suite.client, facts);
    assert.equal((await readRecord<NodeRecord>(suite.client, keys.node(facts.nodeUUIDs[0]!)))?.unattached, undefined);
  });

  test('registering again rewrites only the agent-owned fields and keeps the control plane\'s; the same facts change nothing', async () => {
    const facts = registrationFacts();
    const store = new RegistrationStore(suite.client);
    await store.registerServer(facts);
    await store.registerNodes(facts);
    const created = await editAsControlPlane(suite.client, facts);

    const moved = movedFacts(facts);
    assert.equal(await store.registerServer(moved), 'updated');
    assert.deepEqual(await store.registerNodes(moved), ['updated']);
    await assertReRegistered(suite.client, facts, created);

    const nodeKey = keys.node(facts.nodeUUIDs[0]!);
    const revision = (await kvOf(suite.client).get(nodeKey))?.modRevision;
    assert.equal(await store.registerServer(moved), 'unchanged');
    assert.deepEqual(await store.registerNodes(moved), ['unchanged']);
    assert.equal((await kvOf(suite.client).get(nodeKey))?.modRevision, revision, 'not rewritten');
  });

  test('a server added without extending the cluster: named by its agent, its nodes join Unattached; a node it knows is never forgotten', async () => {
    const facts = registrationFacts();
    const known = randomUUID();
    await putRecord(suite.client, keys.server(facts.serverUUID), serverRecord({
      UUID: facts.serverUUID, name: '', nodeUUIDs: [known],
      added: { etcdPeerURL: '', etcdMemberID: '', extendCluster: false, promotedAt: '' },
    }));
    const store = new RegistrationStore(suite.client);
    assert.equal(await store.registerServer(facts), 'updated');
    const server = await readRecord<ServerRecord>(suite.client, keys.server(facts.serverUUID));
    assert.equal(server?.name, 'storage-1');
    assert.deepEqual(server?.nodeUUIDs, [known, ...facts.nodeUUIDs]);
    await store.registerNodes(facts);
    assert.equal((await readRecord<NodeRecord>(suite.client, keys.node(facts.nodeUUIDs[0]!)))?.unattached, true);
  });

  test('a record that is not JSON fails the registration', async () => {
    const facts = registrationFacts();
    await putText(suite.client, keys.server(facts.serverUUID), '{');
    await assert.rejects(new RegistrationStore(suite.client).registerServer(facts), /corrupt record/);
  });
});

describe('registration store losing races (in-memory fake)', () => {
  test('a control-plane edit before the commit makes it lose; the upsert reads again and keeps the edit; after 10 lost races it fails', async () => {
    const kv = new MemoryEtcd();
    const facts = registrationFacts();
    const store = new RegistrationStore(kv);
    await store.registerNodes(facts);
    const nodeKey = keys.node(facts.nodeUUIDs[0]!);
    const created = (await readRecord<NodeRecord>(kv, nodeKey))!;

    const race = racing(kv, 1, () => kv.put(nodeKey, { ...created, name: 'renamed', ec: true }));
    assert.deepEqual(await store.registerNodes({ ...facts, hostname: 'storage-1b' }), ['updated']);
    assert.equal(race.commits(), 2);
    const merged = await readRecord<NodeRecord>(kv, nodeKey);
    assert.deepEqual([merged?.name, merged?.ec, merged?.hostname], ['renamed', true, 'storage-1b'], 'the winner\'s fields, read again, and the agent\'s');

    const busy = racing(kv, Infinity, (n) => kv.put(nodeKey, { ...created, name: `writer ${n}` }));
    await assert.rejects(store.registerNodes({ ...facts, hostname: 'storage-1c' }), { message: `${nodeKey} kept changing under 10 attempts to update it` });
    assert.equal(busy.commits(), 10);
  });

  test('a record created between the read and the create makes the create lose; the upsert merges into it', async () => {
    const kv = new MemoryEtcd();
    const facts = registrationFacts();
    const serverKey = keys.server(facts.serverUUID);
    // POST /api/v2/servers created the server record meanwhile, without a name.
    const race = racing(kv, 1, () => kv.put(serverKey, serverRecord({ UUID: facts.serverUUID, name: '', nodeUUIDs: [] })));
    assert.equal(await new RegistrationStore(kv).registerServer(facts), 'updated');
    assert.equal(race.commits(), 2);
    const server = await readRecord<ServerRecord>(kv, serverKey);
    assert.deepEqual([server?.name, server?.nodeUUIDs, server?.endpoints], ['storage-1', facts.nodeUUIDs, ['10.0.0.1']]);
  });
});
