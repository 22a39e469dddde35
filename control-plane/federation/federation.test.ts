// Cluster federation routes (reserved, unavailable) on a real etcd and on the in-memory one (describeForEveryBackend), and real HTTP.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { expectError, malformedBodies, startApiKit, type ApiKit } from '../../test/kits/api-test-kit.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { createFederationRoutes, isHostPort } from './federation-routes.js';

const ROUTES: [string, string][] = [
  ['GET', '/api/v2/cf-service-credentials'],
  ['POST', '/api/v2/cflogin'],
  ['GET', '/api/v2/clusters'],
  ['POST', '/api/v2/clusters'],
  ['DELETE', `/api/v2/clusters/${randomUUID()}`],
  ['GET', '/api/v2/workflows'],
  ['GET', `/api/v2/workflows/${randomUUID()}`],
];

describeForEveryBackend('cluster federation API (unavailable)', (backend) => {
  let kit: ApiKit;
  let admin: string;

  before(async () => {
    kit = await startApiKit((_etcd, auth) => [createFederationRoutes({ auth })], { backend });
    admin = kit.api.adminToken;
  });
  after(async () => {
    await kit?.close();
  });

  const unavailable = /federation service is unavailable/;

  test('every route is 401 without a valid token, whatever the input', async () => {
    for (const [method, path] of [...ROUTES, ['DELETE', '/api/v2/clusters/not-a-uuid'], ['GET', '/api/v2/workflows?pageSize=x'], ['GET', '/api/v2/workflows/nope']] as const) {
      expectError(await kit.request(method, path, { body: { apiEndpoint: 'bad' } }), 401, 16);
      expectError(await kit.request(method, path, { token: 'not.a.jwt', rawBody: '{' }), 401, 16);
    }
  });

  test('with a valid token: GET /clusters lists none; every other route is 500 saying the service is unavailable', async () => {
    const clusters = await kit.request('GET', '/api/v2/clusters', { token: admin });
    assert.equal(clusters.status, 200);
    assert.deepEqual(clusters.body, { clusters: [] });
    expectError(await kit.request('GET', '/api/v2/cf-service-credentials', { token: admin }), 500, 13, unavailable);
    expectError(await kit.request('POST', '/api/v2/cflogin', { token: admin, body: {} }), 500, 13, unavailable);
    expectError(await kit.request('POST', '/api/v2/cflogin', { token: kit.api.projectViewerToken }), 500, 13, unavailable);
    for (const apiEndpoint of ['cluster-b.example.com:443', '10.0.0.7:8443', '[fd00::7]:443', 'b:1']) {
      expectError(await kit.request('POST', '/api/v2/clusters', { token: admin, body: { apiEndpoint } }), 500, 13, unavailable);
    }
    expectError(await kit.request('DELETE', `/api/v2/clusters/${randomUUID()}`, { token: admin }), 500, 13, unavailable);
    expectError(await kit.request('GET', '/api/v2/workflows', { token: admin }), 500, 13, unavailable);
    expectError(await kit.request('GET', '/api/v2/workflows?pageSize=10&nextPageToken=abc', { token: admin }), 500, 13, unavailable);
    expectError(await kit.request('GET', `/api/v2/workflows/${randomUUID()}`, { token: admin }), 500, 13, unavailable);
  });

  test('input is validated before the 500: apiEndpoint <host>:<port>, cid and workflowId UUIDs, pageSize an integer', async () => {
    for (const apiEndpoint of [undefined, null, '', 'host', 'host:', ':443', 'host:0', 'host:65536', 'host:abc', 'a b:80', 'fd00::7:443', '[nothost]:443', 'http://host:80', 443, ['h:1']]) {
      expectError(await kit.request('POST', '/api/v2/clusters', { token: admin, body: { apiEndpoint } }), 400, 3, /apiEndpoint/);
    }
    expectError(await kit.request('POST', '/api/v2/clusters', { token: admin, rawBody: '[1]' }), 400, 3);
    expectError(await kit.request('POST', '/api/v2/cflogin', { token: admin, rawBody: '{' }), 400, 3);
    expectError(await kit.request('DELETE', '/api/v2/clusters/not-a-uuid', { token: admin }), 400, 3, /cid/);
    for (const pageSize of ['x', '-1', '1.5', '99999999999']) {
      expectError(await kit.request('GET', `/api/v2/workflows?pageSize=${pageSize}`, { token: admin }), 400, 3, /pageSize/);
    }
    expectError(await kit.request('GET', '/api/v2/workflows/123', { token: admin }), 400, 3, /workflowId/);
    assert.equal(isHostPort('[::1]:8443'), true);
    assert.equal(isHostPort('x'.repeat(64) + '.com:80'), false, 'a DNS label is at most 63 characters');
  });

  test('roles: cluster reads need a cluster role, attach and detach cluster write', async () => {
    const project = kit.api.projectViewerToken;
    const viewer = kit.api.clusterViewerToken;
    for (const [method, path] of ROUTES.filter(([, p]) => !p.endsWith('cflogin'))) expectError(await kit.request(method, path, { token: project, body: {} }), 403, 7);
    expectError(await kit.request('POST', '/api/v2/clusters', { token: viewer, body: { apiEndpoint: 'b:1' } }), 403, 7);
    expectError(await kit.request('DELETE', `/api/v2/clusters/${randomUUID()}`, { token: viewer }), 403, 7);
    assert.equal((await kit.request('GET', '/api/v2/clusters', { token: viewer })).status, 200);
  });

  test('fuzz: malformed bodies get 400 or the 500 of the unavailable service, always the JSON error body, nothing stored', async () => {
    const before = await kit.snapshot();
    for (const path of ['/api/v2/clusters', '/api/v2/cflogin']) {
      for (const rawBody of malformedBodies(['apiEndpoint'], 120, path.length)) {
        const reply = await kit.request('POST', path, { token: admin, rawBody });
        assert.ok([400, 500].includes(reply.status), `${path} ${rawBody.slice(0, 100)} → ${reply.status}`);
        assert.equal(typeof reply.body.code, 'number');
        if (reply.status === 500) assert.match(reply.body.message, unavailable);
      }
    }
    assert.deepEqual(await kit.snapshot(), before);
  });
});
