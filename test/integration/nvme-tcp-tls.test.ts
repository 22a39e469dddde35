// TLS on NVMe/TCP through the real control plane (a child process, real etcd): TLS hosts and
// their PSKs (validated, encrypted in etcd, never listed), the cluster switch and its mode, the
// capability check naming a node whose kernel lacks NVMe/TCP TLS or that runs no tlshd, and what
// each server's agent is given: the PSKs sealed to its published key.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { randomTlsPsk } from '../../lib/contract/nvme-tls-psk.js';
import { randomDhchapSecret } from '../../lib/contract/dhchap.js';
import { keys } from '../../lib/etcd/keys.js';
import type { ServerHostKeysRecord } from '../../lib/records.js';
import { newBoxKeyPair, open } from '../../lib/sealed-box.js';
import { joinServer, putRecord, reportInventory } from '../helpers/records.js';
import { ALL_CAPABILITIES as ALL, startSealedFeatureCluster, type SealedFeatureCluster } from '../helpers/sealed-feature-cluster.js';
import { waitUntil } from '../helpers/wait.js';

const H1 = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;
const H2 = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;

describe('TLS on NVMe/TCP through the real control plane', () => {
  let cluster: SealedFeatureCluster;
  let client: SealedFeatureCluster['client'];
  let box: SealedFeatureCluster['box'];
  let serverUUID = '';
  const call = (method: string, path: string, body?: unknown, token?: string) => cluster.call(method, path, body, token);
  const k1 = randomTlsPsk();
  const mode = async () => (await call('GET', '/api/v2/cluster/nvmeTcpTls')).body.mode as string;
  const sealed = async (server = serverUUID, privateKeyPem = box.privateKeyPem) => {
    const text = await client.get(keys.serverTlsKeys(server)).string();
    assert.ok(text, 'a record sealed to the server');
    const record = JSON.parse(text) as ServerHostKeysRecord;
    return { required: record.enabled, hosts: (JSON.parse(open(privateKeyPem, record.box, server).toString()) as { hosts: Record<string, string> }).hosts };
  };
  const etcdDump = () => cluster.etcdDump();

  before(async () => {
    cluster = await startSealedFeatureCluster();
    ({ client, box, serverUUID } = cluster);
  });
  after(() => cluster?.stop());

  test('bad input is a 400 with the JSON error body, never echoing a key, and changes nothing', async () => {
    const body = k1.split(':')[2]!;
    const bad: [unknown, RegExp][] = [
      [{ name: 'h1', hostNQN: H1, psk: 'secret' }, /psk is not a valid TLS PSK: not of the form NVMeTLSkey-1/],
      [{ name: 'h1', hostNQN: H1, psk: k1.replace(/.{6}:$/, 'AAAAAA:') }, /CRC-32|base64/],
      [{ name: 'h1', hostNQN: H1, psk: `NVMeTLSkey-1:02:${body}:` }, /32 bytes does not fit hash 02/],
      [{ name: 'h1', hostNQN: H1, psk: randomDhchapSecret() }, /not of the form/],
      [{ name: 'h1', hostNQN: H1 }, /psk is required/],
      [{ name: 'h1', hostNQN: 'not-an-nqn', psk: k1 }, /hostNQN/],
      [{ name: 'bad name!', hostNQN: H1, psk: k1 }, /TLS host name/],
    ];
    for (const [input, message] of bad) {
      const res = await call('POST', '/api/v2/tlsHosts', input);
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.equal(res.body.code, 3);
      assert.match(res.body.message, message);
      assert.ok(!JSON.stringify(res.body).includes(body.slice(0, 30)), 'a key is never echoed');
    }
    const enable = await call('POST', '/api/v2/cluster/nvmeTcpTls/enable', {});
    assert.equal(enable.status, 400, 'requiring TLS with no TLS hosts');
    assert.match(enable.body.message, /no TLS hosts/);
    assert.deepEqual((await call('GET', '/api/v2/tlsHosts')).body, { tlsHosts: [] });
    assert.equal(await mode(), 'Disabled');
    // (The leader seals the empty state to the server meanwhile: only the switch and hosts count.)
    assert.equal(await client.get(keys.nvmeTcpTlsSwitch()).string(), null, 'nothing written');
    assert.deepEqual(await client.getAll().prefix(keys.tlsHostsPrefix()).keys(), []);
  });

  test('TLS hosts: created, listed without PSKs, stored encrypted; the PSK is read back only alone', async () => {
    const created = await call('POST', '/api/v2/tlsHosts', { name: 'h1', hostNQN: H1, psk: k1 });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.deepEqual({ ...created.body, UUID: undefined, ETag: undefined, pskUpdatedAt: undefined, creationTime: undefined }, { UUID: undefined, name: 'h1', hostNQN: H1, hasPSK: true, ETag: undefined, pskUpdatedAt: undefined, creationTime: undefined });
    assert.equal((await call('POST', '/api/v2/tlsHosts', { name: 'h1', hostNQN: H2, psk: k1 })).status, 409);
    assert.equal((await call('POST', '/api/v2/tlsHosts', { name: 'other', hostNQN: H1, psk: k1 })).status, 409, 'one NQN, one TLS host');
    for (const path of ['/api/v2/tlsHosts', '/api/v2/tlsHosts/h1']) {
      const res = await call('GET', path);
      assert.equal(res.status, 200);
      assert.ok(JSON.stringify(res.body).includes(H1) && !JSON.stringify(res.body).includes(k1), `${path} carries no PSK`);
    }
    assert.deepEqual((await call('GET', '/api/v2/tlsHostPSKs/h1')).body, { name: 'h1', hostNQN: H1, psk: k1 });
    assert.equal((await call('GET', '/api/v2/tlsHostPSKs/nope')).status, 404);
    const dump = await etcdDump();
    assert.ok(dump.includes(H1) && !dump.includes(k1) && !dump.includes(k1.split(':')[2]!), 'etcd holds the PSK only encrypted');
    assert.deepEqual(await sealed(), { required: false, hosts: { [H1]: k1 } });
  });

  test('requiring TLS needs every node able to do it: 400 naming the 6.1 node and the node without tlshd; nothing changes', async () => {
    const old = await joinServer(client, { server: { name: 'bookworm' }, nodes: [{ name: 'bookworm-n' }] });
    await reportInventory(client, old.server.UUID, { facts: { kernel: '6.1.0-56-amd64', kernelCapabilities: { ...ALL, nvmetInBandAuth: false, nvmeTcpTls: false, tlshd: false } } });
    let res = await call('POST', '/api/v2/cluster/nvmeTcpTls/enable', {});
    assert.equal(res.status, 400);
    assert.equal(res.body.code, 3);
    assert.match(res.body.message, new RegExp(`bookworm-n \\(${old.nodes[0]!.UUID}, kernel 6\\.1\\.0-56-amd64\\) lacks TLS on the NVMe/TCP target`));
    assert.ok(!res.body.message.includes('trixie-n'));
    // Upgraded to 6.12 but tlshd is not running there.
    await reportInventory(client, old.server.UUID, { facts: { kernel: '6.12.117+deb13-amd64', kernelCapabilities: { ...ALL, tlshd: false } } });
    res = await call('POST', '/api/v2/cluster/nvmeTcpTls/enable', {});
    assert.equal(res.status, 400);
    assert.match(res.body.message, /bookworm-n .* lacks the TLS handshake daemon \(tlshd, ktls-utils\) running/);
    assert.equal(await mode(), 'Disabled');
    assert.equal((await sealed()).required, false);
    await reportInventory(client, old.server.UUID, { facts: { kernel: '6.12.117+deb13-amd64', kernelCapabilities: ALL } });
  });

  test('enable and disable: the mode tells the truth; servers get the PSKs sealed to them; rotation and deletion reach them', async () => {
    assert.deepEqual(await call('POST', '/api/v2/cluster/nvmeTcpTls/enable', {}), { status: 200, body: {} });
    assert.equal(await mode(), 'Required');
    assert.deepEqual(await sealed(), { required: true, hosts: { [H1]: k1 } });
    assert.deepEqual(await call('POST', '/api/v2/cluster/nvmeTcpTls/enable', {}), { status: 200, body: {} }, 'idempotent');

    const k2 = randomTlsPsk();
    assert.equal((await call('PUT', '/api/v2/tlsHostPSKs/h1', { psk: 'NVMeTLSkey-1:01:nope:' })).status, 400);
    assert.deepEqual((await sealed()).hosts, { [H1]: k1 });
    assert.deepEqual(await call('PUT', '/api/v2/tlsHostPSKs/h1', { psk: k2 }), { status: 200, body: {} });
    assert.deepEqual((await sealed()).hosts, { [H1]: k2 });
    assert.equal((await call('PUT', '/api/v2/tlsHostPSKs/nope', { psk: k2 })).status, 404);

    // A server whose agent publishes its key later gets the PSKs too (the leader seals them).
    const late = await joinServer(client, { server: { name: 'late' }, nodes: [{ name: 'late-n' }] });
    const lateBox = newBoxKeyPair();
    await putRecord(client, keys.serverBoxKey(late.server.UUID), { serverUUID: late.server.UUID, publicKey: lateBox.publicKey, createdAt: new Date().toISOString() });
    await waitUntil(async () => (await client.get(keys.serverTlsKeys(late.server.UUID)).string()) ?? undefined, 'the late server’s sealed record', 10_000);
    assert.deepEqual(await sealed(late.server.UUID, lateBox.privateKeyPem), { required: true, hosts: { [H1]: k2 } });

    assert.deepEqual(await call('POST', '/api/v2/cluster/nvmeTcpTls/disable', {}), { status: 200, body: {} });
    assert.equal(await mode(), 'Disabled');
    assert.equal((await sealed()).required, false);
    assert.deepEqual(await call('DELETE', '/api/v2/tlsHosts/h1'), { status: 200, body: {} });
    assert.deepEqual((await sealed()).hosts, {});
    assert.deepEqual((await call('GET', '/api/v2/tlsHosts')).body, { tlsHosts: [] });
    assert.equal((await call('DELETE', '/api/v2/tlsHosts/h1')).status, 404);
    assert.ok(!(await etcdDump()).includes(k2));
  });

  test('without a valid token: 401; the PSK needs cluster write', async () => {
    assert.equal((await call('POST', '/api/v2/cluster/nvmeTcpTls/enable', {}, 'not-a-token')).status, 401);
    assert.equal((await call('GET', '/api/v2/tlsHosts', undefined, 'not-a-token')).status, 401);
  });
});
