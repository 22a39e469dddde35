import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { PresenceRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { assertFirstRegistration, assertReRegistered, editAsControlPlane, movedFacts, registrationFacts } from '../../test/helpers/registration.js';
import { startTcpProxy, type TcpProxy } from '../../test/helpers/tcp-proxy.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { Membership } from './membership.js';
import { PresenceStore } from './presence-store.js';
import { RegistrationStore, type RegistrationFacts } from './registration-store.js';

// 4 s, not the agent's minimum of 2: the fencing test restores the link between the fence (65% of the
// TTL) and the expiry, a window of 0.35 × TTL, which a loaded host missed at 2 s (0.7 s).
const TTL = 4;

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
    const facts = registrationFacts({ nodeUUIDs: [randomUUID(), randomUUID()] });
    const m = membership(client(), facts);
    await m.start();
    assert.equal(m.state().registered, true);

    const presence = await presenceOf(facts.serverUUID);
    assert.equal(presence?.serverUUID, facts.serverUUID);
    assert.deepEqual(presence?.nodeUUIDs, facts.nodeUUIDs);
    assert.equal(presence?.hostname, 'storage-1');
    const leaseId = (await observer.get(keys.presence(facts.serverUUID)).exec()).kvs[0]?.lease;
    assert.equal(leaseId, m.state().leaseId);

    await assertFirstRegistration(observer, facts);
  });

  it('stop() revokes the lease: presence disappears at once', async () => {
    const facts = registrationFacts();
    const m = membership(client(), facts);
    await m.start();
    assert.ok(await presenceOf(facts.serverUUID));
    await m.stop();
    assert.equal(await presenceOf(facts.serverUUID), null);
    assert.ok(await observer.get(keys.server(facts.serverUUID)).string(), 'persistent records stay');
  });

  it('re-registration updates only the agent-owned fields and keeps the control plane’s', async () => {
    const facts = registrationFacts();
    const m1 = membership(client(), facts);
    await m1.start();
    await m1.stop();
    const created = await editAsControlPlane(observer, facts);

    const m2 = membership(client(), movedFacts(facts));
    await m2.start();
    await assertReRegistered(observer, facts, created);
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
      const facts = registrationFacts();
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
      const facts = registrationFacts();
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
    const facts = registrationFacts();
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
