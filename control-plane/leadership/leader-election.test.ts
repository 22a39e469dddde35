import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { StrataError } from '../../lib/errors.js';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { LeaderStore } from '../../lib/etcd/leader-store.js';
import { PrefixMirror } from '../../lib/etcd/prefix-mirror.js';
import type { Transaction } from '../../lib/etcd/transaction.js';
import type { LeaderRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../../test/helpers/processes.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { LeaderElection, type LeaderKey } from './leader-election.js';

const logger = pino({ level: 'silent' });
const TTL = 2;

async function leaders(plane: ControlPlaneProcess, token: string): Promise<string[]> {
  const res = await fetch(`${plane.apiUrl}/api/v2/controlPlanes`, { headers: { Authorization: `Bearer ${token}` } });
  assert.equal(res.status, 200);
  const body = (await res.json()) as { controlPlanes: { instanceId: string; isActiveClusterManager: boolean }[] };
  return body.controlPlanes.filter((c) => c.isActiveClusterManager).map((c) => c.instanceId);
}

describe('active cluster manager election', () => {
  let etcd: TestEtcd;
  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await etcd.stop();
  });

  it('two control planes elect one leader; killing it hands over within TTL + 1 s; SIGTERM hands over at once', async () => {
    const first = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, leaseTtlSeconds: TTL });
    const second = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, leaseTtlSeconds: TTL, stateDir: first.stateDir });
    const token = first.adminToken();
    const third: ControlPlaneProcess[] = [];
    try {
      const [leader] = await waitUntil(async () => {
        const l = await leaders(second, token);
        return l.length === 1 ? l : undefined;
      }, 'one leader', 5000);
      const [dead, survivor] = leader === first.instanceId ? [first, second] : [second, first];
      assert.ok(
        survivor.logs.every((r) => r['msg'] !== 'became the active cluster manager'),
        'the other instance never claimed leadership',
      );

      const killedAt = Date.now();
      await dead.kill();
      await waitUntil(async () => ((await leaders(survivor, token))[0] === survivor.instanceId ? true : undefined), 'handover', (TTL + 1) * 1000 + 1500);
      const handoverMs = Date.now() - killedAt;
      assert.ok(handoverMs <= (TTL + 1) * 1000 + 500, `handover took ${handoverMs} ms`);

      // Graceful stop resigns at once: a new instance takes over well before the TTL.
      const next = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, leaseTtlSeconds: 30, stateDir: first.stateDir });
      third.push(next);
      const stoppedAt = Date.now();
      assert.equal(await survivor.stop(), 0);
      await waitUntil(async () => ((await leaders(next, token))[0] === next.instanceId ? true : undefined), 'handover after SIGTERM', 5000);
      assert.ok(Date.now() - stoppedAt < 5000);
    } finally {
      for (const p of [first, second, ...third]) await p.stop();
      removeDir(first.stateDir);
    }
  });

  it('fences a deposed leader: its writes fail once another term began, even before it notices', async () => {
    const clientA = createEtcdClient([etcd.endpoint]);
    const clientB = createEtcdClient([etcd.endpoint]);
    // Each instance's watched state holds the leader key (a control plane's holds much more).
    const stateA = new PrefixMirror(clientA, [keys.leader()], logger);
    const stateB = new PrefixMirror(clientB, [keys.leader()], logger);
    await stateA.start();
    await stateB.start();
    const a = new LeaderElection(new LeaderStore(clientA, stateA), 'a', logger);
    const b = new LeaderElection(new LeaderStore(clientB, stateB), 'b', logger);
    try {
      await clientA.delete().key(keys.leader());
      await a.start(clientA.lease(TTL));
      await b.start(clientB.lease(TTL));
      assert.equal(a.isLeader, true);
      assert.equal(b.isLeader, false);
      const put = (value: string) => ({ guards: [], writes: [{ put: '/strata/test/fenced', value }] });
      const fenced = async () => JSON.parse((await clientA.get('/strata/test/fenced').string()) ?? 'null') as unknown;
      assert.equal(await a.fencedCommit(put('by-a')), true);
      assert.equal(await fenced(), 'by-a');

      // Simulate A's lease expiring behind its back: delete the key; B campaigns and wins.
      await clientB.delete().key(keys.leader());
      await waitUntil(async () => (b.isLeader ? true : undefined), 'b leads', 3000);
      await assert.rejects(
        a.fencedCommit(put('stale')),
        (err: unknown) => err instanceof StrataError && err.code === 'NOT_LEADER',
      );
      assert.equal(a.isLeader, false);
      assert.equal(await fenced(), 'by-a', 'the stale write did not land');
      assert.equal(await b.fencedCommit(put('by-b')), true);
      assert.equal(await fenced(), 'by-b');
      // A guard of the transaction's own that fails: false, and the leader stays leader.
      assert.equal(await b.fencedCommit({ guards: [{ key: '/strata/test/fenced', revision: '0' }], writes: put('not written').writes }), false);
      assert.equal(b.isLeader, true);
      assert.equal(await fenced(), 'by-b');
    } finally {
      await a.stop();
      await b.stop();
      await stateA.stop();
      await stateB.stop();
      clientA.close();
      clientB.close();
    }
  });
});

describe('the election on its LeaderKey interface (no etcd)', () => {
  /** The leader key in memory: one holder at a time, the term a counter, guards by term only. */
  function memoryLeaderKey() {
    let held: { record: LeaderRecord; term: string } | undefined;
    let revision = 0;
    const listeners = new Set<() => void>();
    const changed = () => {
      for (const l of listeners) l();
    };
    const committed: Transaction[] = [];
    const key: LeaderKey = {
      watched: () => held,
      onChange: (listener) => {
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
      current: async () => held?.record ?? null,
      claim: async (record) => {
        if (held) return undefined;
        held = { record, term: String(++revision) };
        return held.term;
      },
      commitInTerm: async (term, transaction) => {
        if (held?.term !== term || transaction.guards.length > 0) return false;
        committed.push(transaction);
        return true;
      },
      currentTerm: async () => held?.term,
      resign: async (term) => {
        if (held?.term === term) held = undefined;
      },
    };
    return {
      key,
      committed,
      take: (instanceId: string) => {
        held = { record: { instanceId, since: new Date().toISOString() }, term: String(++revision) };
        changed();
      },
      drop: () => {
        held = undefined;
        changed();
      },
    };
  }
  const lease = { grant: async () => '1' };
  const write = { guards: [], writes: [{ put: '/strata/test/fenced', value: 'x' }] };

  it('wins the free key, fences its commits by its term, steps down when another term holds the key, and campaigns again when it is gone', async () => {
    const memory = memoryLeaderKey();
    const election = new LeaderElection(memory.key, 'a', logger);
    const seen: boolean[] = [];
    election.onChange((isLeader) => seen.push(isLeader));
    await election.start(lease);
    assert.equal(election.isLeader, true);
    assert.equal((await election.currentLeader())?.instanceId, 'a');
    assert.equal(await election.fencedCommit(write), true);
    assert.equal(await election.fencedCommit({ guards: [{ key: '/strata/test/fenced', revision: '0' }], writes: write.writes }), false, 'a guard of its own failed: false, still leader');
    assert.equal(election.isLeader, true);

    memory.take('b');
    assert.equal(election.isLeader, false, 'another term holds the key: stepped down');
    await assert.rejects(election.fencedCommit(write), (err: unknown) => err instanceof StrataError && err.code === 'NOT_LEADER');
    assert.equal(memory.committed.length, 1);

    memory.drop();
    await waitUntil(async () => (election.isLeader ? true : undefined), 'campaigns again', 1000);
    assert.deepEqual(seen, [true, false, true]);
    await election.stop();
    assert.equal(await memory.key.current(), null, 'stopping resigns the term');
  });
});
