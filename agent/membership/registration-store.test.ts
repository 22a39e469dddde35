// The server and node records of the agent's join (RegistrationStore), run twice: on a real etcd
// (the integration layer) and on the in-memory fake (test/fakes/memory-etcd.ts). A control-plane
// edit let in between an upsert's read and its guarded commit (MemoryEtcd.interleave), which a
// real etcd gives only by chance, runs on the fake alone. The lease and presence key
// (presence-store.ts) are membership.test.ts's, on etcd.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { EtcdKv, kvOf, type KvClient } from '../../lib/etcd/kv.js';
import type { NodeRecord, ServerRecord } from '../../lib/records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { startEtcd } from '../../test/helpers/etcd.js';
import { putRecord, serverRecord } from '../../test/helpers/records.js';
import { RegistrationStore, type RegistrationFacts } from './registration-store.js';

/** Where the cases run: the store client, and how to stop it. */
interface Backend {
  readonly client: KvClient;
  close(): Promise<void>;
}

function factsFor(overrides: Partial<RegistrationFacts> = {}): RegistrationFacts {
  return {
    serverUUID: randomUUID(),
    nodeUUIDs: [randomUUID()],
    hostname: 'storage-1',
    advertiseAddress: '10.0.0.1',
    nvmePort: 4420,
    discoveryPort: 8009,
    failureDomain: 'rack-1',
    maxNvmeDevices: 32,
    dataDevices: ['SER-A', 'SER-B'],
    journalDevice: 'SER-J',
    ...overrides,
  };
}

const read = async <T>(client: KvClient, key: string): Promise<T | null> => parseRecord<T>(key, (await kvOf(client).get(key))?.value ?? null);

function registrationCases(name: string, open: () => Promise<Backend>): void {
  describe(`registration store on ${name}`, () => {
    let client: KvClient;
    let close: Backend['close'] = async () => {};
    before(async () => ({ client, close } = await open()));
    after(() => close());

    test('creates the server and node records; a device belongs to the first node', async () => {
      const facts = factsFor({ nodeUUIDs: [randomUUID(), randomUUID()] });
      const store = new RegistrationStore(client);
      assert.equal(await store.registerServer(facts), 'created');
      assert.deepEqual(await store.registerNodes(facts), ['created', 'created']);

      const server = await read<ServerRecord>(client, keys.server(facts.serverUUID));
      assert.deepEqual({ ...server, createdAt: undefined }, {
        UUID: facts.serverUUID,
        name: 'storage-1',
        hostname: 'storage-1',
        nodeUUIDs: facts.nodeUUIDs,
        endpoints: ['10.0.0.1'],
        createdAt: undefined,
      });
      const [first, second] = await Promise.all(facts.nodeUUIDs.map((u) => read<NodeRecord>(client, keys.node(u))));
      assert.equal(first?.serverUUID, facts.serverUUID);
      assert.equal(first?.name, 'storage-1-0');
      assert.equal(first?.nvmeEndpoint, '10.0.0.1:4420');
      assert.equal(first?.discoveryEndpoint, '10.0.0.1:8009');
      assert.deepEqual(first?.failureDomains, ['rack-1']);
      assert.deepEqual(first?.managedDeviceSerials, ['SER-A', 'SER-B']);
      assert.equal(first?.journalDeviceSerial, 'SER-J');
      assert.equal(first?.maxNvmeDevices, 32);
      assert.equal(first?.ec, false);
      assert.equal(first?.unattached, undefined);
      assert.deepEqual(second?.managedDeviceSerials, [], 'a device belongs to one node: the first');
      assert.equal(second?.name, 'storage-1-1');
    });

    test('registering again rewrites only the agent-owned fields and keeps the control plane\'s; the same facts change nothing', async () => {
      const facts = factsFor();
      const store = new RegistrationStore(client);
      await store.registerServer(facts);
      await store.registerNodes(facts);
      const nodeKey = keys.node(facts.nodeUUIDs[0]!);
      const created = (await read<NodeRecord>(client, nodeKey))!;
      // The control plane reassigns devices, renames and enables ec.
      await putRecord(client, nodeKey, { ...created, name: 'renamed', managedDeviceSerials: ['SER-Z'], ec: true });

      const moved = factsFor({ ...facts, hostname: 'storage-1b', advertiseAddress: '10.0.0.2', failureDomain: 'rack-2', dataDevices: ['SER-Q'] });
      assert.equal(await store.registerServer(moved), 'updated');
      assert.deepEqual(await store.registerNodes(moved), ['updated']);
      assert.deepEqual(await read<NodeRecord>(client, nodeKey), {
        ...created,
        name: 'renamed',
        managedDeviceSerials: ['SER-Z'],
        ec: true,
        hostname: 'storage-1b',
        nvmeEndpoint: '10.0.0.2:4420',
        discoveryEndpoint: '10.0.0.2:8009',
        failureDomains: ['rack-2'],
      });
      const server = await read<ServerRecord>(client, keys.server(facts.serverUUID));
      assert.equal(server?.hostname, 'storage-1b');
      assert.equal(server?.name, 'storage-1', 'name is kept after creation');
      assert.deepEqual(server?.endpoints, ['10.0.0.2']);

      const revision = (await kvOf(client).get(nodeKey))?.modRevision;
      assert.equal(await store.registerServer(moved), 'unchanged');
      assert.deepEqual(await store.registerNodes(moved), ['unchanged']);
      assert.equal((await kvOf(client).get(nodeKey))?.modRevision, revision, 'not rewritten');
    });

    test('a server added without extending the cluster: named by its agent, its nodes join Unattached; a node it knows is never forgotten', async () => {
      const facts = factsFor();
      const known = randomUUID();
      await putRecord(client, keys.server(facts.serverUUID), serverRecord({
        UUID: facts.serverUUID, name: '', nodeUUIDs: [known],
        added: { etcdPeerURL: '', etcdMemberID: '', extendCluster: false, promotedAt: '' },
      }));
      const store = new RegistrationStore(client);
      assert.equal(await store.registerServer(facts), 'updated');
      const server = await read<ServerRecord>(client, keys.server(facts.serverUUID));
      assert.equal(server?.name, 'storage-1');
      assert.deepEqual(server?.nodeUUIDs, [known, ...facts.nodeUUIDs]);
      await store.registerNodes(facts);
      assert.equal((await read<NodeRecord>(client, keys.node(facts.nodeUUIDs[0]!)))?.unattached, true);
    });

    test('a record that is not JSON fails the registration', async () => {
      const facts = factsFor();
      const kv = kvOf(client);
      if (kv instanceof EtcdKv) await kv.etcd.put(keys.server(facts.serverUUID)).value('{');
      else (kv as MemoryEtcd).putRaw(keys.server(facts.serverUUID), '{');
      await assert.rejects(new RegistrationStore(client).registerServer(facts), /corrupt record/);
    });
  });
}

registrationCases('etcd', async () => {
  const testEtcd = await startEtcd();
  const etcd = createEtcdClient([testEtcd.endpoint]);
  return {
    client: etcd,
    async close() {
      etcd.close();
      await testEtcd.stop();
    },
  };
});

registrationCases('the in-memory fake', async () => ({ client: new MemoryEtcd(), close: async () => {} }));

describe('registration store losing races (in-memory fake)', () => {
  /** Lets a concurrent writer in before each of the first `times` guarded commits; counts the commits it saw. */
  function racing(kv: MemoryEtcd, times: number, write: (n: number) => Promise<unknown>): { commits: () => number } {
    let commits = 0;
    kv.interleave = async () => {
      commits += 1;
      if (commits <= times) await write(commits);
    };
    return { commits: () => commits };
  }

  test('a control-plane edit before the commit makes it lose; the upsert reads again and keeps the edit; after 10 lost races it fails', async () => {
    const kv = new MemoryEtcd();
    const facts = factsFor();
    const store = new RegistrationStore(kv);
    await store.registerNodes(facts);
    const nodeKey = keys.node(facts.nodeUUIDs[0]!);
    const created = (await read<NodeRecord>(kv, nodeKey))!;

    const race = racing(kv, 1, () => kv.put(nodeKey, { ...created, name: 'renamed', ec: true }));
    assert.deepEqual(await store.registerNodes({ ...facts, hostname: 'storage-1b' }), ['updated']);
    assert.equal(race.commits(), 2);
    const merged = await read<NodeRecord>(kv, nodeKey);
    assert.deepEqual([merged?.name, merged?.ec, merged?.hostname], ['renamed', true, 'storage-1b'], 'the winner\'s fields, read again, and the agent\'s');

    const busy = racing(kv, Infinity, (n) => kv.put(nodeKey, { ...created, name: `writer ${n}` }));
    await assert.rejects(store.registerNodes({ ...facts, hostname: 'storage-1c' }), { message: `${nodeKey} kept changing under 10 attempts to update it` });
    assert.equal(busy.commits(), 10);
  });

  test('a record created between the read and the create makes the create lose; the upsert merges into it', async () => {
    const kv = new MemoryEtcd();
    const facts = factsFor();
    const serverKey = keys.server(facts.serverUUID);
    // POST /api/v2/servers created the server record meanwhile, without a name.
    const race = racing(kv, 1, () => kv.put(serverKey, serverRecord({ UUID: facts.serverUUID, name: '', nodeUUIDs: [] })));
    assert.equal(await new RegistrationStore(kv).registerServer(facts), 'updated');
    assert.equal(race.commits(), 2);
    const server = await read<ServerRecord>(kv, serverKey);
    assert.deepEqual([server?.name, server?.nodeUUIDs, server?.endpoints], ['storage-1', facts.nodeUUIDs, ['10.0.0.1']]);
  });
});
