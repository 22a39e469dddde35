// The trusted hosts (in-band authentication) and the TLS hosts (TLS on NVMe/TCP) as their services
// keep them through their stores (lib/etcd/sealed-host-keys-store.ts): the host records and
// their NQN index, the switch, the host-secret key's id, and every server's record sealed to its
// box key, each change in one transaction. Run twice: on a real etcd and on the in-memory fake
// (test/fakes/memory-etcd.ts); a change losing its race to another one let in before its commit
// (MemoryEtcd.interleave) runs on the fake alone. The HTTP side (validation, permissions, the
// leader's reseal task) is test/integration/in-band-auth.test.ts and nvme-tcp-tls.test.ts.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import { randomDhchapSecret } from '../../lib/contract/dhchap.js';
import { randomTlsPsk } from '../../lib/contract/nvme-tls-psk.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../lib/etcd/kv.js';
import type { ServerHostKeysRecord } from '../../lib/records.js';
import { newBoxKeyPair, open } from '../../lib/sealed-box.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { refuses } from '../../test/fakes/domain-helpers.js';
import { startEtcdWithClient } from '../../test/helpers/etcd.js';
import type { KernelCapabilitiesService } from '../kernel-capabilities/kernel-capabilities-service.js';
import { NvmeTcpTlsService } from '../nvme-tcp-tls/nvme-tcp-tls-service.js';
import { TlsHostStore } from '../nvme-tcp-tls/tls-host-store.js';
import { HostSecretKey } from './host-secret-key.js';
import { InBandAuthService } from './in-band-auth-service.js';
import { TrustedHostStore } from './trusted-host-store.js';

/** Where the cases run: the store client, and how to stop it. */
interface Backend {
  readonly client: KvClient;
  close(): Promise<void>;
}

/** Every node can do both features: the capability check is the kernel capabilities suite's. */
const capable = { require: async () => {} } as unknown as KernelCapabilitiesService;

const nqn = () => `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;

const stored = async (client: KvClient, key: string): Promise<unknown> => {
  const kv = await kvOf(client).get(key);
  return kv && parseRecord(key, kv.value);
};

function inBandAuthOn(client: KvClient, key: HostSecretKey): InBandAuthService {
  const service: InBandAuthService = new InBandAuthService(new TrustedHostStore(client, key, (record) => service.open(record)), key, capable, async (project) => project !== 'nope');
  return service;
}

function nvmeTcpTlsOn(client: KvClient, key: HostSecretKey): NvmeTcpTlsService {
  const service: NvmeTcpTlsService = new NvmeTcpTlsService(new TlsHostStore(client, key, (record) => service.open(record)), key, capable);
  return service;
}

/** A server's agent: publishes its box key, and opens what the control plane sealed to it. */
async function publishBoxKey(client: KvClient): Promise<{ serverUUID: string; box: ReturnType<typeof newBoxKeyPair> }> {
  const serverUUID = randomUUID();
  const box = newBoxKeyPair();
  await kvOf(client).commit({ guards: [], writes: [{ put: keys.serverBoxKey(serverUUID), value: { serverUUID, publicKey: box.publicKey, createdAt: new Date().toISOString() } }] });
  return { serverUUID, box };
}

async function sealedTo<H>(client: KvClient, recordKey: string, server: { serverUUID: string; box: { privateKeyPem: string } }): Promise<{ enabled: boolean; hosts: Record<string, H> }> {
  const record = (await stored(client, recordKey)) as ServerHostKeysRecord | null;
  assert.ok(record, 'a record sealed to the server');
  return { enabled: record.enabled, hosts: (JSON.parse(open(server.box.privateKeyPem, record.box, server.serverUUID).toString()) as { hosts: Record<string, H> }).hosts };
}

function sealedHostCases(name: string, openBackend: () => Promise<Backend>): void {
  describe(`trusted and TLS hosts on ${name}`, () => {
    let client: KvClient;
    let close: Backend['close'] = async () => {};
    let stateDir = '';
    let key: HostSecretKey;
    let server: Awaited<ReturnType<typeof publishBoxKey>>;
    before(async () => {
      ({ client, close } = await openBackend());
      stateDir = mkdtempSync(join(tmpdir(), 'strata-sealed-hosts-'));
      key = HostSecretKey.load(stateDir);
    });
    after(async () => {
      await close();
      rmSync(stateDir, { recursive: true, force: true });
    });
    // Each case starts from an empty cluster with one server that published its box key.
    beforeEach(async () => {
      await kvOf(client).commit({ guards: [], writes: [{ deletePrefix: '/strata/' }] });
      server = await publishBoxKey(client);
    });

    test('trusted hosts: created with their NQN index, listed, stored encrypted, the secrets read back alone; a name or NQN taken is refused', async () => {
      const service = inBandAuthOn(client, key);
      const [h1, s1, c1] = [nqn(), randomDhchapSecret(), randomDhchapSecret()];
      const created = await service.create('default', { name: 'h1', hostNQN: h1, secret: s1, ctrlSecret: c1 });
      assert.deepEqual({ ...created, UUID: undefined, ETag: undefined, secretUpdatedAt: undefined, creationTime: undefined }, { UUID: undefined, name: 'h1', projectName: 'default', hostNQN: h1, hasSecret: true, hasCtrlSecret: true, ETag: undefined, secretUpdatedAt: undefined, creationTime: undefined });
      assert.deepEqual(await stored(client, keys.trustedHostNqn(h1)), { project: 'default', name: 'h1' });
      assert.deepEqual(await stored(client, keys.hostSecretKeyId()), { kid: key.kid }, 'the cluster\'s host-secret key named');
      const record = JSON.stringify(await stored(client, keys.trustedHost('default', 'h1')));
      assert.ok(record.includes(h1) && !record.includes(s1) && !record.includes(c1), 'the secrets stored only encrypted');
      assert.deepEqual((await service.list('default')).map((h) => h.name), ['h1']);
      assert.deepEqual(await service.list(), await service.list('default'));
      assert.deepEqual(await service.secrets('default', 'h1'), { name: 'h1', hostNQN: h1, secret: s1, ctrlSecret: c1 });
      assert.deepEqual(await sealedTo(client, keys.serverHostKeys(server.serverUUID), server), { enabled: false, hosts: { [h1]: { key: s1, ctrlKey: c1 } } });

      await refuses(service.create('default', { name: 'h1', hostNQN: nqn(), secret: s1 }), 'ALREADY_EXISTS');
      await refuses(service.create('default', { name: 'other', hostNQN: h1, secret: s1 }), 'ALREADY_EXISTS', /trusted host NQN/);
      await refuses(service.create('nope', { name: 'h2', hostNQN: nqn(), secret: s1 }), 'NOT_FOUND');
      assert.equal((await service.list()).length, 1, 'nothing written by a refusal');
    });

    test('in-band authentication: enabling needs a trusted host; on and off reach the sealed records; rotation keeps the target secret, a stale ETag is refused; a deleted host leaves them', async () => {
      const service = inBandAuthOn(client, key);
      await refuses(service.setEnabled(true, 'admin'), 'INVALID_STATE', /no trusted hosts/);
      assert.equal(await stored(client, keys.featureFlag('in-band-authentication')), null, 'nothing written');
      const [h1, s1, c1, s2] = [nqn(), randomDhchapSecret(), randomDhchapSecret(), randomDhchapSecret()];
      const created = await service.create('default', { name: 'h1', hostNQN: h1, secret: s1, ctrlSecret: c1 });

      assert.equal(await service.setEnabled(true, 'admin'), true);
      assert.equal(await service.isEnabled(), true);
      assert.equal(await service.setEnabled(true, 'admin'), false, 'idempotent');
      assert.deepEqual(await sealedTo(client, keys.serverHostKeys(server.serverUUID), server), { enabled: true, hosts: { [h1]: { key: s1, ctrlKey: c1 } } });

      await refuses(service.rotate('default', 'h1', { secret: s2 }, '1'), 'ETAG_MISMATCH');
      await service.rotate('default', 'h1', { secret: s2 }, created.ETag);
      assert.deepEqual((await sealedTo(client, keys.serverHostKeys(server.serverUUID), server)).hosts[h1], { key: s2, ctrlKey: c1 }, 'the target secret is kept unless given');
      await refuses(service.rotate('default', 'nope', { secret: s2 }), 'NOT_FOUND');

      assert.equal(await service.setEnabled(false, 'admin'), true);
      assert.equal((await sealedTo(client, keys.serverHostKeys(server.serverUUID), server)).enabled, false);
      await service.delete('default', 'h1');
      assert.equal(await stored(client, keys.trustedHostNqn(h1)), null, 'the NQN is free again');
      assert.deepEqual((await sealedTo(client, keys.serverHostKeys(server.serverUUID), server)).hosts, {});
      assert.deepEqual(await service.list(), []);
    });

    test('a server that publishes its key later gets the current state sealed to it alone (once)', async () => {
      const service = inBandAuthOn(client, key);
      const [h1, s1] = [nqn(), randomDhchapSecret()];
      await service.create('default', { name: 'h1', hostNQN: h1, secret: s1 });
      await service.setEnabled(true, 'admin');
      const late = await publishBoxKey(client);
      assert.equal(await service.resealStale(), 1);
      assert.deepEqual(await sealedTo(client, keys.serverHostKeys(late.serverUUID), late), { enabled: true, hosts: { [h1]: { key: s1, ctrlKey: '' } } });
      const record = (await stored(client, keys.serverHostKeys(late.serverUUID))) as ServerHostKeysRecord;
      assert.throws(() => open(server.box.privateKeyPem, record.box, late.serverUUID), 'sealed to that server only');
      assert.equal(await service.resealStale(), 0, 'nothing stale left');
    });

    test('a control plane whose host-secret key is not the cluster\'s changes nothing (503)', async () => {
      await inBandAuthOn(client, key).create('default', { name: 'h1', hostNQN: nqn(), secret: randomDhchapSecret() });
      const otherDir = mkdtempSync(join(tmpdir(), 'strata-sealed-hosts-'));
      try {
        const other = inBandAuthOn(client, HostSecretKey.load(otherDir));
        await refuses(other.create('default', { name: 'h2', hostNQN: nqn(), secret: randomDhchapSecret() }), 'UNAVAILABLE', /is not the cluster's/);
        assert.deepEqual((await inBandAuthOn(client, key).list()).map((h) => h.name), ['h1']);
      } finally {
        rmSync(otherDir, { recursive: true, force: true });
      }
    });

    test('TLS hosts: requiring TLS needs a host; created with their NQN index, the PSK stored encrypted and sealed to the server; rotated, deleted', async () => {
      const service = nvmeTcpTlsOn(client, key);
      await refuses(service.setRequired(true, 'admin'), 'INVALID_STATE', /no TLS hosts/);
      const [h1, k1, k2] = [nqn(), randomTlsPsk(), randomTlsPsk()];
      const created = await service.create({ name: 't1', hostNQN: h1, psk: k1 });
      assert.deepEqual({ ...created, UUID: undefined, ETag: undefined, pskUpdatedAt: undefined, creationTime: undefined }, { UUID: undefined, name: 't1', hostNQN: h1, hasPSK: true, ETag: undefined, pskUpdatedAt: undefined, creationTime: undefined });
      assert.deepEqual(await stored(client, keys.tlsHostNqn(h1)), { name: 't1' });
      assert.ok(!JSON.stringify(await stored(client, keys.tlsHost('t1'))).includes(k1), 'the PSK stored only encrypted');
      assert.deepEqual(await service.psk('t1'), { name: 't1', hostNQN: h1, psk: k1 });
      await refuses(service.create({ name: 't1', hostNQN: nqn(), psk: k1 }), 'ALREADY_EXISTS');
      await refuses(service.create({ name: 't2', hostNQN: h1, psk: k1 }), 'ALREADY_EXISTS', /TLS host NQN/);

      assert.equal(await service.setRequired(true, 'admin'), true);
      assert.equal(await service.mode(), 'Required');
      assert.equal(await service.setRequired(true, 'admin'), false, 'idempotent');
      assert.deepEqual(await sealedTo(client, keys.serverTlsKeys(server.serverUUID), server), { enabled: true, hosts: { [h1]: k1 } });
      assert.equal(await stored(client, keys.serverHostKeys(server.serverUUID)), null, 'in-band authentication\'s records are its own');

      await refuses(service.rotate('t1', k2, '1'), 'ETAG_MISMATCH');
      await service.rotate('t1', k2, created.ETag);
      assert.deepEqual((await sealedTo(client, keys.serverTlsKeys(server.serverUUID), server)).hosts, { [h1]: k2 });
      await refuses(service.delete('t1', created.ETag), 'ETAG_MISMATCH');
      await service.delete('t1');
      assert.equal(await stored(client, keys.tlsHostNqn(h1)), null);
      assert.deepEqual((await sealedTo(client, keys.serverTlsKeys(server.serverUUID), server)).hosts, {});
      await refuses(service.get('t1'), 'NOT_FOUND');
    });
  });
}

sealedHostCases('etcd', startEtcdWithClient);

sealedHostCases('the in-memory etcd', async () => ({ client: new MemoryEtcd(), close: async () => {} }));

describe('trusted hosts on the in-memory etcd, a lost race', () => {
  test('a change another one beat to the generation is decided again from what it wrote: both hosts land, sealed together', async () => {
    const memory = new MemoryEtcd();
    const stateDir = mkdtempSync(join(tmpdir(), 'strata-sealed-hosts-'));
    try {
      const key = HostSecretKey.load(stateDir);
      const server = await publishBoxKey(memory);
      const [h1, h2, s1, s2] = [nqn(), nqn(), randomDhchapSecret(), randomDhchapSecret()];
      const service = inBandAuthOn(memory, key);
      // Registers the key id first, so the race is the change's own.
      await service.create('default', { name: 'h0', hostNQN: nqn(), secret: s1 });
      let raced = 0;
      memory.interleave = async (transaction) => {
        if (!transaction.guards.some((g) => 'key' in g && g.key === keys.inBandAuthGeneration()) || raced++ > 0) return;
        await inBandAuthOn(memory, key).create('default', { name: 'h2', hostNQN: h2, secret: s2 });
      };
      await service.create('default', { name: 'h1', hostNQN: h1, secret: s1 });
      assert.equal(raced, 2, 'the first commit lost to the other change, the second won');
      assert.deepEqual((await service.list()).map((h) => h.name), ['h0', 'h1', 'h2']);
      const { hosts } = await sealedTo<{ key: string }>(memory, keys.serverHostKeys(server.serverUUID), server);
      assert.deepEqual([hosts[h1]?.key, hosts[h2]?.key], [s1, s2], 'the server told of both');
    } finally {
      rmSync(stateDir, { recursive: true, force: true });
    }
  });
});
