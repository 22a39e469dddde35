// Authentication and roles against a real control plane and etcd (wire-conventions §6).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SignJWT, exportPKCS8, exportSPKI, generateKeyPair } from 'jose';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { CredentialRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../../test/helpers/processes.js';
import { importPrivateKey, signToken } from './tokens.js';

describe('authentication and roles', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  let rootKey: Awaited<ReturnType<typeof importPrivateKey>>;

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    rootKey = await importPrivateKey(readFileSync(join(plane.stateDir, 'root-key.pem'), 'utf8'));
  });
  after(async () => {
    await plane.stop();
    removeDir(plane.stateDir);
    await etcd.stop();
  });

  const get = (path: string, headers: Record<string, string> = {}) => fetch(`${plane.apiUrl}${path}`, { headers });
  const bearer = (token: string) => ({ Authorization: `Bearer ${token}` });
  const rootToken = (roles: string[], ttlSeconds = 600) => signToken(rootKey, { kid: 'system:root', subject: 't', roles, ttlSeconds });

  async function expectError(res: Response, status: number, code: number): Promise<void> {
    assert.equal(res.status, status);
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    const body = (await res.json()) as { error: string; code: number; message: string };
    assert.equal(body.code, code);
    assert.equal(typeof body.error, 'string');
    assert.equal(body.error, body.message);
  }

  it('accepts the bootstrap admin token', async () => {
    const res = await get('/api/v2/controlPlanes', bearer(plane.adminToken()));
    assert.equal(res.status, 200);
  });

  it('401 for a missing, malformed, expired or unverifiable token', async () => {
    await expectError(await get('/api/v2/version'), 401, 16);
    await expectError(await get('/api/v2/version', { Authorization: 'Bearer not-a-jwt' }), 401, 16);
    await expectError(await get('/api/v2/version', { Authorization: 'Token abc' }), 401, 16);
    await expectError(await get('/api/v2/version', bearer(await rootToken(['system:cluster-admin'], -120))), 401, 16);

    // Right kid, wrong key.
    const { privateKey } = await generateKeyPair('RS256');
    const forged = await signToken(privateKey, { kid: 'system:root', subject: 'x', roles: ['system:cluster-admin'], ttlSeconds: 600 });
    await expectError(await get('/api/v2/version', bearer(forged)), 401, 16);
    // Unknown credential.
    const unknown = await signToken(rootKey, { kid: 'system:nope', subject: 'x', roles: ['system:cluster-admin'], ttlSeconds: 600 });
    await expectError(await get('/api/v2/version', bearer(unknown)), 401, 16);
    // No exp claim.
    const noExp = await new SignJWT({ roles: ['system:cluster-admin'] }).setProtectedHeader({ alg: 'RS256', kid: 'system:root' }).sign(rootKey);
    await expectError(await get('/api/v2/version', bearer(noExp)), 401, 16);
    // alg none / HS256 are refused.
    const none = `${Buffer.from(JSON.stringify({ alg: 'none', kid: 'system:root' })).toString('base64url')}.${Buffer.from(JSON.stringify({ roles: ['system:cluster-admin'], exp: 9999999999 })).toString('base64url')}.`;
    await expectError(await get('/api/v2/version', bearer(none)), 401, 16);
  });

  it('403 for a valid token without the role; any valid token reads /version', async () => {
    const viewer = await rootToken(['default:viewer']);
    await expectError(await get('/api/v2/controlPlanes', bearer(viewer)), 403, 7);
    const res = await get('/api/v2/version', bearer(viewer));
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { apiVersion: 'v2.0' });
    const clusterViewer = await rootToken(['system:cluster-viewer']);
    assert.equal((await get('/api/v2/controlPlanes', bearer(clusterViewer))).status, 200);
  });

  it('accepts the token in an api_key header and as the password of basic authentication', async () => {
    const token = plane.adminToken();
    assert.equal((await get('/api/v2/controlPlanes', { api_key: token })).status, 200);
    const basic = Buffer.from(`admin:${token}`).toString('base64');
    assert.equal((await get('/api/v2/controlPlanes', { Authorization: `Basic ${basic}` })).status, 200);
    await expectError(await get('/api/v2/controlPlanes', { Authorization: `Basic ${Buffer.from('admin:wrong').toString('base64')}` }), 401, 16);
  });

  it('a project credential cannot grant cluster roles; removing it locks its tokens out', async () => {
    const { publicKey, privateKey } = await generateKeyPair('RS256', { extractable: true });
    const client = createEtcdClient([etcd.endpoint]);
    try {
      const record: CredentialRecord = { project: 'default', name: 'ci', type: 'RS256PubKey', payload: await exportSPKI(publicKey), createdAt: new Date().toISOString() };
      await client.put(keys.credential('default', 'ci')).value(JSON.stringify(record));
      const key = await importPrivateKey(await exportPKCS8(privateKey));
      const escalate = await signToken(key, { kid: 'default:ci', subject: 'p', roles: ['system:cluster-admin', 'default:admin'], ttlSeconds: 600 });
      assert.equal((await get('/api/v2/version', bearer(escalate))).status, 200, 'the token itself is valid');
      await expectError(await get('/api/v2/controlPlanes', bearer(escalate)), 403, 7);
      await client.delete().key(keys.credential('default', 'ci'));
      await expectError(await get('/api/v2/version', bearer(escalate)), 401, 16);
    } finally {
      client.close();
    }
  });

  it('unknown routes answer the JSON 404 body; /healthz needs no token', async () => {
    await expectError(await get('/api/v2/nothing-here', bearer(plane.adminToken())), 404, 5);
    const health = await get('/healthz');
    assert.equal(health.status, 200);
  });
});
