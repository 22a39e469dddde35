// Feature flags API on a real etcd and on the in-memory one (describeForEveryBackend), a bootstrapped cluster and real HTTP.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import { CollectingEventRecorder, expectError, fuzzRoute, malformedBodies, startApiKit, type ApiKit } from '../../test/kits/api-test-kit.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { putRecord, readKey, readText } from '../../test/helpers/records.js';
import { FEATURE_FLAG_NAMES } from '../volumes/volume-dependencies.js';
import { createFeatureFlagsRoutes } from './feature-flags-routes.js';
import { FEATURE_FLAG_DEFAULTS, FeatureFlagsService } from './feature-flags-service.js';
import { FeatureFlagsStore } from './feature-flags-store.js';

describeForEveryBackend('feature flags API', (backend) => {
  let kit: ApiKit;
  let admin: string;
  let flags: FeatureFlagsService;
  const events = new CollectingEventRecorder();

  before(async () => {
    kit = await startApiKit((etcd, auth) => {
      flags = new FeatureFlagsService(new FeatureFlagsStore(etcd), events);
      return [createFeatureFlagsRoutes({ auth, flags })];
    }, { backend });
    admin = kit.api.adminToken;
  });
  after(async () => {
    await kit?.close();
  });

  const list = async (token = admin) => {
    const reply = await kit.request('GET', '/api/v2/featureFlags', { token });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.deepEqual(Object.keys(reply.body), ['featureFlags']);
    return reply.body.featureFlags;
  };
  const post = (name: string, action: string, options: { body?: unknown; rawBody?: string; token?: string } = {}) =>
    kit.request('POST', `/api/v2/featureFlags/${name}/${action}`, { token: admin, body: {}, ...options });

  test('the list is an object keyed by name, each {name, enabled}, all five with their defaults', async () => {
    const all = await list();
    assert.deepEqual(Object.keys(all), [...FEATURE_FLAG_NAMES]);
    for (const name of FEATURE_FLAG_NAMES) assert.deepEqual(all[name], { name, enabled: FEATURE_FLAG_DEFAULTS[name] });
    assert.equal(all['event-log'].enabled, true);
    assert.equal(all['fail-in-place'].enabled, false);
    for (const name of FEATURE_FLAG_NAMES) {
      const one = await kit.request('GET', `/api/v2/featureFlags/${name}`, { token: admin });
      assert.equal(one.status, 200);
      assert.deepEqual(one.body, all[name]);
    }
    assert.deepEqual((await kit.request('GET', '/api/v2/featureFlags/Event-Log', { token: admin })).body, { name: 'event-log', enabled: true });
  });

  test('unknown names are 400 (not 404) on every route', async () => {
    for (const name of ['nope', 'event_log', '%20', 'x'.repeat(500)]) {
      expectError(await kit.request('GET', `/api/v2/featureFlags/${name}`, { token: admin }), 400, 3, /unknown feature flag/);
      expectError(await post(name, 'enable'), 400, 3, /unknown feature flag/);
      expectError(await post(name, 'disable'), 400, 3, /unknown feature flag/);
    }
  });

  test('enable and disable answer {}, are idempotent, are stored, and record one event per change', async () => {
    const enabled = await post('fail-in-place', 'enable');
    assert.equal(enabled.status, 200, JSON.stringify(enabled.body));
    assert.deepEqual(enabled.body, {});
    assert.equal((await list())['fail-in-place'].enabled, true);
    assert.equal(await flags.isEnabled('fail-in-place'), true);
    const stored = JSON.parse((await readText(kit.etcd, keys.featureFlag('fail-in-place')))!);
    assert.equal(stored.enabled, true);
    assert.equal(events.events.length, 1);
    const event = events.events[0]!;
    assert.equal(event.eventName, 'FeatureFlagEnabled');
    assert.equal(event.type, 'Cluster');
    assert.equal(event.severity, 'Info');
    assert.equal(event.reportingService, 'API');
    assert.deepEqual(event.component, { kind: 'cluster', ID: kit.api.cluster.UUID, Name: kit.api.cluster.clusterName });
    assert.match(event.description, /fail-in-place enabled/);

    const revision = (await readKey(kit.etcd, keys.featureFlag('fail-in-place')))?.modRevision;
    assert.deepEqual((await post('fail-in-place', 'enable')).body, {});
    assert.equal((await readKey(kit.etcd, keys.featureFlag('fail-in-place')))?.modRevision, revision, 'enabling an enabled flag writes nothing');
    assert.equal(events.events.length, 1, 'and records no event');

    assert.deepEqual((await post('fail-in-place', 'disable')).body, {});
    assert.equal(await flags.isEnabled('fail-in-place'), false);
    assert.equal(events.events.at(-1)!.eventName, 'FeatureFlagDisabled');
    assert.deepEqual((await post('proactive-rebalance', 'disable')).body, {}, 'disabling a disabled flag is fine');
    assert.equal(events.events.length, 2);

    assert.deepEqual((await post('event-log', 'disable')).body, {});
    assert.equal((await list())['event-log'].enabled, false);
    assert.deepEqual((await post('EVENT-LOG', 'enable')).body, {});
    assert.equal(await flags.isEnabled('event-log'), true);
  });

  test('concurrent enables of one flag: all answer {}, one write, one event', async () => {
    const before = events.events.length;
    const replies = await Promise.all(Array.from({ length: 10 }, () => post('evict-data', 'enable')));
    assert.deepEqual(replies.map((r) => r.status), Array(10).fill(200));
    assert.equal(events.events.length, before + 1);
    assert.deepEqual((await post('evict-data', 'disable')).body, {});
  });

  test('in-band-authentication cannot be enabled (400, says why) until in-band authentication exists; disabling always works', async () => {
    const before = events.events.length;
    assert.deepEqual((await post('in-band-authentication', 'disable')).body, {}, 'disabled already: nothing to do');
    expectError(await post('in-band-authentication', 'enable'), 400, 3, /cannot be enabled: in-band .*host authentication is not implemented/);
    expectError(await post('IN-BAND-AUTHENTICATION', 'enable'), 400, 3, /not implemented/);
    assert.equal(await flags.isEnabled('in-band-authentication'), false);
    assert.equal((await list())['in-band-authentication'].enabled, false);
    assert.equal(await readText(kit.etcd, keys.featureFlag('in-band-authentication')), null, 'nothing written');
    assert.equal(events.events.length, before, 'no event for a refused change');

    // A flag an earlier build let be enabled is disabled as usual.
    await putRecord(kit.etcd, keys.featureFlag('in-band-authentication'), { name: 'in-band-authentication', enabled: true, updatedAt: new Date().toISOString(), updatedBy: 'old build' });
    assert.equal(await flags.isEnabled('in-band-authentication'), true);
    assert.deepEqual((await post('in-band-authentication', 'disable')).body, {});
    assert.equal(await flags.isEnabled('in-band-authentication'), false);
    assert.equal(events.events.at(-1)!.eventName, 'FeatureFlagDisabled');
  });

  test('bodies: empty, {} or any object (content ignored); invalid JSON or a non-object is 400', async () => {
    assert.equal((await post('evict-data', 'enable', { rawBody: '' })).status, 200);
    assert.equal((await post('evict-data', 'enable', { body: { name: 'fail-in-place', enabled: false } })).status, 200);
    assert.equal(await flags.isEnabled('fail-in-place'), false, 'the path names the flag, not the body');
    assert.equal((await post('evict-data', 'disable', { rawBody: 'null' })).status, 200);
    expectError(await post('evict-data', 'enable', { rawBody: '{' }), 400, 3);
    expectError(await post('evict-data', 'enable', { rawBody: '[]' }), 400, 3);
    expectError(await post('evict-data', 'enable', { rawBody: '"enable"' }), 400, 3);
    assert.equal(await flags.isEnabled('evict-data'), false);
  });

  test('permissions: cluster roles read, cluster write changes', async () => {
    const viewer = kit.api.clusterViewerToken;
    assert.equal((await kit.request('GET', '/api/v2/featureFlags', { token: viewer })).status, 200);
    assert.equal((await kit.request('GET', '/api/v2/featureFlags/event-log', { token: viewer })).status, 200);
    expectError(await post('evict-data', 'enable', { token: viewer }), 403, 7);
    for (const token of [kit.api.projectViewerToken, await kit.token(['default:admin'])]) {
      expectError(await kit.request('GET', '/api/v2/featureFlags', { token }), 403, 7);
      expectError(await kit.request('GET', '/api/v2/featureFlags/event-log', { token }), 403, 7);
      expectError(await post('evict-data', 'enable', { token }), 403, 7);
    }
    expectError(await kit.request('GET', '/api/v2/featureFlags'), 401, 16);
    expectError(await kit.request('POST', '/api/v2/featureFlags/evict-data/enable', { body: {} }), 401, 16);
    assert.equal(await flags.isEnabled('evict-data'), false);
  });

  test('fuzz: malformed bodies never 5xx and a refused request changes nothing', async () => {
    for (const action of ['enable', 'disable']) {
      await fuzzRoute(kit, 'POST', `/api/v2/featureFlags/proactive-rebalance/${action}`, admin, malformedBodies(['name', 'enabled'], 100, action.length));
    }
  });
});
