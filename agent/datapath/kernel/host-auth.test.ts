// EtcdHostAuth through its store, on a real etcd and on the in-memory fake
// (test/fakes/memory-etcd.ts), with the agent's watched state on each (no kernel: no cluster
// record, so the TLS keyring has nothing to do): the box key published once, the host keys sealed
// to it opened, a change of the record or the switch followed through the watch, a record sealed
// to another key failing closed.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseRecord } from '../../../lib/etcd/client.js';
import { ClusterStore, type ClusterReader } from '../../../lib/etcd/cluster-store.js';
import { keys } from '../../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../../lib/etcd/kv.js';
import type { ServerBoxKeyRecord, ServerHostKeysRecord } from '../../../lib/records.js';
import { newBoxKeyPair, seal } from '../../../lib/sealed-box.js';
import { etcdBackend, memoryBackend, type KvBackend } from '../../../test/helpers/kv-backends.js';
import { putRecord } from '../../../test/helpers/records.js';
import { WatchedStates } from '../../../test/helpers/watched-state.js';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { waitUntil } from '../../../test/helpers/wait.js';
import { EtcdHostAuth } from './host-auth.js';
import { HostAuthStore } from './host-auth-store.js';

const SERVER = 'c0ffee00-0000-4000-8000-000000000001';
const HOST = 'nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000000a';

/** Where the case runs, and the cluster record's reader there. */
type Backend = KvBackend & { readonly cluster: ClusterReader };

function hostAuthCases(name: string, open: () => Promise<Backend>): void {
  describe(`EtcdHostAuth on ${name}`, () => {
    let backend: Backend | undefined;
    let client: KvClient;
    const states = new WatchedStates();
    let stateDir: string;
    let auth: EtcdHostAuth;

    before(async () => {
      backend = await open();
      client = backend.client;
      stateDir = mkdtempSync(join(tmpdir(), 'host-auth-'));
      auth = new EtcdHostAuth({ store: new HostAuthStore(client, SERVER, states.of(client, SERVER)), cluster: backend.cluster, serverUUID: SERVER, stateDir, logger: silentLogger(), nvmetRoot: stateDir });
    });
    after(async () => {
      await auth?.stop();
      await states.stop();
      await backend?.close();
      rmSync(stateDir, { recursive: true, force: true });
    });

    const sealTo = async (publicKey: string, enabled: boolean, key: string) => {
      const record: ServerHostKeysRecord = {
        serverUUID: SERVER, enabled, publicKey,
        box: seal(publicKey, Buffer.from(JSON.stringify({ hosts: { [HOST]: { key, ctrlKey: '' } } })), SERVER),
      } as ServerHostKeysRecord;
      await putRecord(client, keys.serverHostKeys(SERVER), record);
    };
    const publishedBoxKey = async () => parseRecord<ServerBoxKeyRecord>('box key', (await kvOf(client).get(keys.serverBoxKey(SERVER)))?.value ?? null)!;

    it('publishes its box key, opens what is sealed to it, follows changes, and fails closed on another key', async () => {
      await auth.start();
      const published = await publishedBoxKey();
      assert.equal(published.serverUUID, SERVER);
      assert.equal(auth.current().enabled, false, 'nothing sealed, switch off: disabled');

      let changes = 0;
      auth.onChange(() => changes++);
      await sealTo(published.publicKey, true, 'DHHC-1:00:first:');
      await waitUntil(() => auth.current().hosts.get(HOST)?.key === 'DHHC-1:00:first:', 'the sealed key opened');
      assert.equal(auth.current().enabled, true);
      assert.ok(changes >= 1);

      await sealTo(newBoxKeyPair().publicKey, false, 'DHHC-1:00:other:');
      await putRecord(client, keys.featureFlag('in-band-authentication'), { name: 'in-band-authentication', enabled: true });
      await waitUntil(() => auth.current().enabled && auth.current().hosts.size === 0, 'locked out: switch on, no record sealed to this key');

      // A second agent start with the same state directory keeps the published key.
      const again = new EtcdHostAuth({ store: new HostAuthStore(client, SERVER, states.of(client, SERVER)), cluster: backend!.cluster, serverUUID: SERVER, stateDir, logger: silentLogger(), nvmetRoot: stateDir });
      await again.start();
      await again.stop();
      assert.equal((await publishedBoxKey()).createdAt, published.createdAt, 'not republished');
    });
  });
}

hostAuthCases('etcd', async () => {
  const backend = await etcdBackend();
  return { ...backend, cluster: new ClusterStore(backend.client) };
});
// No cluster record on either (the TLS keyring has nothing to do); the cluster store is still on
// the etcd client, so on the fake the case answers its read itself.
hostAuthCases('the in-memory fake', async () => ({ ...(await memoryBackend()), cluster: { read: async () => null } }));
