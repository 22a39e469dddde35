// Admin endpoints API on a real etcd and on the in-memory one (describeForEveryBackend), a bootstrapped cluster and real HTTP.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import { expectError, fieldsOf, fuzzRoute, malformedBodies, startApiKit, type ApiKit } from '../../test/kits/api-test-kit.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { readKey } from '../../test/helpers/records.js';
import { createAdminEndpointsRoutes } from './admin-endpoints-routes.js';
import { AdminEndpointsService } from './admin-endpoints-service.js';
import { AdminEndpointsStore } from './admin-endpoints-store.js';

const RESERVED = [
  { from: 8443, to: 8443, purpose: 'REST API' },
  { from: 4420, to: 4420, purpose: 'NVMe/TCP target' },
  { from: 8009, to: 8009, purpose: 'NVMe/TCP discovery' },
  { from: 20000, to: 20999, purpose: 'volume ports' },
];

describeForEveryBackend('admin endpoints API', (backend) => {
  let kit: ApiKit;
  let admin: string;

  before(async () => {
    kit = await startApiKit((etcd, auth) => [
      createAdminEndpointsRoutes({ auth, adminEndpoints: new AdminEndpointsService(new AdminEndpointsStore(etcd), RESERVED) }),
    ], { backend });
    admin = kit.api.adminToken;
  });
  after(async () => {
    await kit?.close();
  });

  const create = (body: unknown, token = admin) => kit.request('POST', '/api/v2/adminEndpoints', { token, body });
  const list = async (query = '', token = admin) => {
    const reply = await kit.request('GET', `/api/v2/adminEndpoints${query}`, { token });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.deepEqual(Object.keys(reply.body), ['adminEndpoints']);
    return reply.body.adminEndpoints as any[];
  };

  test('create: {port, ips, ETag} with port a number; a port may arrive as a string', async () => {
    const created = await create({ port: 9443, ips: ['10.0.0.1', '::1', 'fe80::1'], extra: 1 });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.deepEqual(fieldsOf(created.body), ['ETag', 'ips', 'port']);
    assert.deepEqual({ port: created.body.port, ips: created.body.ips }, { port: 9443, ips: ['10.0.0.1', '::1', 'fe80::1'] });
    assert.equal(created.body.ETag, (await readKey(kit.etcd, keys.adminEndpoint(9443)))?.modRevision);
    assert.equal(created.headers.get('etag'), `"${created.body.ETag}"`);
    const fromString = await create({ port: '22', ips: ['192.168.1.10'] });
    assert.equal(fromString.status, 200, JSON.stringify(fromString.body));
    assert.equal(fromString.body.port, 22);
  });

  test('create errors: 400 for a bad port or IP list, 409 for an existing or reserved port', async () => {
    const before = await kit.snapshot();
    for (const port of [0, 65536, -1, 1.5, 'abc', '', true, [22], '1e3']) {
      expectError(await create({ port, ips: ['10.0.0.1'] }), 400, 3, /port/);
    }
    const badIps: unknown[] = [[], ['10.0.0.0/8'], ['300.1.1.1'], ['host.example'], ['10.0.0.1', '10.0.0.1'], '10.0.0.1', [1], [null], Array.from({ length: 257 }, (_, i) => `10.0.${i >> 8}.${i & 255}`)];
    for (const ips of badIps) expectError(await create({ port: 7000, ips }), 400, 3, /ips/);
    expectError(await create({ ips: ['10.0.0.1'] }), 400, 3, /port is required/);
    expectError(await create({ port: 7000 }), 400, 3, /ips is required/);
    expectError(await create({ port: null, ips: null }), 400, 3, /port is required; ips is required/);
    expectError(await create({ port: 9443, ips: ['10.0.0.2'] }), 409, 6, /9443/);
    expectError(await create({ port: 4420, ips: ['10.0.0.2'] }), 409, 6, /in use by Strata \(NVMe\/TCP target\)/);
    expectError(await create({ port: 20500, ips: ['10.0.0.2'] }), 409, 6, /volume ports/);
    expectError(await create({ port: '8443', ips: ['10.0.0.2'] }), 409, 6, /REST API/);
    assert.deepEqual(await kit.snapshot(), before, 'no refused create wrote anything');
  });

  test('list and filter by port; port 0 is no filter; a bad port is 400', async () => {
    assert.deepEqual((await list()).map((e) => e.port), [22, 9443]);
    assert.deepEqual((await list('?port=9443')).map((e) => e.port), [9443]);
    assert.deepEqual((await list('?port=1234')).map((e) => e.port), []);
    assert.deepEqual((await list('?port=0')).map((e) => e.port), [22, 9443]);
    assert.deepEqual((await list('?Port=22')).length, 2, 'query names are case-sensitive');
    for (const port of ['abc', '-1', '65536', '1.5', '22&port=23']) {
      expectError(await kit.request('GET', `/api/v2/adminEndpoints?port=${port}`, { token: admin }), 400, 3);
    }
  });

  test('get one: 404 for an unknown port, 400 for an invalid one', async () => {
    const one = await kit.request('GET', '/api/v2/adminEndpoints/9443', { token: admin });
    assert.equal(one.status, 200);
    assert.deepEqual(one.body, (await list('?port=9443'))[0]);
    expectError(await kit.request('GET', '/api/v2/adminEndpoints/9444', { token: admin }), 404, 5);
    for (const port of ['0', '65536', 'abc', '-5']) expectError(await kit.request('GET', `/api/v2/adminEndpoints/${port}`, { token: admin }), 400, 3);
  });

  test('update: replaces ips, answers the endpoint with a new ETag; If-Match; a port in the body is ignored', async () => {
    const before = (await kit.request('GET', '/api/v2/adminEndpoints/9443', { token: admin })).body;
    const put = await kit.request('PUT', '/api/v2/adminEndpoints/9443', { token: admin, body: { port: 1, ips: ['10.1.1.1'] } });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal(put.body.port, 9443);
    assert.deepEqual(put.body.ips, ['10.1.1.1']);
    assert.notEqual(put.body.ETag, before.ETag);
    assert.deepEqual((await kit.request('GET', '/api/v2/adminEndpoints/9443', { token: admin })).body, put.body);
    expectError(await kit.request('PUT', '/api/v2/adminEndpoints/9443', { token: admin, body: { ips: ['10.2.2.2'] }, headers: { 'If-Match': `"${before.ETag}"` } }), 412, 9);
    const matched = await kit.request('PUT', '/api/v2/adminEndpoints/9443', { token: admin, body: { ips: ['10.2.2.2'] }, headers: { 'If-Match': put.body.ETag } });
    assert.equal(matched.status, 200);
    const same = await kit.request('PUT', '/api/v2/adminEndpoints/9443', { token: admin, body: { ips: ['10.2.2.2'] } });
    assert.equal(same.body.ETag, matched.body.ETag, 'the same ips write nothing');
    expectError(await kit.request('PUT', '/api/v2/adminEndpoints/9444', { token: admin, body: { ips: ['10.2.2.2'] } }), 404, 5);
    expectError(await kit.request('PUT', '/api/v2/adminEndpoints/9443', { token: admin, body: {} }), 400, 3, /ips is required/);
    expectError(await kit.request('PUT', '/api/v2/adminEndpoints/9443', { token: admin, body: { ips: ['nope'] } }), 400, 3);
  });

  test('delete: If-Match, {}, then 404', async () => {
    const current = (await kit.request('GET', '/api/v2/adminEndpoints/22', { token: admin })).body;
    expectError(await kit.request('DELETE', '/api/v2/adminEndpoints/22', { token: admin, headers: { 'If-Match': '"3"' } }), 412, 9);
    const deleted = await kit.request('DELETE', '/api/v2/adminEndpoints/22', { token: admin, headers: { 'If-Match': `"${current.ETag}"` } });
    assert.equal(deleted.status, 200);
    assert.deepEqual(deleted.body, {});
    expectError(await kit.request('DELETE', '/api/v2/adminEndpoints/22', { token: admin }), 404, 5);
    expectError(await kit.request('DELETE', '/api/v2/adminEndpoints/x', { token: admin }), 400, 3);
  });

  test('permissions: cluster roles read, cluster write changes', async () => {
    const viewer = kit.api.clusterViewerToken;
    assert.equal((await kit.request('GET', '/api/v2/adminEndpoints', { token: viewer })).status, 200);
    assert.equal((await kit.request('GET', '/api/v2/adminEndpoints/9443', { token: viewer })).status, 200);
    const writers = [viewer, kit.api.projectViewerToken, await kit.token(['default:admin'])];
    for (const token of writers) {
      expectError(await create({ port: 7001, ips: ['10.0.0.1'] }, token), 403, 7);
      expectError(await kit.request('PUT', '/api/v2/adminEndpoints/9443', { token, body: { ips: ['10.0.0.1'] } }), 403, 7);
      expectError(await kit.request('DELETE', '/api/v2/adminEndpoints/9443', { token }), 403, 7);
    }
    expectError(await kit.request('GET', '/api/v2/adminEndpoints', { token: kit.api.projectViewerToken }), 403, 7);
    expectError(await kit.request('GET', '/api/v2/adminEndpoints'), 401, 16);
    expectError(await kit.request('POST', '/api/v2/adminEndpoints', { body: { port: 7001, ips: ['10.0.0.1'] } }), 401, 16);
  });

  test('fuzz: malformed POST and PUT bodies never 5xx and never change a record', async () => {
    const accepted = await fuzzRoute(kit, 'POST', '/api/v2/adminEndpoints', admin, malformedBodies(['port', 'ips'], 200, 31));
    assert.ok(accepted <= 3, `${accepted} random bodies were valid`);
    await fuzzRoute(kit, 'PUT', '/api/v2/adminEndpoints/9443', admin, malformedBodies(['ips', 'port'], 150, 32));
  });
});
