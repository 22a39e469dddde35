// Policies API on a real etcd and on the in-memory one (describeForEveryBackend), a bootstrapped cluster and real HTTP.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { StrataError } from '../../lib/errors.js';
import type { VolumeStatusRecord } from '../../lib/records.js';
import {
  expectError,
  fieldsOf,
  fuzzRoute,
  malformedBodies,
  putVolume,
  removeVolume,
  projectAndPolicyRoutes,
  startApiKit,
  type ApiKit,
} from '../../test/kits/api-test-kit.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { deleteKey, deleteUnder, putRecord, readKey, readText } from '../../test/helpers/records.js';
import { PoliciesStore } from './policies-store.js';
import { WatchedPolicyDirectory } from './policy-directory.js';

const POLICY_FIELDS = ['UUID', 'name', 'description', 'state', 'QoSRateLimitPolicy'].sort();

describeForEveryBackend('policies API', (backend) => {
  let kit: ApiKit;
  let admin: string;
  let p1Viewer: string;
  let p2Admin: string;

  before(async () => {
    kit = await startApiKit((etcd, auth, cache) => projectAndPolicyRoutes(etcd, auth, cache).routers, { backend });
    admin = kit.api.adminToken;
    p1Viewer = await kit.token(['p1:viewer']);
    p2Admin = await kit.token(['p2:admin']);
    for (const name of ['p1', 'p2', 'p3']) assert.equal((await kit.request('POST', '/api/v2/projects', { token: admin, body: { name } })).status, 200);
  });
  after(async () => {
    await kit?.close();
  });

  const create = (body: unknown, token = admin) => kit.request('POST', '/api/v2/policies', { token, body });
  const list = async (query = '', token = admin) => {
    const reply = await kit.request('GET', `/api/v2/policies${query}`, { token });
    assert.equal(reply.status, 200, `${query}: ${JSON.stringify(reply.body)}`);
    assert.deepEqual(Object.keys(reply.body), ['policies']);
    return reply.body.policies as any[];
  };
  const iops = (write: unknown = 1000, read: unknown = 2000) => ({ limitIOPS: { writeIOPSLimit: write, readIOPSLimit: read } });

  let gold: string;
  let scoped: string;

  test('create: the five fields, the one limit set, state Active, numbers; ETag and QoS headers', async () => {
    const reply = await create({ name: 'gold', description: 'fast', qoSRateLimitPolicy: { policyVisibility: 'Global', ...iops() } });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.deepEqual(fieldsOf(reply.body), POLICY_FIELDS);
    assert.equal(reply.body.state, 'Active');
    assert.equal(reply.body.description, 'fast');
    assert.deepEqual(reply.body.QoSRateLimitPolicy, { projectsNamesScope: [], policyVisibility: 'Global', limitIOPS: { writeIOPSLimit: 1000, readIOPSLimit: 2000 } });
    assert.equal(reply.headers.get('x-strata-qos-enforced'), 'true', 'no volume uses it: nothing is unenforced');
    gold = reply.body.UUID;
    const etag = (await readKey(kit.etcd, keys.policy(gold)))?.modRevision;
    assert.equal(reply.headers.get('etag'), `"${etag}"`);
    assert.deepEqual(JSON.parse((await readText(kit.etcd, keys.policyName('gold')))!), { UUID: gold });
  });

  test('create is lenient: numeric strings, enum numbers, nulls, unknown keys, the response spelling', async () => {
    const bw = await create({ name: 'bw', description: null, extra: [1], QoSRateLimitPolicy: { policyVisibility: 2, limitBw: { writeBWLimit: '50', readBWLimit: null }, limitIOPS: null } });
    assert.equal(bw.status, 200, JSON.stringify(bw.body));
    assert.deepEqual(bw.body.QoSRateLimitPolicy, { projectsNamesScope: [], policyVisibility: 'Global', limitBw: { writeBWLimit: 50, readBWLimit: 0 } });
    assert.equal(bw.body.description, '');
    const perGb = await create({ name: 'per-gb', qoSRateLimitPolicy: { projectsNamesScope: ['p1'], limitIOPSPerGB: { writeIOPSPerGBLimit: 4294967295, readIOPSPerGBLimit: '7' } } });
    assert.equal(perGb.status, 200, JSON.stringify(perGb.body));
    assert.deepEqual(perGb.body.QoSRateLimitPolicy, { projectsNamesScope: ['p1'], policyVisibility: 'Scoped', limitIOPSPerGB: { writeIOPSPerGBLimit: 4294967295, readIOPSPerGBLimit: 7 } });
    scoped = perGb.body.UUID;
    const byName = await create({ name: 'scoped-by-name', qoSRateLimitPolicy: { policyVisibility: 'scoped', projectsNamesScope: ['p1', 'p3'], ...iops('0', 0) } });
    assert.equal(byName.status, 200, JSON.stringify(byName.body));
    assert.equal(byName.body.QoSRateLimitPolicy.policyVisibility, 'Scoped');
    const unlimited = await create({ name: 'unlimited', qoSRateLimitPolicy: { limitIOPS: {} } });
    assert.deepEqual(unlimited.body.QoSRateLimitPolicy.limitIOPS, { writeIOPSLimit: 0, readIOPSLimit: 0 }, 'absent limits are 0, unlimited');
  });

  test('create errors: 400 for missing or bad input, 404 for an unknown scoped project, 409 for a taken name', async () => {
    const before = await kit.snapshot();
    const bad: [unknown, RegExp][] = [
      [{ qoSRateLimitPolicy: iops() }, /name is required/],
      [{ name: 'a b', qoSRateLimitPolicy: iops() }, /name/],
      [{ name: 'x'.repeat(254), qoSRateLimitPolicy: iops() }, /name/],
      [{ name: 'n' }, /qoSRateLimitPolicy is required/],
      [{ name: 'n', qoSRateLimitPolicy: null }, /qoSRateLimitPolicy is required/],
      [{ name: 'n', qoSRateLimitPolicy: {} }, /one of limitIOPS, limitBw, limitIOPSPerGB/],
      [{ name: 'n', qoSRateLimitPolicy: 'fast' }, /qoSRateLimitPolicy/],
      [{ name: 'n', qoSRateLimitPolicy: { ...iops(), limitBw: { writeBWLimit: 1 } } }, /exactly one/],
      [{ name: 'n', qoSRateLimitPolicy: iops(-1) }, /writeIOPSLimit/],
      [{ name: 'n', qoSRateLimitPolicy: iops(4294967296) }, /writeIOPSLimit/],
      [{ name: 'n', qoSRateLimitPolicy: iops(1.5) }, /writeIOPSLimit/],
      [{ name: 'n', qoSRateLimitPolicy: iops('ten') }, /writeIOPSLimit/],
      [{ name: 'n', qoSRateLimitPolicy: { limitIOPS: [1, 2] } }, /limitIOPS/],
      [{ name: 'n', qoSRateLimitPolicy: { policyVisibility: 'Unavailable', ...iops() } }, /Scoped or Global/],
      [{ name: 'n', qoSRateLimitPolicy: { policyVisibility: 0, ...iops() } }, /Scoped or Global/],
      [{ name: 'n', qoSRateLimitPolicy: { policyVisibility: 'Private', ...iops() } }, /policyVisibility/],
      [{ name: 'n', qoSRateLimitPolicy: { policyVisibility: 'Scoped', ...iops() } }, /at least one project/],
      [{ name: 'n', qoSRateLimitPolicy: { policyVisibility: 'Global', projectsNamesScope: ['p1'], ...iops() } }, /only to Scoped/],
      [{ name: 'n', qoSRateLimitPolicy: { projectsNamesScope: ['p1', 'p1'], ...iops() } }, /repeat/],
      [{ name: 'n', qoSRateLimitPolicy: { projectsNamesScope: 'p1', ...iops() } }, /projectsNamesScope/],
      [{ name: 'n', qoSRateLimitPolicy: { projectsNamesScope: ['a/b'], ...iops() } }, /projectsNamesScope/],
      [{ name: 'n', description: 'é'.repeat(129), qoSRateLimitPolicy: iops() }, /256 bytes/],
    ];
    for (const [body, message] of bad) expectError(await create(body), 400, 3, message);
    expectError(await create({ name: 'n', qoSRateLimitPolicy: { projectsNamesScope: ['p1', 'ghost'], ...iops() } }), 404, 5, /project ghost/);
    expectError(await create({ name: 'gold', qoSRateLimitPolicy: iops() }), 409, 6, /gold/);
    assert.deepEqual(await kit.snapshot(), before, 'no refused create wrote anything');
    assert.equal((await create({ name: 'n', description: 'é'.repeat(128), qoSRateLimitPolicy: iops() })).status, 200, '256 bytes is allowed');
  });

  test('list: five fields per item; filters by UUID, name and projectName; 404 for no match or unknown project', async () => {
    const all = await list();
    assert.ok(all.length >= 6);
    for (const item of all) {
      assert.deepEqual(fieldsOf(item), POLICY_FIELDS);
      assert.equal(Object.keys(item.QoSRateLimitPolicy).length, 3, 'scope, visibility and the one limit');
    }
    assert.deepEqual((await list(`?UUID=${gold}`)).map((p) => p.name), ['gold']);
    assert.deepEqual((await list(`?UUID=${gold.toUpperCase()}`)).map((p) => p.name), ['gold']);
    assert.deepEqual((await list('?name=bw')).map((p) => p.name), ['bw']);
    const forP1 = (await list('?projectName=p1')).map((p) => p.name).sort();
    assert.ok(forP1.includes('per-gb') && forP1.includes('gold') && forP1.includes('scoped-by-name'));
    const forP2 = (await list('?projectName=p2')).map((p) => p.name);
    assert.ok(!forP2.includes('per-gb') && forP2.includes('gold'));
    assert.deepEqual((await list('?projectname=p2&uuid=x')).length, all.length, 'query names are case-sensitive; unknown ones ignored');
    expectError(await kit.request('GET', `/api/v2/policies?UUID=${randomUUID()}`, { token: admin }), 404, 5);
    expectError(await kit.request('GET', '/api/v2/policies?name=nothing', { token: admin }), 404, 5);
    expectError(await kit.request('GET', '/api/v2/policies?projectName=ghost', { token: admin }), 404, 5, /project ghost/);
    expectError(await kit.request('GET', '/api/v2/policies?UUID=not-a-uuid', { token: admin }), 400, 3);
    expectError(await kit.request('GET', '/api/v2/policies?name=a%20b', { token: admin }), 400, 3);
    expectError(await kit.request('GET', '/api/v2/policies?name=a&name=b', { token: admin }), 400, 3);
  });

  test('visibility: project tokens see Global and their Scoped policies, with the scope masked', async () => {
    const seenBy = async (token: string, query = '') => (await list(query, token)).map((p) => p.name).sort();
    const p1 = await seenBy(p1Viewer);
    assert.ok(p1.includes('per-gb') && p1.includes('gold'));
    const p2 = await seenBy(p2Admin);
    assert.ok(!p2.includes('per-gb') && !p2.includes('scoped-by-name') && p2.includes('gold'));
    const masked = (await list('', p1Viewer)).find((p) => p.name === 'per-gb');
    assert.deepEqual(masked.QoSRateLimitPolicy.projectsNamesScope, []);
    assert.equal(masked.QoSRateLimitPolicy.policyVisibility, 'Unavailable');
    const viewerSees = (await list('', kit.api.clusterViewerToken)).find((p) => p.name === 'per-gb');
    assert.deepEqual(viewerSees.QoSRateLimitPolicy.projectsNamesScope, ['p1']);

    expectError(await kit.request('GET', `/api/v2/policies/${scoped}`, { token: p2Admin }), 404, 5);
    expectError(await kit.request('GET', `/api/v2/policies?UUID=${scoped}`, { token: p2Admin }), 404, 5);
    expectError(await kit.request('GET', '/api/v2/policies?projectName=p1', { token: p2Admin }), 403, 7);
    assert.deepEqual(await seenBy(p1Viewer, '?projectName=p1'), p1);
    expectError(await kit.request('GET', '/api/v2/policies', { token: await kit.token([]) }), 403, 7);
    expectError(await kit.request('GET', '/api/v2/policies'), 401, 16);
    for (const token of [p1Viewer, p2Admin, kit.api.clusterViewerToken]) {
      expectError(await create({ name: 'denied', qoSRateLimitPolicy: iops() }, token), 403, 7);
      expectError(await kit.request('PUT', `/api/v2/policies/${gold}`, { token, body: {} }), 403, 7);
      expectError(await kit.request('DELETE', `/api/v2/policies/${gold}`, { token }), 403, 7);
    }
    expectError(await kit.request('DELETE', `/api/v2/policies/${gold}`), 401, 16);
  });

  test('get one: by UUID or by name (trailing slash); five fields plus ETag', async () => {
    const reply = await kit.request('GET', `/api/v2/policies/${gold}`, { token: admin });
    assert.equal(reply.status, 200);
    assert.deepEqual(fieldsOf(reply.body), [...POLICY_FIELDS, 'ETag'].sort());
    assert.equal(reply.headers.get('etag'), `"${reply.body.ETag}"`);
    assert.equal(reply.headers.get('x-strata-qos-enforced'), 'true', 'no volume uses it: nothing is unenforced');
    const byName = await kit.request('GET', '/api/v2/policies/?name=gold', { token: admin });
    assert.equal(byName.status, 200, JSON.stringify(byName.body));
    assert.deepEqual(byName.body, reply.body);
    const listed = await kit.request('GET', '/api/v2/policies/', { token: admin });
    assert.ok(Array.isArray(listed.body.policies), 'a trailing slash without UUID or name is the list');
    assert.equal((await kit.request('GET', `/api/v2/policies/${scoped}?projectName=p1`, { token: p1Viewer })).status, 200);
    expectError(await kit.request('GET', `/api/v2/policies/${scoped}?projectName=p2`, { token: admin }), 404, 5);
    expectError(await kit.request('GET', `/api/v2/policies/${gold}?name=bw`, { token: admin }), 400, 3);
    expectError(await kit.request('GET', `/api/v2/policies/${randomUUID()}`, { token: admin }), 404, 5);
    expectError(await kit.request('GET', '/api/v2/policies/not-a-uuid', { token: admin }), 400, 3);
  });

  test('update: {} and a new ETag; fields absent keep their value; If-Match; switching visibility', async () => {
    const first = (await kit.request('GET', `/api/v2/policies/${scoped}`, { token: admin })).body;
    const put = await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { description: 'per GB', name: 'ignored', qoSRateLimitPolicy: { limitBw: { writeBWLimit: '10' } } } });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.deepEqual(put.body, {});
    const second = (await kit.request('GET', `/api/v2/policies/${scoped}`, { token: admin })).body;
    assert.equal(put.headers.get('etag'), `"${second.ETag}"`);
    assert.equal(second.name, 'per-gb');
    assert.equal(second.description, 'per GB');
    assert.deepEqual(second.QoSRateLimitPolicy, { projectsNamesScope: ['p1'], policyVisibility: 'Scoped', limitBw: { writeBWLimit: 10, readBWLimit: 0 } });
    assert.notEqual(second.ETag, first.ETag);

    expectError(await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { description: 'x' }, headers: { 'If-Match': `"${first.ETag}"` } }), 412, 9);
    const noop = await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { description: 'per GB' }, headers: { 'If-Match': second.ETag } });
    assert.equal(noop.status, 200);
    assert.equal(noop.headers.get('etag'), `"${second.ETag}"`, 'no change, no write');

    const widened = await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { QoSRateLimitPolicy: { projectsNamesScope: ['p1', 'p2'] } } });
    assert.equal(widened.status, 200, JSON.stringify(widened.body));
    const global = await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { qoSRateLimitPolicy: { policyVisibility: 'Global' } } });
    assert.equal(global.status, 200, JSON.stringify(global.body));
    assert.deepEqual((await kit.request('GET', `/api/v2/policies/${scoped}`, { token: admin })).body.QoSRateLimitPolicy.projectsNamesScope, [], 'Global drops the scope');
    expectError(await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { qoSRateLimitPolicy: { projectsNamesScope: ['p1'] } } }), 400, 3, /only to Scoped/);
    expectError(await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { qoSRateLimitPolicy: { policyVisibility: 'Scoped' } } }), 400, 3, /at least one project/);
    expectError(await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { qoSRateLimitPolicy: { policyVisibility: 'Scoped', projectsNamesScope: ['nobody'] } } }), 404, 5);
    const back = await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { qoSRateLimitPolicy: { policyVisibility: 'Scoped', projectsNamesScope: ['p1'] } } });
    assert.equal(back.status, 200, JSON.stringify(back.body));
    expectError(await kit.request('PUT', `/api/v2/policies/${randomUUID()}`, { token: admin, body: {} }), 404, 5);
    expectError(await kit.request('PUT', '/api/v2/policies/nope', { token: admin, body: {} }), 400, 3);
  });

  test('a policy that is a project default cannot be narrowed away from it or deleted; one used by volumes cannot be deleted', async () => {
    const setDefault = await kit.request('PUT', '/api/v2/projects/p1', { token: admin, body: { defaultPolicies: [{ policyType: 'QoS', policyUUID: scoped }] } });
    assert.equal(setDefault.status, 200, JSON.stringify(setDefault.body));
    expectError(
      await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { qoSRateLimitPolicy: { projectsNamesScope: ['p3'] } } }),
      400, 3, /default policy of project\(s\) p1/,
    );
    expectError(await kit.request('DELETE', `/api/v2/policies/${scoped}`, { token: admin }), 400, 3, /project\(s\) p1 as their default/);

    const volume = await putVolume(kit.etcd, { projectName: 'p2', qosPolicyUUID: gold });
    const deleting = await putVolume(kit.etcd, { projectName: 'p2', qosPolicyUUID: gold, state: 'Deleting' });
    expectError(await kit.request('DELETE', `/api/v2/policies/${gold}`, { token: admin }), 400, 3, /used by 1 volume$/);
    await removeVolume(kit.etcd, volume);
    await removeVolume(kit.etcd, deleting);
  });

  test('delete: If-Match, {}, the name is free again, then 404', async () => {
    const current = (await kit.request('GET', `/api/v2/policies/${gold}`, { token: admin })).body;
    expectError(await kit.request('DELETE', `/api/v2/policies/${gold}`, { token: admin, headers: { 'If-Match': '"12"' } }), 412, 9);
    const deleted = await kit.request('DELETE', `/api/v2/policies/${gold}`, { token: admin, headers: { 'If-Match': `"${current.ETag}"` } });
    assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
    assert.deepEqual(deleted.body, {});
    assert.equal(await readText(kit.etcd, keys.policyName('gold')), null, 'the name index goes with it');
    expectError(await kit.request('GET', `/api/v2/policies/${gold}`, { token: admin }), 404, 5);
    expectError(await kit.request('DELETE', `/api/v2/policies/${gold}`, { token: admin }), 404, 5);
    const again = await create({ name: 'gold', qoSRateLimitPolicy: iops() });
    assert.equal(again.status, 200);
    gold = again.body.UUID;
  });

  test('guards: a delete loses to a volume written after the count', async () => {
    const store = new PoliciesStore(kit.etcd);
    const current = (await store.get(gold))!;
    const checkedAt = await store.currentRevision();
    const volume = await putVolume(kit.etcd, { projectName: 'p3', qosPolicyUUID: gold });
    assert.equal(await store.delete(current, checkedAt), false);
    await removeVolume(kit.etcd, volume);
  });

  test('PolicyDirectory: resolve by UUID or name for a project; nameOf', async () => {
    await kit.api.cache.sync();
    const directory = new WatchedPolicyDirectory(kit.api.cache);
    assert.deepEqual(await directory.resolve('p2', { UUID: gold }), { UUID: gold, name: 'gold' });
    assert.deepEqual(await directory.resolve('p2', { name: 'gold' }), { UUID: gold, name: 'gold' });
    assert.deepEqual(await directory.resolve('p1', { UUID: scoped.toUpperCase(), name: 'per-gb' }), { UUID: scoped, name: 'per-gb' });
    const code = (expected: string) => (err: StrataError) => err.code === expected;
    await assert.rejects(directory.resolve('p2', { UUID: scoped }), code('INVALID_ARGUMENT'));
    await assert.rejects(directory.resolve('p1', { UUID: gold, name: 'per-gb' }), code('INVALID_ARGUMENT'));
    await assert.rejects(directory.resolve('p1', {}), code('INVALID_ARGUMENT'));
    await assert.rejects(directory.resolve('p1', { UUID: randomUUID() }), code('NOT_FOUND'));
    await assert.rejects(directory.resolve('p1', { name: 'nothing' }), code('NOT_FOUND'));
    assert.equal(await directory.nameOf(gold), 'gold');
    assert.equal(await directory.nameOf(randomUUID()), '');
    assert.equal(await directory.nameOf(''), '');
  });

  test('concurrent creates of one name: exactly one succeeds, the others are 409', async () => {
    const replies = await Promise.all(Array.from({ length: 12 }, () => create({ name: 'contended', qoSRateLimitPolicy: iops() })));
    assert.deepEqual(replies.map((r) => r.status).sort(), [200, ...Array(11).fill(409)]);
    assert.equal((await list('?name=contended')).length, 1);
  });

  test('update errors: negative, fractional or too large limits, two limit kinds, an unknown scoped project: 4xx and nothing changed', async () => {
    const before = await kit.snapshot();
    const bad: [unknown, RegExp][] = [
      [{ qoSRateLimitPolicy: iops(-5) }, /writeIOPSLimit/],
      [{ qoSRateLimitPolicy: { limitBw: { readBWLimit: 0.5 } } }, /readBWLimit/],
      [{ qoSRateLimitPolicy: { limitIOPSPerGB: { writeIOPSPerGBLimit: 4294967296 } } }, /writeIOPSPerGBLimit/],
      [{ qoSRateLimitPolicy: { ...iops(), limitIOPSPerGB: { writeIOPSPerGBLimit: 1 } } }, /exactly one/],
    ];
    for (const [body, message] of bad) expectError(await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body }), 400, 3, message);
    expectError(await kit.request('PUT', `/api/v2/policies/${scoped}`, { token: admin, body: { qoSRateLimitPolicy: { projectsNamesScope: ['p1', 'ghost'] } } }), 404, 5, /project ghost/);
    assert.deepEqual(await kit.snapshot(), before, 'no refused update wrote anything');
  });

  test('state: Active only while every volume the policy is in effect for reports it enforced; Updating while reports lag; Failed where it cannot be', async () => {
    const made = await create({ name: 'honest', qoSRateLimitPolicy: { policyVisibility: 'Global', limitIOPSPerGB: { writeIOPSPerGBLimit: 2, readIOPSPerGBLimit: 4 } } });
    assert.equal(made.status, 200, JSON.stringify(made.body));
    const uuid = made.body.UUID;
    const stateOf = async (id = uuid) => {
      const reply = await kit.request('GET', `/api/v2/policies/${id}`, { token: admin });
      return [reply.body.state, reply.headers.get('x-strata-qos-enforced')];
    };
    const enforcement = async (token = admin) => {
      const reply = await kit.request('GET', `/api/v2/policies/${uuid}/enforcement`, { token });
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      return reply.body.volumes as any[];
    };
    assert.deepEqual([made.body.state, made.headers.get('x-strata-qos-enforced')], ['Active', 'true'], 'no volume uses it: nothing is unenforced');

    const [n1, n2] = [randomUUID(), randomUUID()];
    const volume = await putVolume(kit.etcd, { projectName: 'p1', qosPolicyUUID: uuid, sizeBytes: String(10 * 10 ** 9), placement: { nodeList: [n1, n2], primaryNodeUUID: n1, nsid: 7, port: 20007 } });
    const limits = (readIops: number, writeIops: number) => ({ readIops, writeIops, readBytesPerSecond: 0, writeBytesPerSecond: 0 });
    const report = async (node: string, qos?: VolumeStatusRecord['qos']) => {
      const status: VolumeStatusRecord = {
        volumeUUID: volume.UUID, nodeUUID: node, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [],
        logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: new Date().toISOString(), ...(qos ? { qos } : {}),
      };
      await putRecord(kit.etcd, keys.volumeStatus(volume.UUID, node), status);
    };
    assert.deepEqual(await stateOf(), ['Updating', 'false'], 'placed, nothing reported yet');
    const [pending] = await enforcement();
    assert.deepEqual({ ...pending, reason: '' }, { UUID: volume.UUID, name: volume.name, projectName: 'p1', policyUUID: uuid, nodeUUID: n1, state: 'Pending', reason: '', limits: limits(40, 20) });
    assert.match(pending.reason, new RegExp(`node ${n1} \\(primary\\) has not reported`));

    await report(n1);
    await report(n2, { state: 'Enforced', reason: '', limits: limits(40, 20) });
    assert.deepEqual(await stateOf(), ['Updating', 'false'], 'a primary reporting no QoS (an older agent) or a replica enforcing: not enforced');
    await report(n1, { state: 'Enforced', reason: '', limits: limits(40, 20) });
    assert.deepEqual(await stateOf(), ['Active', 'true']);
    assert.deepEqual((await enforcement()).map((v) => [v.state, v.reason]), [['Enforced', '']]);

    // A policy PUT: Updating until the primary reports the new limits (10 GB × 3 write IOPS per GB).
    assert.equal((await kit.request('PUT', `/api/v2/policies/${uuid}`, { token: admin, body: { qoSRateLimitPolicy: { limitIOPSPerGB: { writeIOPSPerGBLimit: 3 } } } })).status, 200);
    assert.deepEqual(await stateOf(), ['Updating', 'false']);
    assert.match((await enforcement())[0].reason, /still enforces earlier limits/);
    await report(n1, { state: 'Enforced', reason: '', limits: limits(0, 30) });
    assert.deepEqual(await stateOf(), ['Active', 'true']);

    // The primary cannot enforce it: Failed, and the volume's entry says where and why.
    const why = `node ${n1}: the kernel (6.1.0-56-amd64) has no ublk`;
    await report(n1, { state: 'NotEnforced', reason: why, limits: limits(0, 30) });
    assert.deepEqual(await stateOf(), ['Failed', 'false']);
    assert.deepEqual((await enforcement()).map((v) => [v.state, v.reason]), [['NotEnforced', why]]);
    const listed = await kit.request('GET', '/api/v2/policies?name=honest', { token: admin });
    assert.deepEqual([listed.body.policies[0].state, listed.headers.get('x-strata-qos-enforced')], ['Failed', 'false']);

    // A replicated volume's primary is its replica set's: after a failover, the new primary's report decides.
    await putRecord(kit.etcd, keys.replicaSet(volume.UUID), { volumeUUID: volume.UUID, epoch: 2, primaryNodeUUID: n2, inSync: [n2], reason: 'failover', announced: 'Unknown', updatedAt: new Date().toISOString() });
    assert.deepEqual(await stateOf(), ['Updating', 'false'], 'the new primary still reports the earlier limits');
    await report(n2, { state: 'Enforced', reason: '', limits: limits(0, 30) });
    assert.deepEqual(await stateOf(), ['Active', 'true']);

    // Only volumes of the caller's projects are listed; a volume that is Failed serves nothing and does not count.
    assert.equal((await enforcement(p1Viewer)).length, 1);
    assert.deepEqual(await enforcement(p2Admin), []);
    expectError(await kit.request('GET', `/api/v2/policies/${randomUUID()}/enforcement`, { token: admin }), 404, 5);
    await putRecord(kit.etcd, keys.volume(volume.UUID), { ...volume, state: 'Failed' });
    await report(n2, { state: 'NotEnforced', reason: 'gone', limits: limits(0, 30) });
    assert.deepEqual(await stateOf(), ['Active', 'true']);

    // The project default counts too: a p1 volume naming no policy is under p1's default.
    const plain = await putVolume(kit.etcd, { projectName: 'p1', placement: { nodeList: [n1], primaryNodeUUID: n1, nsid: 8, port: 20008 } });
    assert.deepEqual(await stateOf(scoped), ['Updating', 'false'], "p1's default policy is in effect for it, not reported yet");
    for (const v of [volume, plain]) {
      await removeVolume(kit.etcd, v);
      await deleteUnder(kit.etcd, keys.volumeStatusPrefix(v.UUID));
    }
    await deleteKey(kit.etcd, keys.replicaSet(volume.UUID));
    assert.deepEqual(await stateOf(scoped), ['Active', 'true']);
  });

  test('state: a policy whose limits are all 0 is Active once the primary reports no stage (bench/qos)', async () => {
    const made = await create({ name: 'all-zero', qoSRateLimitPolicy: { policyVisibility: 'Global', limitIOPS: { writeIOPSLimit: 0, readIOPSLimit: 0 } } });
    assert.equal(made.status, 200, JSON.stringify(made.body));
    const uuid = made.body.UUID;
    const n1 = randomUUID();
    const volume = await putVolume(kit.etcd, { projectName: 'p1', qosPolicyUUID: uuid, placement: { nodeList: [n1], primaryNodeUUID: n1, nsid: 9, port: 20009 } });
    const stateOf = async () => (await kit.request('GET', `/api/v2/policies/${uuid}`, { token: admin })).body.state;
    const report = async (qos?: VolumeStatusRecord['qos']) => {
      const status: VolumeStatusRecord = {
        volumeUUID: volume.UUID, nodeUUID: n1, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [],
        logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: new Date().toISOString(), ...(qos ? { qos } : {}),
      };
      await putRecord(kit.etcd, keys.volumeStatus(volume.UUID, n1), status);
    };
    // The stage of earlier limits still runs: behind.
    await report({ state: 'Enforced', reason: '', limits: { readIops: 100, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 0 } });
    assert.equal(await stateOf(), 'Updating');
    // Removed: the agent reports no QoS for limits that are all 0 (it stayed Updating for ever).
    await report();
    assert.equal(await stateOf(), 'Active');
    const enforcement = await kit.request('GET', `/api/v2/policies/${uuid}/enforcement`, { token: admin });
    assert.deepEqual(enforcement.body.volumes.map((v: { state: string }) => v.state), ['Enforced']);
    await removeVolume(kit.etcd, volume);
    await deleteUnder(kit.etcd, keys.volumeStatusPrefix(volume.UUID));
  });

  test('fuzz: malformed POST and PUT bodies never 5xx and never change a record', async () => {
    const fields = ['name', 'description', 'qoSRateLimitPolicy', 'QoSRateLimitPolicy'];
    const accepted = await fuzzRoute(kit, 'POST', '/api/v2/policies', admin, malformedBodies(fields, 160, 11));
    assert.ok(accepted <= 3, `${accepted} random bodies were valid`);
    const nested = malformedBodies(['projectsNamesScope', 'policyVisibility', 'limitIOPS', 'limitBw', 'limitIOPSPerGB'], 120, 12).map(
      (inner) => `{"name": "fz", "qoSRateLimitPolicy": ${inner}}`,
    );
    await fuzzRoute(kit, 'POST', '/api/v2/policies', admin, nested);
    await fuzzRoute(kit, 'PUT', `/api/v2/policies/${scoped}`, admin, [...malformedBodies(fields, 120, 13), ...nested.slice(0, 60)]);
  });
});
