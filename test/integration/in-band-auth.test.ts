// In-band authentication through the real control plane (a child process, real etcd): trusted
// hosts and their DH-HMAC-CHAP secrets (validated, encrypted in etcd, never listed), the
// enable/disable of the cluster and the feature flag, inBandAuthMode telling the truth, the
// capability check naming a node whose kernel lacks nvmet in-band authentication, and what each
// server's agent is given: the host keys sealed to its published key (lib/sealed-box.ts).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { randomDhchapSecret } from '../../lib/contract/dhchap.js';
import { keys } from '../../lib/etcd/keys.js';
import type { ServerHostKeysRecord } from '../../lib/records.js';
import { newBoxKeyPair, open } from '../../lib/sealed-box.js';
import { joinServer, putRecord, reportInventory } from '../helpers/records.js';
import { ALL_CAPABILITIES as ALL, startSealedFeatureCluster, type SealedFeatureCluster } from '../helpers/sealed-feature-cluster.js';
import { waitUntil } from '../helpers/wait.js';

const H1 = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;
const H2 = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;

describe('in-band authentication through the real control plane', () => {
  let cluster: SealedFeatureCluster;
  let client: SealedFeatureCluster['client'];
  let box: SealedFeatureCluster['box'];
  let serverUUID = '';
  const call = (method: string, path: string, body?: unknown, token?: string) => cluster.call(method, path, body, token);
  const s1 = randomDhchapSecret();
  const c1 = randomDhchapSecret();
  const mode = async () => [(await call('GET', '/api/v2/cluster')).body.inBandAuthMode, (await call('GET', '/api/v2/clusterinfo')).body.inBandAuthMode];
  const sealed = async () => {
    const text = await client.get(keys.serverHostKeys(serverUUID)).string();
    assert.ok(text, 'a record sealed to the server');
    const record = JSON.parse(text) as ServerHostKeysRecord;
    return { enabled: record.enabled, hosts: (JSON.parse(open(box.privateKeyPem, record.box, serverUUID).toString()) as { hosts: Record<string, { key: string; ctrlKey: string }> }).hosts };
  };
  const etcdDump = () => cluster.etcdDump();

  before(async () => {
    cluster = await startSealedFeatureCluster();
    ({ client, box, serverUUID } = cluster);
  });
  after(() => cluster?.stop());

  test('bad input is a 400 with the JSON error body, and changes nothing', async () => {
    const bad: [unknown, RegExp][] = [
      [{ name: 'h1', hostNQN: H1, secret: 'secret' }, /secret is not a valid DH-HMAC-CHAP secret/],
      [{ name: 'h1', hostNQN: H1, secret: s1.replace(/.{6}:$/, 'AAAAAA:') }, /CRC-32|base64/],
      [{ name: 'h1', hostNQN: H1, secret: 'DHHC-1:04:' + s1.slice(10) }, /not of the form/],
      [{ name: 'h1', hostNQN: H1 }, /secret is required/],
      [{ name: 'h1', hostNQN: 'not-an-nqn', secret: s1 }, /hostNQN/],
      [{ name: 'h1', hostNQN: H1, secret: s1, ctrlSecret: 'DHHC-1:01:xyz:' }, /ctrlSecret is not a valid/],
      [{ name: 'bad name!', hostNQN: H1, secret: s1 }, /trusted host name/],
    ];
    for (const [body, message] of bad) {
      const res = await call('POST', '/api/v2/projects/default/trustedHosts', body);
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.equal(res.body.code, 3);
      assert.match(res.body.message, message);
      assert.equal(res.body.error, res.body.message);
      assert.ok(!JSON.stringify(res.body).includes(s1.slice(10, 40)), 'a secret is never echoed');
    }
    assert.equal((await call('POST', '/api/v2/projects/nope/trustedHosts', { name: 'h1', hostNQN: H1, secret: s1 })).status, 404);
    const enable = await call('POST', '/api/v2/cluster/inBandAuth/enable', {});
    assert.equal(enable.status, 400, 'enabling with no trusted hosts');
    assert.match(enable.body.message, /no trusted hosts/);
    assert.deepEqual((await call('GET', '/api/v2/hosts')).body, { hosts: [] });
    assert.deepEqual(await mode(), ['Disabled', 'Disabled']);
    assert.equal(await client.get(keys.featureFlag('in-band-authentication')).string(), null, 'nothing written');
  });

  test('trusted hosts: created, listed without secrets, stored encrypted; the secret is read back only alone', async () => {
    const created = await call('POST', '/api/v2/projects/default/trustedHosts', { name: 'h1', hostNQN: H1, secret: s1, ctrlSecret: c1 });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.deepEqual(
      { ...created.body, UUID: undefined, ETag: undefined, secretUpdatedAt: undefined, creationTime: undefined },
      { UUID: undefined, name: 'h1', projectName: 'default', hostNQN: H1, hasSecret: true, hasCtrlSecret: true, ETag: undefined, secretUpdatedAt: undefined, creationTime: undefined },
    );
    assert.equal((await call('POST', '/api/v2/projects/default/trustedHosts', { name: 'h1', hostNQN: H2, secret: s1 })).status, 409);
    assert.equal((await call('POST', '/api/v2/projects/default/trustedHosts', { name: 'other', hostNQN: H1, secret: s1 })).status, 409, 'one NQN, one trusted host');
    for (const path of ['/api/v2/projects/default/trustedHosts', '/api/v2/hosts', '/api/v2/projects/default/trustedHosts/h1']) {
      const res = await call('GET', path);
      assert.equal(res.status, 200);
      const text = JSON.stringify(res.body);
      assert.ok(text.includes(H1));
      assert.ok(!text.includes(s1) && !text.includes(c1), `${path} carries no secret`);
    }
    assert.deepEqual((await call('GET', '/api/v2/projects/default/trustedHostSecrets/h1')).body, { name: 'h1', hostNQN: H1, secret: s1, ctrlSecret: c1 });
    const dump = await etcdDump();
    assert.ok(dump.includes(H1) && !dump.includes(s1) && !dump.includes(c1), 'etcd holds the secrets only encrypted');
  });

  test('enabling needs every node able to authenticate: 400 naming the 6.1 node; nothing changes', async () => {
    const old = await joinServer(client, { server: { name: 'bookworm' }, nodes: [{ name: 'bookworm-n' }] });
    await reportInventory(client, old.server.UUID, { facts: { kernel: '6.1.0-56-amd64', kernelCapabilities: { ...ALL, nvmetInBandAuth: false, nvmeTcpTls: false } } });
    for (const path of ['/api/v2/cluster/inBandAuth/enable', '/api/v2/featureFlags/in-band-authentication/enable']) {
      const res = await call('POST', path, {});
      assert.equal(res.status, 400);
      assert.equal(res.body.code, 3);
      assert.match(res.body.message, new RegExp(`bookworm-n \\(${old.nodes[0]!.UUID}, kernel 6\\.1\\.0-56-amd64\\) lacks NVMe target in-band authentication`));
      assert.ok(!res.body.message.includes('trixie-n'));
    }
    assert.deepEqual(await mode(), ['Disabled', 'Disabled']);
    assert.equal((await sealed()).enabled, false);
    // The node goes away (its server is upgraded to 6.12): the same request succeeds.
    await reportInventory(client, old.server.UUID, { facts: { kernel: '6.12.117+deb13-amd64', kernelCapabilities: ALL } });
  });

  test('enable and disable: inBandAuthMode and the feature flag tell the truth; servers get the keys sealed to them', async () => {
    assert.deepEqual(await call('POST', '/api/v2/cluster/inBandAuth/enable', {}), { status: 200, body: {} });
    assert.deepEqual(await mode(), ['Enabled', 'Enabled']);
    assert.equal((await call('GET', '/api/v2/featureFlags/in-band-authentication')).body.enabled, true);
    assert.deepEqual(await sealed(), { enabled: true, hosts: { [H1]: { key: s1, ctrlKey: c1 } } });
    assert.deepEqual(await call('POST', '/api/v2/cluster/inBandAuth/enable', {}), { status: 200, body: {} }, 'idempotent');

    // Rotation: the new secret replaces the old one for the agents; a bad one changes nothing.
    const s2 = randomDhchapSecret();
    assert.equal((await call('PUT', '/api/v2/projects/default/trustedHostSecrets/h1', { secret: 'DHHC-1:00:nope:' })).status, 400);
    assert.deepEqual((await sealed()).hosts[H1], { key: s1, ctrlKey: c1 });
    assert.deepEqual(await call('PUT', '/api/v2/projects/default/trustedHostSecrets/h1', { secret: s2 }), { status: 200, body: {} });
    assert.deepEqual((await sealed()).hosts[H1], { key: s2, ctrlKey: c1 }, 'the target secret is kept unless given');
    assert.equal((await call('PUT', '/api/v2/projects/default/trustedHostSecrets/nope', { secret: s2 })).status, 404);

    // A server whose agent publishes its key later gets the keys too (the leader seals them).
    const late = await joinServer(client, { server: { name: 'late' }, nodes: [{ name: 'late-n' }] });
    const lateBox = newBoxKeyPair();
    await putRecord(client, keys.serverBoxKey(late.server.UUID), { serverUUID: late.server.UUID, publicKey: lateBox.publicKey, createdAt: new Date().toISOString() });
    const lateRecord = await waitUntil(async () => {
      const text = await client.get(keys.serverHostKeys(late.server.UUID)).string();
      return text ? (JSON.parse(text) as ServerHostKeysRecord) : undefined;
    }, 'the late server’s sealed record', 10_000);
    assert.equal(lateRecord.enabled, true);
    assert.deepEqual(JSON.parse(open(lateBox.privateKeyPem, lateRecord.box, late.server.UUID).toString()).hosts[H1], { key: s2, ctrlKey: c1 });
    assert.throws(() => open(box.privateKeyPem, lateRecord.box, late.server.UUID), 'sealed to that server only');

    assert.deepEqual(await call('POST', '/api/v2/featureFlags/in-band-authentication/disable', {}), { status: 200, body: {} });
    assert.deepEqual(await mode(), ['Disabled', 'Disabled']);
    assert.equal((await sealed()).enabled, false);
    assert.deepEqual(await call('POST', '/api/v2/cluster/inBandAuth/disable', {}), { status: 200, body: {} });

    // Deleting the host removes it from what agents are told.
    assert.deepEqual(await call('DELETE', '/api/v2/projects/default/trustedHosts/h1'), { status: 200, body: {} });
    assert.deepEqual((await sealed()).hosts, {});
    assert.deepEqual((await call('GET', '/api/v2/hosts')).body, { hosts: [] });
    assert.ok(!(await etcdDump()).includes(s2));
  });

  test('a project with trusted hosts cannot be deleted until they are', async () => {
    assert.equal((await call('POST', '/api/v2/projects', { name: 'p2' })).status, 200);
    assert.equal((await call('POST', '/api/v2/projects/p2/trustedHosts', { name: 'h2', hostNQN: H2, secret: s1 })).status, 200);
    const refused = await call('DELETE', '/api/v2/projects/p2');
    assert.equal(refused.status, 400);
    assert.match(refused.body.message, /1 trusted host/);
    assert.deepEqual(await call('DELETE', '/api/v2/projects/p2/trustedHosts/h2'), { status: 200, body: {} });
    assert.equal((await call('DELETE', '/api/v2/projects/p2')).status, 200);
  });

  test('without a valid token: 401', async () => {
    assert.equal((await call('POST', '/api/v2/cluster/inBandAuth/enable', {}, 'not-a-token')).status, 401);
  });
});
