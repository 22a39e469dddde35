// The agent's admin-endpoint records store, run twice: on a real etcd and on the in-memory fake
// (test/fakes/memory-etcd.ts), each with the agent's watched state. The enforcer on top of it, with
// the real control plane and nft, is admin-endpoints-enforcer.test.ts's (etcd only).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { EtcdKv, kvOf, type KvClient } from '../../lib/etcd/kv.js';
import type { AdminEndpointRecord } from '../../lib/records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { startEtcd } from '../../test/helpers/etcd.js';
import { putRecord } from '../../test/helpers/records.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { WatchedStates } from '../../test/helpers/watched-state.js';
import { AdminEndpointRecordsStore } from './admin-endpoints-store.js';

/** Where the cases run: the store client, and how to stop it. */
interface Backend {
  readonly client: KvClient;
  close(): Promise<void>;
}

const endpoint = (port: number, ips: string[]): AdminEndpointRecord => ({ port, ips, createdAt: new Date().toISOString() });

function adminEndpointCases(name: string, open: () => Promise<Backend>): void {
  describe(`admin endpoint records store on ${name}`, () => {
    let client: KvClient;
    let close: Backend['close'] = async () => {};
    const states = new WatchedStates();
    before(async () => ({ client, close } = await open()));
    after(async () => {
      await states.stop();
      await close();
    });

    test('lists every record in key order; follows changes under its prefix alone; a record that is not JSON fails the list', async () => {
      const store = new AdminEndpointRecordsStore(client, states.of(client));
      assert.deepEqual(await store.list(), []);
      const [ssh, web] = [endpoint(22, ['10.0.0.1']), endpoint(8443, ['10.0.0.0/24'])];
      await putRecord(client, keys.adminEndpoint(8443), web);
      await putRecord(client, keys.adminEndpoint(22), ssh);
      assert.deepEqual(await store.list(), [
        { key: keys.adminEndpoint(22), record: ssh },
        { key: keys.adminEndpoint(8443), record: web },
      ]);

      let changes = 0;
      const watch = store.watch(() => changes++, () => assert.fail('the state reloads by itself'));
      await waitUntil(() => changes >= 1, 'the watched state loaded');
      const loaded = changes;
      await putRecord(client, keys.featureFlag('in-band-authentication'), { name: 'in-band-authentication', enabled: true });
      await putRecord(client, keys.adminEndpoint(2222), endpoint(2222, []));
      await waitUntil(() => changes > loaded, 'the new endpoint seen');
      assert.equal(changes, loaded + 1, 'the flag is not an admin endpoint');
      await watch.cancel();

      const kv = kvOf(client);
      if (kv instanceof EtcdKv) await kv.etcd.put(keys.adminEndpoint(2222)).value('{');
      else (kv as MemoryEtcd).putRaw(keys.adminEndpoint(2222), '{');
      await assert.rejects(store.list(), /corrupt record/);
    });
  });
}

adminEndpointCases('etcd', async () => {
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

adminEndpointCases('the in-memory fake', async () => ({ client: new MemoryEtcd(), close: async () => {} }));
