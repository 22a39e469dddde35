import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { NodeRecord, PresenceRecord, ServerRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { startTcpProxy, type TcpProxy } from '../../test/helpers/tcp-proxy.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { Membership } from './membership.js';
import { PresenceStore } from './presence-store.js';
import { RegistrationStore, type RegistrationFacts } from './registration-store.js';

// 4 s, not the agent's minimum of 2: the fencing test restores the link between the fence (65% of the
// TTL) and the expiry, a window of 0.35 × TTL, which a loaded host missed at 2 s (0.7 s).
const TTL = 4;

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

describe('Membership (real etcd)', () => {
  let etcd: TestEtcd;
  let observer: Etcd3;
  const cleanups: (() => Promise<void> | void)[] = [];

  before(async () => {
    etcd = await startEtcd();
    observer = createEtcdClient([etcd.endpoint]);
  });
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
    observer.close();
    await etcd.stop();
  });

  function membership(client: Etcd3, facts: RegistrationFacts): Membership {
    const m = new Membership({
      store: new RegistrationStore(client),
      presence: new PresenceStore(client),
      facts,
      leaseTtlSeconds: TTL,
      agentVersion: '0.1.0-test',
      agentInstance: randomUUID(),
      logger: silentLogger(),
      retryBackoff: { initialMs: 100, maxMs: 1000 },
    });
    cleanups.push(() => m.stop());
    return m;
  }
  function client(endpoint = etcd.endpoint): Etcd3 {
    const c = createEtcdClient([endpoint]);
    cleanups.push(() => c.close());
    return c;
  }
  const presenceOf = async (serverUUID: string) =>
    parseRecord<PresenceRecord>('presence', await observer.get(keys.presence(serverUUID)).string());

  it('registers: presence bound to a lease, server and node records created', async () => {
    const facts = factsFor({ nodeUUIDs: [randomUUID(), randomUUID()] });
    const m = membership(client(), facts);
    await m.start();
    assert.equal(m.state().registered, true);

    const presence = await presenceOf(facts.serverUUID);
    assert.equal(presence?.serverUUID, facts.serverUUID);
    assert.deepEqual(presence?.nodeUUIDs, facts.nodeUUIDs);
    assert.equal(presence?.hostname, 'storage-1');
    const leaseId = (await observer.get(keys.presence(facts.serverUUID)).exec()).kvs[0]?.lease;
    assert.equal(leaseId, m.state().leaseId);

    const server = parseRecord<ServerRecord>('s', await observer.get(keys.server(facts.serverUUID)).string());
    assert.deepEqual({ ...server, createdAt: undefined }, {
      UUID: facts.serverUUID,
      name: 'storage-1',
      hostname: 'storage-1',
      nodeUUIDs: facts.nodeUUIDs,
      endpoints: ['10.0.0.1'],
      createdAt: undefined,
    });
    const [first, second] = await Promise.all(
      facts.nodeUUIDs.map(async (u) => parseRecord<NodeRecord>('n', await observer.get(keys.node(u)).string())),
    );
    assert.equal(first?.serverUUID, facts.serverUUID);
    assert.equal(first?.name, 'storage-1-0');
    assert.equal(first?.nvmeEndpoint, '10.0.0.1:4420');
    assert.equal(first?.discoveryEndpoint, '10.0.0.1:8009');
    assert.deepEqual(first?.failureDomains, ['rack-1']);
    assert.deepEqual(first?.managedDeviceSerials, ['SER-A', 'SER-B']);
    assert.equal(first?.journalDeviceSerial, 'SER-J');
    assert.equal(first?.maxNvmeDevices, 32);
    assert.equal(first?.ec, false);
    assert.deepEqual(second?.managedDeviceSerials, [], 'a device belongs to one node: the first');
    assert.equal(second?.name, 'storage-1-1');
  });

  it('stop() revokes the lease: presence disappears at once', async () => {
    const facts = factsFor();
    const m = membership(client(), facts);
    await m.start();
    assert.ok(await presenceOf(facts.serverUUID));
    await m.stop();
    assert.equal(await presenceOf(facts.serverUUID), null);
    assert.ok(await observer.get(keys.server(facts.serverUUID)).string(), 'persistent records stay');
  });

  it('re-registration updates only the agent-owned fields and keeps the control plane’s', async () => {
    const facts = factsFor();
    const m1 = membership(client(), facts);
    await m1.start();
    await m1.stop();
    const nodeKey = keys.node(facts.nodeUUIDs[0] as string);
    const created = parseRecord<NodeRecord>(nodeKey, await observer.get(nodeKey).string()) as NodeRecord;
    // The control plane reassigns devices, renames and enables ec.
    await observer.put(nodeKey).value(JSON.stringify({ ...created, name: 'renamed', managedDeviceSerials: ['SER-Z'], ec: true }));

    const m2 = membership(
      client(),
      factsFor({ ...facts, hostname: 'storage-1b', advertiseAddress: '10.0.0.2', failureDomain: 'rack-2', dataDevices: ['SER-Q'] }),
    );
    await m2.start();
    const updated = parseRecord<NodeRecord>(nodeKey, await observer.get(nodeKey).string());
    assert.deepEqual(updated, {
      ...created,
      name: 'renamed',
      managedDeviceSerials: ['SER-Z'],
      ec: true,
      hostname: 'storage-1b',
      nvmeEndpoint: '10.0.0.2:4420',
      discoveryEndpoint: '10.0.0.2:8009',
      failureDomains: ['rack-2'],
    });
    const server = parseRecord<ServerRecord>('s', await observer.get(keys.server(facts.serverUUID)).string());
    assert.equal(server?.hostname, 'storage-1b');
    assert.equal(server?.name, 'storage-1', 'name is kept after creation');
    assert.deepEqual(server?.endpoints, ['10.0.0.2']);
  });

  describe('cut off from etcd longer than the TTL', () => {
    let proxy: TcpProxy;
    before(async () => {
      proxy = await startTcpProxy('127.0.0.1', etcd.clientPort);
    });
    after(async () => {
      await proxy.close();
    });

    it('presence goes away, and comes back with the same UUIDs once etcd is reachable again', async () => {
      const facts = factsFor();
      const m = membership(client(proxy.endpoint), facts);
      const lost: Error[] = [];
      m.on('lost', (err) => lost.push(err));
      await m.start();
      const before = await presenceOf(facts.serverUUID);
      assert.ok(before);
      const firstLease = m.state().leaseId;

      // From etcd's side a cut is the same as the agent dying (a SIGKILLed agent is tested in
      // agent/main.test.ts): no more keep-alives, so the presence key expires with the lease.
      proxy.cut();
      const cutAt = Date.now();
      await waitUntil(async () => (await presenceOf(facts.serverUUID)) === null, 'presence to expire while cut', (TTL + 1) * 1000);
      assert.ok(Date.now() - cutAt <= (TTL + 1) * 1000);
      // Stay cut past the TTL a while longer, so the old lease is surely dead on both sides.
      await new Promise((r) => setTimeout(r, TTL * 1000));
      proxy.restore();

      const back = await waitUntil(() => presenceOf(facts.serverUUID).then((p) => p ?? undefined), 'presence to come back', 20_000, 100);
      assert.equal(back.serverUUID, facts.serverUUID);
      assert.deepEqual(back.nodeUUIDs, facts.nodeUUIDs);
      assert.equal(back.agentInstance, before.agentInstance, 'same agent process');
      assert.ok(lost.length >= 1, 'lost event emitted');
      // The presence key is visible in etcd a moment before the put's answer reaches the agent.
      await waitUntil(() => m.state().registered, 'the agent to see its registration', 5000, 20);
      const state = m.state();
      assert.equal(state.registered, true);
      assert.equal(state.registrations, 2);
      assert.notEqual(state.leaseId, firstLease);
      const kv = (await observer.get(keys.presence(facts.serverUUID)).exec()).kvs[0];
      assert.equal(kv?.lease, state.leaseId, 'presence bound to the new lease');
    });
  });

  describe('fencing: a lease not renewed in time', () => {
    let proxy: TcpProxy;
    before(async () => {
      proxy = await startTcpProxy('127.0.0.1', etcd.clientPort);
    });
    after(async () => {
      await proxy.close();
    });

    it('says renewalOverdue while the presence key still exists (before etcd can expire it), then renewed after a short cut', async () => {
      const facts = factsFor();
      const m = membership(client(proxy.endpoint), facts);
      const seen: string[] = [];
      let presentWhenOverdue: boolean | undefined;
      m.on('renewalOverdue', () => {
        seen.push('overdue');
        // Read at once: the key must still be there, or another copy could already be promoted.
        void presenceOf(facts.serverUUID).then((p) => (presentWhenOverdue = p !== null));
      });
      m.on('renewed', () => seen.push('renewed'));
      await m.start();
      assert.ok(m.renewalOverdueMs < TTL * 1000, `overdue after ${m.renewalOverdueMs} ms, before the ${TTL} s TTL`);
      proxy.cut();
      const cutAt = Date.now();
      await waitUntil(async () => seen.includes('overdue'), 'renewalOverdue', TTL * 1000, 20);
      const overdueAfter = Date.now() - cutAt;
      assert.ok(overdueAfter < TTL * 1000, `overdue ${overdueAfter} ms after the cut`);
      assert.equal(m.isRenewalOverdue(), true);
      await waitUntil(async () => presentWhenOverdue !== undefined, 'presence read', 5000, 20);
      assert.equal(presentWhenOverdue, true, 'the lease had not expired yet when the agent fenced');
      // Back before the TTL runs out: the same lease is renewed, nothing was lost.
      proxy.restore();
      await waitUntil(async () => seen.includes('renewed'), 'renewed', TTL * 1000, 20);
      assert.equal(m.isRenewalOverdue(), false);
      assert.equal(m.state().registrations, 1, 'the same registration');
    });
  });

  it('keeps retrying while etcd is unreachable at start', async () => {
    const proxy = await startTcpProxy('127.0.0.1', etcd.clientPort);
    cleanups.push(() => proxy.close());
    proxy.cut();
    const facts = factsFor();
    const m = membership(client(proxy.endpoint), facts);
    const started = m.start();
    await new Promise((r) => setTimeout(r, 800));
    assert.equal(m.state().registered, false);
    assert.ok(m.state().lastError);
    proxy.restore();
    await started;
    assert.ok(await presenceOf(facts.serverUUID));
  });
});
