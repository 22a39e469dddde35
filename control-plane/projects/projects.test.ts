// Projects API on a real etcd and on the in-memory one (describeForEveryBackend), a bootstrapped cluster and real HTTP.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { StrataError } from '../../lib/errors.js';
import type { ProjectRecord } from '../../lib/records.js';
import { createCredentialsRoutes } from '../credentials/credentials-routes.js';
import { CredentialsService } from '../credentials/credentials-service.js';
import { CredentialRecordsStore } from '../credentials/credentials-store.js';
import { PoliciesStore } from '../policies/policies-store.js';
import {
  expectError,
  fieldsOf,
  fuzzRoute,
  malformedBodies,
  putSnapshot,
  putVolume,
  removeSnapshot,
  removeVolume,
  projectAndPolicyRoutes,
  startApiKit,
  type ApiKit,
} from '../../test/kits/api-test-kit.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { readKey, readText } from '../../test/helpers/records.js';
import { WatchedProjectDirectory } from './project-directory.js';
import { ProjectsStore } from './projects-store.js';

const PROJECT_FIELDS = ['UUID', 'name', 'description', 'defaultPolicies', 'ETag'].sort();

describeForEveryBackend('projects API', (backend) => {
  let kit: ApiKit;
  let admin: string;

  before(async () => {
    kit = await startApiKit((etcd, auth, cache) => {
      const { routers, projects } = projectAndPolicyRoutes(etcd, auth, cache);
      return [...routers, createCredentialsRoutes({ auth, credentials: new CredentialsService(new CredentialRecordsStore(etcd), projects) })];
    }, { backend });
    admin = kit.api.adminToken;
  });
  after(async () => {
    await kit?.close();
  });

  const create = async (body: unknown, token = admin) => kit.request('POST', '/api/v2/projects', { token, body });
  const get = async (name: string, token = admin) => kit.request('GET', `/api/v2/projects/${name}`, { token });
  const createPolicy = async (name: string, qos: Record<string, unknown> = {}) => {
    const reply = await kit.request('POST', '/api/v2/policies', {
      token: admin,
      body: { name, qoSRateLimitPolicy: { limitIOPS: { writeIOPSLimit: 100, readIOPSLimit: 200 }, ...qos } },
    });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    return reply.body.UUID as string;
  };

  test('the built-in projects are listed with exactly the wire fields; ETag is the record revision', async () => {
    const reply = await kit.request('GET', '/api/v2/projects', { token: admin });
    assert.equal(reply.status, 200);
    assert.deepEqual(Object.keys(reply.body), ['projects']);
    const byName = new Map<string, any>(reply.body.projects.map((p: any) => [p.name, p]));
    for (const name of ['default', 'system']) {
      const project = byName.get(name);
      assert.deepEqual(fieldsOf(project), PROJECT_FIELDS);
      assert.match(project.UUID, /^[0-9a-f-]{36}$/);
      assert.deepEqual(project.defaultPolicies, []);
      assert.equal(project.ETag, (await readKey(kit.etcd, keys.project(name)))?.modRevision);
    }
  });

  test('create: the response equals GET; nulls mean absent; unknown keys are ignored', async () => {
    const created = await create({ name: 'alpha', description: 'team alpha', colour: 'blue', defaultPolicies: null });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.deepEqual(fieldsOf(created.body), PROJECT_FIELDS);
    assert.equal(created.body.name, 'alpha');
    assert.equal(created.body.description, 'team alpha');
    assert.deepEqual(created.body.defaultPolicies, []);
    assert.equal(created.headers.get('etag'), `"${created.body.ETag}"`);
    const read = await get('alpha');
    assert.equal(read.status, 200);
    assert.deepEqual(read.body, created.body);

    const bare = await create({ name: 'Alpha', description: null });
    assert.equal(bare.status, 200, 'names are case-sensitive');
    assert.equal(bare.body.description, '');
    const stored = JSON.parse((await readText(kit.etcd, keys.project('alpha')))!) as ProjectRecord;
    assert.equal(stored.builtIn, false);
  });

  test('create: 409 for an existing name, 400 for a missing or illegal name or a long description', async () => {
    expectError(await create({ name: 'alpha' }), 409, 6, /alpha/);
    expectError(await create({ name: 'default' }), 409, 6);
    expectError(await create({}), 400, 3, /name is required/);
    expectError(await create({ name: null }), 400, 3, /name is required/);
    for (const name of ['', 'a b', 'a/b', '.', '..', 'a:b', 'é', 'x'.repeat(254), 42, true, ['a'], { a: 1 }]) {
      expectError(await create({ name }), 400, 3, /name/);
    }
    assert.equal((await create({ name: 'x'.repeat(253) })).status, 200, '253 characters is the limit');
    expectError(await create({ name: 'long-desc', description: 'é'.repeat(129) }), 400, 3, /256 bytes/);
    expectError(await create({ name: 'long-desc', description: 7 }), 400, 3, /description/);
    assert.equal((await create({ name: 'long-desc', description: 'é'.repeat(128) })).status, 200, '256 bytes is the limit');
  });

  test('permissions: cluster write creates; project tokens read their own projects only', async () => {
    const viewer = kit.api.clusterViewerToken;
    const alphaAdmin = await kit.token(['alpha:admin']);
    const alphaViewer = await kit.token(['alpha:viewer']);
    const noRoles = await kit.token([]);
    expectError(await create({ name: 'nope' }, ''), 401, 16);
    expectError(await kit.request('POST', '/api/v2/projects', { body: { name: 'nope' } }), 401, 16);
    expectError(await kit.request('GET', '/api/v2/projects', { token: 'garbage' }), 401, 16);
    expectError(await create({ name: 'nope' }, viewer), 403, 7);
    expectError(await create({ name: 'nope' }, alphaAdmin), 403, 7);

    const list = async (token: string) => (await kit.request('GET', '/api/v2/projects', { token })).body.projects.map((p: any) => p.name).sort();
    assert.ok((await list(viewer)).includes('system'));
    assert.deepEqual(await list(alphaAdmin), ['alpha']);
    assert.deepEqual(await list(await kit.token(['alpha:viewer', 'Alpha:admin', 'ghost:viewer'])), ['Alpha', 'alpha']);
    expectError(await kit.request('GET', '/api/v2/projects', { token: noRoles }), 403, 7);

    assert.equal((await get('alpha', alphaViewer)).status, 200);
    expectError(await get('default', alphaViewer), 403, 7);
    expectError(await get('missing-project', alphaViewer), 403, 7, /project missing-project/);
    expectError(await get('missing-project'), 404, 5);
    for (const method of ['PUT', 'DELETE']) {
      expectError(await kit.request(method, '/api/v2/projects/alpha', { token: alphaAdmin, body: {} }), 403, 7);
      expectError(await kit.request(method, '/api/v2/projects/alpha', { token: viewer, body: {} }), 403, 7);
      expectError(await kit.request(method, '/api/v2/projects/alpha', { body: {} }), 401, 16);
    }
    expectError(await get('a%20b'), 400, 3);
  });

  test('default policies: QoS by any spelling or number, must exist and be visible', async () => {
    const gold = await createPolicy('gold');
    const scoped = await createPolicy('alpha-only', { projectsNamesScope: ['alpha'] });
    const created = await create({ name: 'beta', defaultPolicies: [{ policyType: 'QoS', policyUUID: gold.toUpperCase() }] });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.deepEqual(created.body.defaultPolicies, [{ policyType: 'qosRateLimit', policyUUID: gold }]);
    for (const [i, policyType] of [2, '2', 'qosRateLimit', 'QOSRATELIMIT', 'qos', null].entries()) {
      const name = `typed-${i}`;
      const reply = await create({ name, defaultPolicies: [{ policyType, policyUUID: gold }] });
      assert.equal(reply.status, 200, `${policyType}: ${JSON.stringify(reply.body)}`);
      assert.equal(reply.body.defaultPolicies[0].policyType, 'qosRateLimit');
    }
    expectError(await create({ name: 'gamma', defaultPolicies: [{ policyType: 'snapshot', policyUUID: gold }] }), 400, 3, /snapshot/);
    expectError(await create({ name: 'gamma', defaultPolicies: [{ policyType: 0, policyUUID: gold }] }), 400, 3);
    expectError(await create({ name: 'gamma', defaultPolicies: [{ policyType: 'QoS', policyUUID: randomUUID() }] }), 404, 5, /policy/);
    expectError(await create({ name: 'gamma', defaultPolicies: [{ policyType: 'QoS', policyUUID: 'not-a-uuid' }] }), 400, 3);
    expectError(await create({ name: 'gamma', defaultPolicies: [{ policyType: 'QoS' }] }), 400, 3, /policyUUID/);
    expectError(await create({ name: 'gamma', defaultPolicies: [{ policyUUID: gold }, { policyUUID: gold }] }), 400, 3, /one entry/);
    expectError(await create({ name: 'gamma', defaultPolicies: { policyUUID: gold } }), 400, 3);
    expectError(await create({ name: 'gamma', defaultPolicies: [{ policyUUID: scoped }] }), 400, 3, /not available to project gamma/);
    assert.equal((await get('gamma')).status, 404, 'nothing was created by the refused requests');

    const put = await kit.request('PUT', '/api/v2/projects/alpha', { token: admin, body: { defaultPolicies: [{ policyType: 'QoS', policyUUID: scoped }] } });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    await kit.api.cache.sync();
    const directory = new WatchedProjectDirectory(kit.api.cache);
    assert.equal(await directory.defaultQosPolicyUUID('alpha'), scoped);
    assert.equal(await directory.defaultQosPolicyUUID('Alpha'), '');
    await directory.require('alpha');
    await assert.rejects(directory.require('nope'), (err: StrataError) => err.code === 'NOT_FOUND');
    await assert.rejects(directory.defaultQosPolicyUUID('nope'), (err: StrataError) => err.code === 'NOT_FOUND');
  });

  test('update: description and defaults, {} and a new ETag; If-Match; a no-op keeps the ETag', async () => {
    const before = (await get('Alpha')).body;
    const put = await kit.request('PUT', '/api/v2/projects/Alpha', { token: admin, body: { description: 'new words', name: 'renamed?', UUID: 'x' } });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.deepEqual(put.body, {});
    const after1 = (await get('Alpha')).body;
    assert.equal(after1.description, 'new words');
    assert.equal(after1.name, 'Alpha', 'a name in the body does not rename');
    assert.equal(after1.UUID, before.UUID);
    assert.notEqual(after1.ETag, before.ETag);
    assert.equal(put.headers.get('etag'), `"${after1.ETag}"`);

    expectError(await kit.request('PUT', '/api/v2/projects/Alpha', { token: admin, body: { description: 'x' }, headers: { 'If-Match': before.ETag } }), 412, 9);
    assert.equal((await get('Alpha')).body.description, 'new words', 'a stale If-Match changes nothing');
    // A weak tag never matches (strong comparison, issue 17); the exact one, quoted, does.
    expectError(await kit.request('PUT', '/api/v2/projects/Alpha', { token: admin, body: { description: 'matched' }, headers: { 'If-Match': `W/"${after1.ETag}"` } }), 412, 9);
    const matched = await kit.request('PUT', '/api/v2/projects/Alpha', { token: admin, body: { description: 'matched' }, headers: { 'If-Match': `"${after1.ETag}"` } });
    assert.equal(matched.status, 200);
    const current = (await get('Alpha')).body;
    const noop = await kit.request('PUT', '/api/v2/projects/Alpha', { token: admin, body: { description: 'matched', other: 1 } });
    assert.equal(noop.status, 200);
    assert.equal((await get('Alpha')).body.ETag, current.ETag, 'an update that changes nothing writes nothing');

    const cleared = await kit.request('PUT', '/api/v2/projects/alpha', { token: admin, body: { defaultPolicies: [] } });
    assert.equal(cleared.status, 200);
    assert.deepEqual((await get('alpha')).body.defaultPolicies, []);
    expectError(await kit.request('PUT', '/api/v2/projects/missing', { token: admin, body: {} }), 404, 5);
    expectError(await kit.request('PUT', '/api/v2/projects/Alpha', { token: admin, body: { description: ['x'] } }), 400, 3);
    expectError(await kit.request('PUT', '/api/v2/projects/Alpha', { token: admin, rawBody: '[1]' }), 400, 3);
  });

  test('delete: built-in projects and projects with contents are 400 and say what remains', async () => {
    expectError(await kit.request('DELETE', '/api/v2/projects/default', { token: admin }), 400, 3, /built in/);
    expectError(await kit.request('DELETE', '/api/v2/projects/system', { token: admin }), 400, 3, /built in/);
    assert.equal((await create({ name: 'busy' })).status, 200);
    const v1 = await putVolume(kit.etcd, { projectName: 'busy' });
    const v2 = await putVolume(kit.etcd, { projectName: 'busy', state: 'Deleting' });
    const s1 = await putSnapshot(kit.etcd, { projectName: 'busy' });
    const upload = await kit.request('POST', '/api/v2/projects/busy/credentials', { token: admin, body: { name: 'ci', payload: await publicPem() } });
    assert.equal(upload.status, 200, JSON.stringify(upload.body));
    const scoped = await createPolicy('busy-scoped', { projectsNamesScope: ['busy', 'alpha'] });

    expectError(await kit.request('DELETE', '/api/v2/projects/busy', { token: admin }), 400, 3, /1 volume, 1 snapshot, 1 credential, the scope of 1 policy \(busy-scoped\)/);
    await removeVolume(kit.etcd, v1);
    expectError(await kit.request('DELETE', '/api/v2/projects/busy', { token: admin }), 400, 3, /^project busy cannot be deleted: it still has 1 snapshot, 1 credential/);
    await removeSnapshot(kit.etcd, s1);
    assert.equal((await kit.request('DELETE', '/api/v2/projects/busy/credentials/ci', { token: admin })).status, 200);
    assert.equal((await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { qoSRateLimitPolicy: { projectsNamesScope: ['alpha'] } } })).status, 200);
    assert.equal(v2.state, 'Deleting');

    const current = (await get('busy')).body;
    expectError(await kit.request('DELETE', '/api/v2/projects/busy', { token: admin, headers: { 'If-Match': '"1"' } }), 412, 9);
    const deleted = await kit.request('DELETE', '/api/v2/projects/busy?', { token: admin, headers: { 'If-Match': `"${current.ETag}"` } });
    assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
    assert.deepEqual(deleted.body, {});
    expectError(await get('busy'), 404, 5);
    expectError(await kit.request('DELETE', '/api/v2/projects/busy', { token: admin }), 404, 5);
    assert.equal((await create({ name: 'busy' })).status, 200, 'the name is free again');
  });

  test('guards: a delete loses to a volume created after the count; a create loses to a policy changed after the read', async () => {
    const store = new ProjectsStore(kit.etcd);
    assert.equal((await create({ name: 'racy' })).status, 200);
    const current = (await store.get('racy'))!;
    const checkedAt = await store.currentRevision();
    const volume = await putVolume(kit.etcd, { projectName: 'racy' });
    assert.equal(await store.delete(current, checkedAt), false, 'a volume appeared after the count');
    await removeVolume(kit.etcd, volume);
    assert.equal(await store.delete(current, await store.currentRevision()), true);

    const policies = new PoliciesStore(kit.etcd);
    const uuid = await createPolicy('moving');
    const read = (await policies.get(uuid))!;
    assert.equal((await kit.request('PUT', `/api/v2/policies/${uuid}`, { token: admin, body: { description: 'changed' } })).status, 200);
    const record: ProjectRecord = { UUID: randomUUID(), name: 'racy2', description: '', defaultPolicies: [{ policyType: 'qosRateLimit', policyUUID: uuid }], builtIn: false, createdAt: '' };
    assert.equal((await store.create(record, [read])).succeeded, false, 'the policy changed after it was read');
    assert.equal((await store.create(record, [(await policies.get(uuid))!])).succeeded, true);
  });

  test('concurrent creates of one name: exactly one succeeds, the others are 409', async () => {
    const replies = await Promise.all(Array.from({ length: 12 }, (_, i) => create({ name: 'contended', description: `try ${i}` })));
    assert.deepEqual(replies.map((r) => r.status).sort(), [200, ...Array(11).fill(409)]);
    const winner = replies.find((r) => r.status === 200)!;
    assert.deepEqual((await get('contended')).body, winner.body);
  });

  test('fuzz: malformed POST and PUT bodies never 5xx and never change a record', async () => {
    const keys = ['name', 'description', 'defaultPolicies'];
    const accepted = await fuzzRoute(kit, 'POST', '/api/v2/projects', admin, malformedBodies(keys, 180, 1));
    assert.ok(accepted <= 5, `${accepted} random bodies were valid`);
    await fuzzRoute(kit, 'PUT', '/api/v2/projects/alpha', admin, malformedBodies(keys, 180, 2));
  });
});

async function publicPem(): Promise<string> {
  const { exportSPKI, generateKeyPair } = await import('jose');
  const { publicKey } = await generateKeyPair('RS256', { extractable: true });
  return exportSPKI(publicKey);
}
