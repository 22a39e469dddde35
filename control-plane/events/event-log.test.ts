// The event log: the event-log flag, never throwing, and retention (count and age), run twice:
// on a real etcd (the integration layer) and on the in-memory fake (test/fakes/memory-etcd.ts).
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../lib/etcd/kv.js';
import { freePort } from '../../lib/ports.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { catalogued } from './event-catalogue.js';
import { EtcdEventLog } from './etcd-event-log.js';
import { EventLogStore } from './event-log-store.js';
import { nsOfEventId, nowNs } from './event-id.js';
import { startEventRetention, trimEvents } from './event-retention.js';
import { EventStore } from './event-store.js';
import type { EventWire } from './event-wire.js';

const DAY = 86_400n * 1_000_000_000n;
const nodeEvent = (description: string) => catalogued('NodeEnteredActiveState', { component: { kind: 'node', ID: 'n1', Name: 'node-1' }, description });

/** Where the cases run: the store client, bytes put as they are, and a client that cannot reach the store. */
interface Backend {
  readonly client: KvClient;
  putRaw(key: string, raw: string): Promise<void>;
  /** A client whose every request fails; closed by `close`. */
  unreachable(): Promise<{ readonly client: KvClient; close(): void }>;
  close(): Promise<void>;
}

function eventLogCases(name: string, open: () => Promise<Backend>): void {
  describe(`event log on ${name}`, () => {
    let backend: Backend;
    let etcd: KvClient;

    before(async () => {
      backend = await open();
      etcd = backend.client;
    });
    after(async () => {
      await backend?.close();
    });
    beforeEach(async () => {
      await kvOf(etcd).commit({ guards: [], writes: [{ deletePrefix: keys.eventsPrefix() }, { delete: keys.featureFlag('event-log') }] });
    });

    const stored = async (): Promise<EventWire[]> =>
      (await kvOf(etcd).range(keys.eventsPrefix())).map((kv) => JSON.parse(kv.value.toString()) as EventWire);
    const setFlag = (enabled: boolean) => kvOf(etcd).commit({ guards: [], writes: [{ put: keys.featureFlag('event-log'), value: { name: 'event-log', enabled } }] });

    test('records at keys.event(ID) while the flag is absent (enabled by default)', async () => {
      const log = new EtcdEventLog(new EventLogStore(etcd), silentLogger(), { flagCacheMs: 0 });
      await log.record(nodeEvent('up'));
      const [event, ...rest] = await stored();
      assert.equal(rest.length, 0);
      assert.equal(event!.Description, 'up');
      assert.equal(await kvOf(etcd).get(keys.event(event!.ID)) !== null, true);
      const ms = Number(nsOfEventId(event!.ID) / 1_000_000n);
      assert.ok(Math.abs(ms - Date.now()) < 5000, 'the id carries the recording time');
      assert.equal(Date.parse(event!.Time), ms);
    });

    test('event-log flag off: nothing is recorded; on again: recording resumes', async () => {
      const log = new EtcdEventLog(new EventLogStore(etcd), silentLogger(), { flagCacheMs: 0 });
      await setFlag(false);
      await log.record(nodeEvent('dropped'));
      assert.equal(await log.prepare(nodeEvent('dropped')), null);
      assert.equal((await stored()).length, 0);
      await setFlag(true);
      await log.record(nodeEvent('kept'));
      assert.deepEqual((await stored()).map((e) => e.Description), ['kept']);
    });

    test('the flag is cached for flagCacheMs', async () => {
      const log = new EtcdEventLog(new EventLogStore(etcd), silentLogger(), { flagCacheMs: 300 });
      await log.record(nodeEvent('first'));
      await setFlag(false);
      await log.record(nodeEvent('within the cache time'));
      await new Promise((r) => setTimeout(r, 350));
      await log.record(nodeEvent('after the cache time'));
      assert.deepEqual((await stored()).map((e) => e.Description).sort(), ['first', 'within the cache time']);
    });

    test('an unknown event name is recorded with EventCode 0; a corrupt flag counts as enabled', async () => {
      await backend.putRaw(keys.featureFlag('event-log'), '{not json');
      const log = new EtcdEventLog(new EventLogStore(etcd), silentLogger(), { flagCacheMs: 0 });
      await log.record({ ...nodeEvent('odd'), eventName: 'SomethingNew' });
      const [event] = await stored();
      assert.equal(event!.EventName, 'SomethingNew');
      assert.equal(event!.EventCode, 0);
    });

    test('record() never throws when etcd cannot be reached', async () => {
      const dead = await backend.unreachable();
      try {
        const log = new EtcdEventLog(new EventLogStore(dead.client), silentLogger());
        await log.record(nodeEvent('lost')); // resolves
      } finally {
        dead.close();
      }
    });

    test('concurrent records get distinct ids in time order', async () => {
      const log = new EtcdEventLog(new EventLogStore(etcd), silentLogger());
      await Promise.all(Array.from({ length: 50 }, (_, i) => log.record(nodeEvent(`e${i}`))));
      const events = await stored(); // key order: newest first
      assert.equal(new Set(events.map((e) => e.ID)).size, 50);
      const times = events.map((e) => nsOfEventId(e.ID));
      for (let i = 1; i < times.length; i++) assert.ok(times[i - 1]! > times[i]!, 'strictly newest first');
    });

    /** Records `count` events evenly spread over `spanNs` up to `now`, oldest first. */
    async function fill(count: number, spanNs: bigint, now: bigint): Promise<void> {
      let t = 0n;
      const log = new EtcdEventLog(new EventLogStore(etcd), silentLogger(), { clock: () => t, flagCacheMs: 60_000 });
      const step = count > 1 ? spanNs / BigInt(count - 1) : 0n;
      for (let i = 0; i < count; i++) {
        t = now - spanNs + BigInt(i) * step;
        await log.record(nodeEvent(`e${i}`));
      }
    }

    test('retention by age: one ranged delete of everything older than maxAgeDays', async () => {
      const now = nowNs();
      await fill(100, 40n * DAY, now); // ~2.5 events per day over 40 days
      const result = await trimEvents(new EventStore(etcd), { maxAgeDays: 30, maxEvents: 1000, clock: () => now });
      const left = await stored();
      assert.equal(result.deletedByAge, 100 - left.length);
      assert.equal(result.deletedByCount, 0);
      const cutoff = now - 30n * DAY;
      assert.ok(left.every((e) => nsOfEventId(e.ID) >= cutoff), 'nothing older than 30 days');
      assert.ok(left.length >= 74 && left.length <= 76, `about 3/4 kept, got ${left.length}`);
    });

    test('retention by count: keeps exactly the newest maxEvents', async () => {
      const now = nowNs();
      await fill(500, 2n * DAY, now);
      const before = await stored();
      const result = await trimEvents(new EventStore(etcd), { maxEvents: 123, maxAgeDays: 30, clock: () => now });
      const after = await stored();
      assert.equal(result.deletedByCount, 377);
      assert.deepEqual(after.map((e) => e.ID), before.slice(0, 123).map((e) => e.ID), 'the newest 123, in order');
      assert.deepEqual(await trimEvents(new EventStore(etcd), { maxEvents: 123, clock: () => now }), { deletedByAge: 0, deletedByCount: 0 }, 'idempotent');
      // Events recorded within the same millisecond and nanoseconds apart still split exactly.
      await fill(40, 39n, now + DAY);
      await trimEvents(new EventStore(etcd), { maxEvents: 10, clock: () => now + DAY });
      assert.deepEqual((await stored()).map((e) => e.Description), Array.from({ length: 10 }, (_, i) => `e${39 - i}`));
    });

    test('startEventRetention trims at once and on its interval until stopped', async () => {
      const now = nowNs();
      await fill(30, DAY, now);
      const retention = startEventRetention(new EventStore(etcd), silentLogger(), { maxEvents: 20, intervalMs: 100 });
      try {
        await waitUntil(async () => (await stored()).length === 20, 'the first trim');
        await fill(10, 1000n, nowNs());
        await waitUntil(async () => (await stored()).length === 20, 'a periodic trim');
      } finally {
        await retention.stop();
      }
      await fill(5, 1000n, nowNs());
      await new Promise((r) => setTimeout(r, 300));
      assert.equal((await stored()).length, 25, 'no trim after stop');
    });
  });
}

eventLogCases('etcd', async () => {
  const testEtcd: TestEtcd = await startEtcd();
  const etcd = createEtcdClient([testEtcd.endpoint]);
  return {
    client: etcd,
    async putRaw(key, raw) {
      await etcd.put(key).value(raw).exec();
    },
    async unreachable() {
      const dead = createEtcdClient([`127.0.0.1:${await freePort()}`], 200);
      return { client: dead, close: () => dead.close() };
    },
    async close() {
      etcd.close();
      await testEtcd.stop();
    },
  };
});

eventLogCases('the in-memory fake', async () => {
  const memory = new MemoryEtcd();
  return {
    client: memory,
    async putRaw(key, raw) {
      memory.putRaw(key, raw);
    },
    async unreachable() {
      const dead = new MemoryEtcd();
      const fail = async (): Promise<never> => {
        throw new Error('14 UNAVAILABLE: No connection established');
      };
      Object.assign(dead, { get: fail, commit: fail });
      return { client: dead, close: () => {} };
    },
    async close() {},
  };
});
