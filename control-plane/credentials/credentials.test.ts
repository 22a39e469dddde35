// Credentials API on a real etcd and on the in-memory one (describeForEveryBackend), a
// bootstrapped cluster and real HTTP, including the end to end effect: an uploaded key lets its
// tokens in, a deleted one locks them out.
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { after, before, test } from 'node:test';
import { exportPKCS8, exportSPKI, generateKeyPair } from 'jose';
import { keys } from '../../lib/etcd/keys.js';
import type { CredentialRecord } from '../../lib/records.js';
import { importPrivateKey, signToken } from '../auth/tokens.js';
import { PoliciesStore } from '../policies/policies-store.js';
import {
  expectError,
  fieldsOf,
  fuzzRoute,
  malformedBodies,
  startApiKit,
  type ApiKit,
  volumeUsage,
} from '../../test/kits/api-test-kit.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { readText } from '../../test/helpers/records.js';
import { createProjectsRoutes } from '../projects/projects-routes.js';
import { ProjectsService } from '../projects/projects-service.js';
import { ProjectsStore } from '../projects/projects-store.js';
import { createCredentialsRoutes } from './credentials-routes.js';
import { CredentialsService } from './credentials-service.js';
import { CredentialRecordsStore } from './credentials-store.js';

const CREDENTIAL_FIELDS = ['ID', 'name', 'payload', 'projectName', 'type'];

/** PEM without its line breaks, to compare keys whatever their line endings. */
const pem = (text: string) => text.replace(/\s+/g, '');

async function keyPair() {
  const { publicKey, privateKey } = await generateKeyPair('RS256', { extractable: true });
  return { publicPem: await exportSPKI(publicKey), privateKey: await importPrivateKey(await exportPKCS8(privateKey)), privatePem: await exportPKCS8(privateKey) };
}

describeForEveryBackend('credentials API', (backend) => {
  let kit: ApiKit;
  let admin: string;
  let p1Admin: string;

  before(async () => {
    kit = await startApiKit((etcd, auth, cache) => {
      const projects = new ProjectsStore(etcd);
      return [
        createProjectsRoutes({ auth, projects: new ProjectsService(projects, new PoliciesStore(etcd), volumeUsage(etcd, cache)) }),
        createCredentialsRoutes({ auth, credentials: new CredentialsService(new CredentialRecordsStore(etcd), projects) }),
      ];
    }, { backend });
    admin = kit.api.adminToken;
    p1Admin = await kit.token(['p1:admin']);
    for (const name of ['p1', 'p2']) assert.equal((await kit.request('POST', '/api/v2/projects', { token: admin, body: { name } })).status, 200);
  });
  after(async () => {
    await kit?.close();
  });

  const upload = (project: string, body: unknown, token = admin) => kit.request('POST', `/api/v2/projects/${project}/credentials`, { token, body });
  const tokenFor = (key: Awaited<ReturnType<typeof keyPair>>['privateKey'], kid: string, roles: string[]) => signToken(key, { kid, subject: 'ci', roles, ttlSeconds: 600 });

  test('uploading a key lets its tokens in; deleting it locks them out (over HTTP)', async () => {
    const { publicPem, privateKey } = await keyPair();
    const token = await tokenFor(privateKey, 'p1:ci', ['p1:admin']);
    expectError(await kit.request('GET', '/api/v2/projects/p1', { token }), 401, 16, /unknown credential/);

    const created = await upload('p1', { name: 'ci', type: 'RS256PubKey', payload: publicPem }, p1Admin);
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.deepEqual(fieldsOf(created.body), CREDENTIAL_FIELDS);
    assert.deepEqual({ ...created.body, payload: pem(created.body.payload) }, { projectName: 'p1', name: 'ci', ID: 'ci', type: 'RS256PubKey', payload: pem(publicPem) });
    const stored = JSON.parse((await readText(kit.etcd, keys.credential('p1', 'ci')))!) as CredentialRecord;
    assert.equal(stored.payload, created.body.payload);

    const read = await kit.request('GET', '/api/v2/projects/p1', { token });
    assert.equal(read.status, 200, JSON.stringify(read.body));
    assert.equal(read.body.name, 'p1');
    // The key was uploaded to p1, so it cannot grant anything outside p1.
    expectError(await kit.request('GET', '/api/v2/projects/p2', { token: await tokenFor(privateKey, 'p1:ci', ['p2:admin', 'system:cluster-admin']) }), 403, 7);

    const deleted = await kit.request('DELETE', '/api/v2/projects/p1/credentials/ci', { token: p1Admin });
    assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
    assert.deepEqual(deleted.body, {});
    expectError(await kit.request('GET', '/api/v2/projects/p1', { token }), 401, 16);
  });

  test('a PKCS#1 key, a base64 payload, ID for name and the type by number are accepted; the stored key is SPKI', async () => {
    const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const pkcs1 = publicKey.export({ type: 'pkcs1', format: 'pem' }).toString();
    assert.match(pkcs1, /BEGIN RSA PUBLIC KEY/);
    const created = await upload('p1', { ID: 'pkcs1', type: 1, payload: pkcs1, extra: true });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.equal(created.body.payload, publicKey.export({ type: 'spki', format: 'pem' }).toString());
    const signer = await importPrivateKey(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
    assert.equal((await kit.request('GET', '/api/v2/projects/p1', { token: await tokenFor(signer, 'p1:pkcs1', ['p1:viewer']) })).status, 200);

    const { publicPem } = await keyPair();
    const b64 = await upload('p1', { name: 'b64', type: 'rs256pubkey', payload: Buffer.from(publicPem).toString('base64') });
    assert.equal(b64.status, 200, JSON.stringify(b64.body));
    assert.equal(pem(b64.body.payload), pem(publicPem));
    const both = await upload('p1', { name: 'same', ID: 'same', type: null, payload: publicPem });
    assert.equal(both.status, 200, JSON.stringify(both.body));
  });

  test('invalid keys and bodies are 400; a taken name is 409; an unknown project is 404', async () => {
    const { publicPem, privatePem } = await keyPair();
    const weak = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
    const before = await kit.snapshot();
    const bad: [unknown, RegExp][] = [
      [{ payload: publicPem }, /name is required/],
      [{ name: 'x' }, /payload is required/],
      [{ name: 'x', payload: '' }, /payload is required/],
      [{ name: 'x', payload: 'hello' }, /neither PEM text nor base64/],
      [{ name: 'x', payload: privatePem }, /private key/],
      [{ name: 'x', payload: weak }, /2048 to 16384 bits; this one has 1024/],
      [{ name: 'x', payload: ec }, /ec key/],
      [{ name: 'x', payload: publicPem + publicPem }, /more than one PEM block/],
      [{ name: 'x', payload: '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----' }, /CERTIFICATE/],
      [{ name: 'x', payload: '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----' }, /does not decode/],
      [{ name: 'x', payload: 12 }, /payload/],
      [{ name: 'x', payload: 'A'.repeat(20_000) }, /payload/],
      [{ name: 'x', type: 'TlsCertChainPem', payload: publicPem }, /only type is RS256PubKey/],
      [{ name: 'x', type: 7, payload: publicPem }, /type/],
      [{ name: 'x', ID: 'y', payload: publicPem }, /name and ID differ/],
      [{ name: 'a:b', payload: publicPem }, /name/],
      [{ name: '..', payload: publicPem }, /name/],
    ];
    for (const [body, message] of bad) expectError(await upload('p1', body), 400, 3, message);
    expectError(await upload('p1', { name: 'b64', payload: publicPem }), 409, 6, /p1:b64/);
    expectError(await upload('ghost', { name: 'x', payload: publicPem }), 404, 5, /project ghost/);
    expectError(await upload('a b', { name: 'x', payload: publicPem }), 400, 3);
    assert.deepEqual(await kit.snapshot(), before, 'no refused upload wrote anything');
  });

  test('list and get; delete by If-Match; system:root cannot be deleted', async () => {
    const listed = await kit.request('GET', '/api/v2/projects/p1/credentials', { token: p1Admin });
    assert.equal(listed.status, 200);
    assert.deepEqual(Object.keys(listed.body), ['credentials']);
    assert.deepEqual(listed.body.credentials.map((c: any) => c.name), ['b64', 'pkcs1', 'same']);
    for (const credential of listed.body.credentials) assert.deepEqual(fieldsOf(credential), CREDENTIAL_FIELDS);
    assert.deepEqual((await kit.request('GET', '/api/v2/projects/p2/credentials', { token: admin })).body, { credentials: [] });

    const one = await kit.request('GET', '/api/v2/projects/p1/credentials/b64', { token: p1Admin });
    assert.equal(one.status, 200);
    assert.deepEqual(one.body, listed.body.credentials[0]);
    const etag = one.headers.get('etag')!;
    expectError(await kit.request('GET', '/api/v2/projects/p1/credentials/nope', { token: p1Admin }), 404, 5);
    expectError(await kit.request('GET', '/api/v2/projects/ghost/credentials', { token: admin }), 404, 5);

    expectError(await kit.request('DELETE', '/api/v2/projects/p1/credentials/b64', { token: p1Admin, headers: { 'If-Match': '"1"' } }), 412, 9);
    assert.equal((await kit.request('DELETE', '/api/v2/projects/p1/credentials/b64', { token: p1Admin, headers: { 'If-Match': etag } })).status, 200);
    expectError(await kit.request('DELETE', '/api/v2/projects/p1/credentials/b64', { token: p1Admin }), 404, 5);

    expectError(await kit.request('DELETE', '/api/v2/projects/system/credentials/root', { token: admin }), 400, 3, /installation key/);
    assert.equal((await kit.request('GET', '/api/v2/projects/system/credentials/root', { token: admin })).status, 200);
    assert.notEqual(await readText(kit.etcd, keys.credential('system', 'root')), null);
  });

  test('permissions: the project admin or a cluster admin; system credentials need a cluster admin', async () => {
    const { publicPem } = await keyPair();
    const denied = [kit.api.clusterViewerToken, await kit.token(['p1:viewer']), await kit.token(['p2:admin']), await kit.token([])];
    for (const token of denied) {
      expectError(await upload('p1', { name: 'nope', payload: publicPem }, token), 403, 7);
      expectError(await kit.request('GET', '/api/v2/projects/p1/credentials', { token }), 403, 7);
      expectError(await kit.request('GET', '/api/v2/projects/p1/credentials/pkcs1', { token }), 403, 7);
      expectError(await kit.request('DELETE', '/api/v2/projects/p1/credentials/pkcs1', { token }), 403, 7);
    }
    expectError(await upload('p1', { name: 'nope', payload: publicPem }, ''), 401, 16);
    expectError(await kit.request('GET', '/api/v2/projects/p1/credentials'), 401, 16);
    const systemAdmin = await kit.token(['system:admin']);
    expectError(await upload('system', { name: 'sneaky', payload: publicPem }, systemAdmin), 403, 7);
    expectError(await kit.request('GET', '/api/v2/projects/system/credentials', { token: systemAdmin }), 403, 7);
    assert.equal((await upload('system', { name: 'ops', payload: publicPem }, admin)).status, 200);
    assert.equal((await kit.request('DELETE', '/api/v2/projects/system/credentials/ops', { token: admin })).status, 200);
  });

  test('fuzz: malformed POST bodies never 5xx and never change a record', async () => {
    const accepted = await fuzzRoute(kit, 'POST', '/api/v2/projects/p1/credentials', p1Admin, malformedBodies(['name', 'ID', 'type', 'payload'], 200, 21));
    assert.equal(accepted, 0);
  });
});
