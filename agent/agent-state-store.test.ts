// The agent's watched state holds the cluster record and never the cluster CA (its private key),
// whose key starts with the cluster record's: after a real bootstrap (the CA written in the same
// transaction as the record) and after the CA is written again. On a real etcd and on the
// in-memory fake (test/fakes/memory-etcd.ts).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { pino } from 'pino';
import { bootstrapCluster } from '../control-plane/bootstrap/bootstrap.js';
import { BootstrapStore } from '../control-plane/bootstrap/bootstrap-store.js';
import { ClusterCaStore } from '../lib/etcd/cluster-ca-store.js';
import { ClusterStore } from '../lib/etcd/cluster-store.js';
import { keys } from '../lib/etcd/keys.js';
import { kvOf } from '../lib/etcd/kv.js';
import type { MirrorChange, PrefixMirror } from '../lib/etcd/prefix-mirror.js';
import { newClusterCa } from '../lib/tls/cluster-ca.js';
import { describeOnEveryBackend } from '../test/helpers/kv-backends.js';
import { silentLogger } from '../test/helpers/silent-logger.js';
import { TEST_SERVER } from '../test/helpers/watched-state.js';
import { agentWatchedRanges, agentWatchedState } from './agent-state-store.js';

/** Whether any range of the agent's state holds `key`. */
function holds(state: PrefixMirror, key: string): boolean {
  return agentWatchedRanges(TEST_SERVER).some((range) => state.all(typeof range === 'string' ? range : range.key).has(key));
}

describeOnEveryBackend("the agent's watched state", (suite) => {
  it('holds the cluster record alone, never the cluster CA: after bootstrap, and after the CA is written again', async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'strata-agent-state-'));
    const state = agentWatchedState(suite.client, TEST_SERVER, silentLogger('agent-state'));
    const heard: MirrorChange[] = [];
    state.onChange((changes) => heard.push(...changes));
    try {
      const { cluster } = await bootstrapCluster({
        store: new BootstrapStore(suite.client), logger: pino({ level: 'silent' }), instanceId: 'a', clusterName: 'x',
        subsystemNqnPrefix: 'nqn.2024-01.io.strata', stateDir, adminTokenTtlDays: 1,
      });
      assert.ok(await kvOf(suite.client).get(keys.clusterCa()), 'bootstrap wrote the CA');
      await state.start();
      assert.equal((await new ClusterStore(suite.client, state).read())?.UUID, cluster.UUID, 'the cluster record is read from the state');
      assert.deepEqual([...state.all(keys.cluster()).keys()], [keys.cluster()]);
      assert.equal(holds(state, keys.clusterCa()), false, 'the CA is not loaded');

      // A CA written again (a cluster without one gets one from the first control plane): its
      // event reaches the watch (every key), and is dropped.
      await kvOf(suite.client).commit({ guards: [], writes: [{ delete: keys.clusterCa() }] });
      await new ClusterCaStore(suite.client).ensure(() => newClusterCa(cluster.UUID));
      await state.catchUp();
      assert.equal(state.revision, BigInt(await kvOf(suite.client).revision()), 'the CA writes count as seen');
      assert.equal(holds(state, keys.clusterCa()), false, 'the CA is not followed');
      assert.deepEqual(heard.filter((c) => c.key === keys.clusterCa()), [], 'no change of the CA reported');
      assert.deepEqual([...state.all(keys.cluster()).keys()], [keys.cluster()]);
      assert.equal((await new ClusterStore(suite.client, state).read())?.UUID, cluster.UUID);

      // Reloaded (a watch lost): read again, still the record alone.
      await state.resync();
      assert.equal(holds(state, keys.clusterCa()), false, 'the CA is not reloaded');
      assert.deepEqual([...state.all(keys.cluster()).keys()], [keys.cluster()]);
    } finally {
      await state.stop();
      rmSync(stateDir, { recursive: true, force: true });
    }
  });
});
