// The agent's admin-endpoint records store, run twice: on a real etcd and on the in-memory fake
// (test/fakes/memory-etcd.ts), each with the agent's watched state. The enforcer on top of it, with
// the real control plane and nft, is admin-endpoints-enforcer.test.ts's (etcd only).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import type { AdminEndpointRecord } from '../../lib/records.js';
import { etcdBackend, memoryBackend, putText, type KvBackend } from '../../test/helpers/kv-backends.js';
import { putRecord } from '../../test/helpers/records.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { WatchedStates } from '../../test/helpers/watched-state.js';
import { AdminEndpointRecordsStore } from './admin-endpoints-store.js';

const endpoint = (port: number, ips: string[]): AdminEndpointRecord => ({ port, ips, createdAt: new Date().toISOString() });

function adminEndpointCases(name: string, open: () => Promise<KvBackend>): void {
  describe(`admin endpoint records store on ${name}`, () => {
    let client: KvClient;
    let close: KvBackend['close'] = async () => {};
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

      await putText(client, keys.adminEndpoint(2222), '{');
      await assert.rejects(store.list(), /corrupt record/);
    });
  });
}

adminEndpointCases('etcd', etcdBackend);
adminEndpointCases('the in-memory fake', memoryBackend);
