// Projects (and the policies they name) as a domain, without etcd: the product's services, stores
// and watched state on the in-memory fake (test/fakes/memory-etcd.ts, which keeps etcd's guard
// semantics: test/fakes/memory-etcd.test.ts). projects.test.ts is the integration layer: the same
// behaviour through HTTP on a real etcd. Here the fake also lets a concurrent writer in between a
// read and its commit at will, which a real etcd only does by chance.
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import { GUARDED_ATTEMPTS } from '../../lib/etcd/transaction.js';
import type { StrataError } from '../../lib/errors.js';
import type { ProjectRecord } from '../../lib/records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { refuses, watchedStateForEachTest } from '../../test/fakes/domain-helpers.js';
import { putSnapshot, putVolume, removeSnapshot, removeVolume, volumeUsage } from '../../test/kits/api-test-kit.js';
import { parseCreateCredential } from '../credentials/credentials-schema.js';
import { CredentialsService } from '../credentials/credentials-service.js';
import { CredentialRecordsStore } from '../credentials/credentials-store.js';
import { parseCreatePolicy, parseUpdatePolicy } from '../policies/policies-schema.js';
import { PoliciesService } from '../policies/policies-service.js';
import { PoliciesStore } from '../policies/policies-store.js';
import { parseCreateProject, parseUpdateProject } from './projects-schema.js';
import { ProjectsService } from './projects-service.js';
import { ProjectsStore } from './projects-store.js';

const CLUSTER = { kind: 'cluster' } as const;

describe('projects service on the in-memory etcd', () => {
  const watchedState = watchedStateForEachTest();

  /** A keyspace holding what bootstrap writes of projects, and the services as the control plane wires them. */
  async function world() {
    const kv = new MemoryEtcd();
    for (const name of ['default', 'system']) {
      const builtIn: ProjectRecord = { UUID: randomUUID(), name, description: '', defaultPolicies: [], builtIn: true, createdAt: new Date().toISOString() };
      await kv.put(keys.project(name), builtIn);
    }
    const cache = await watchedState(kv);
    const store = new ProjectsStore(kv);
    const policyStore = new PoliciesStore(kv);
    const usage = volumeUsage(kv, cache);
    const projects = new ProjectsService(store, policyStore, usage);
    const policies = new PoliciesService(policyStore, store, usage);
    const credentials = new CredentialsService(new CredentialRecordsStore(kv), store);
    const create = (body: Record<string, unknown>) => projects.create(parseCreateProject(body));
    const createPolicy = async (name: string, qos: Record<string, unknown> = {}) =>
      (await policies.create(parseCreatePolicy({ name, qoSRateLimitPolicy: { limitIOPS: { writeIOPSLimit: 100, readIOPSLimit: 200 }, ...qos } }))).UUID;
    return { kv, cache, store, policyStore, projects, policies, credentials, create, createPolicy };
  }

  test('create: the wire fields, the ETag is the record revision, get equals create; names are case-sensitive', async () => {
    const { kv, projects, create } = await world();
    const created = await create({ name: 'alpha', description: 'team alpha', colour: 'blue', defaultPolicies: null });
    assert.deepEqual(Object.keys(created).sort(), ['UUID', 'name', 'description', 'defaultPolicies', 'ETag'].sort());
    assert.deepEqual([created.name, created.description, created.defaultPolicies], ['alpha', 'team alpha', []]);
    assert.equal(created.ETag, (await kv.get(keys.project('alpha')))!.modRevision);
    assert.deepEqual(await projects.get('alpha'), created);
    assert.equal((await create({ name: 'Alpha' })).description, '');
    assert.equal(JSON.parse((await kv.get(keys.project('alpha')))!.value.toString()).builtIn, false);
    assert.deepEqual((await projects.list(CLUSTER)).map((p) => p.name).sort(), ['Alpha', 'alpha', 'default', 'system']);
    assert.deepEqual((await projects.list({ kind: 'projects', projects: new Set(['alpha', 'ghost']) })).map((p) => p.name), ['alpha']);
  });

  test('create: an existing name is ALREADY_EXISTS; a missing project is NOT_FOUND', async () => {
    const { projects, create } = await world();
    await create({ name: 'alpha' });
    await refuses(create({ name: 'alpha' }), 'ALREADY_EXISTS', /alpha/);
    await refuses(create({ name: 'default' }), 'ALREADY_EXISTS');
    await refuses(projects.get('missing'), 'NOT_FOUND');
  });

  test('default policies: must exist and be visible to the project; a refused create writes nothing', async () => {
    const { kv, projects, create, createPolicy } = await world();
    const gold = await createPolicy('gold');
    const scoped = await createPolicy('alpha-only', { projectsNamesScope: ['default'] });
    const beta = await create({ name: 'beta', defaultPolicies: [{ policyType: 'QoS', policyUUID: gold.toUpperCase() }] });
    assert.deepEqual(beta.defaultPolicies, [{ policyType: 'qosRateLimit', policyUUID: gold }]);
    const before = await kv.revision();
    await refuses(create({ name: 'gamma', defaultPolicies: [{ policyUUID: randomUUID() }] }), 'NOT_FOUND', /policy/);
    await refuses(create({ name: 'gamma', defaultPolicies: [{ policyUUID: scoped }] }), 'INVALID_ARGUMENT', /not available to project gamma/);
    assert.equal(await kv.revision(), before, 'nothing was written by the refused creates');
    await refuses(projects.get('gamma'), 'NOT_FOUND');
  });

  test('update: description and defaults get a new ETag; a stale ETag is refused; a no-op writes nothing', async () => {
    const { kv, projects, create, createPolicy } = await world();
    const before = await create({ name: 'alpha', description: 'old' });
    const etag = await projects.update('alpha', parseUpdateProject({ description: 'new words', name: 'renamed?' }), undefined);
    const after = await projects.get('alpha');
    assert.deepEqual([after.description, after.name, after.UUID, after.ETag], ['new words', 'alpha', before.UUID, etag]);
    assert.notEqual(etag, before.ETag);
    await refuses(projects.update('alpha', parseUpdateProject({ description: 'x' }), before.ETag), 'ETAG_MISMATCH');
    assert.equal((await projects.get('alpha')).description, 'new words');
    const commits = kv.committed.length;
    assert.equal(await projects.update('alpha', parseUpdateProject({ description: 'new words' }), etag), etag, 'a no-op keeps the ETag');
    assert.equal(kv.committed.length, commits, 'and writes nothing');
    const gold = await createPolicy('gold');
    await projects.update('alpha', parseUpdateProject({ defaultPolicies: [{ policyUUID: gold }] }), undefined);
    assert.deepEqual((await projects.get('alpha')).defaultPolicies, [{ policyType: 'qosRateLimit', policyUUID: gold }]);
    await projects.update('alpha', parseUpdateProject({ defaultPolicies: [] }), undefined);
    assert.deepEqual((await projects.get('alpha')).defaultPolicies, []);
    await refuses(projects.update('missing', {}, undefined), 'NOT_FOUND');
  });

  test('delete: built-in projects and projects with contents are refused, saying what remains', async () => {
    const { kv, projects, policies, create, createPolicy } = await world();
    await refuses(projects.delete('default', undefined), 'INVALID_ARGUMENT', /built in/);
    await refuses(projects.delete('system', undefined), 'INVALID_ARGUMENT', /built in/);
    await create({ name: 'busy' });
    const v1 = await putVolume(kv, { projectName: 'busy' });
    await putVolume(kv, { projectName: 'busy', state: 'Deleting' });
    const s1 = await putSnapshot(kv, { projectName: 'busy' });
    await kv.put(keys.credential('busy', 'ci'), { project: 'busy', name: 'ci' });
    await kv.put(keys.trustedHost('busy', 'h1'), {});
    const scoped = await createPolicy('busy-scoped', { projectsNamesScope: ['busy', 'default'] });
    await refuses(projects.delete('busy', undefined), 'INVALID_STATE', /1 volume, 1 snapshot, 1 credential, 1 trusted host, the scope of 1 policy \(busy-scoped\)/);
    await removeVolume(kv, v1);
    await removeSnapshot(kv, s1);
    await kv.delete(keys.credential('busy', 'ci'));
    await kv.delete(keys.trustedHost('busy', 'h1'));
    await refuses(projects.delete('busy', undefined), 'INVALID_STATE', /^project busy cannot be deleted: it still has the scope of 1 policy \(busy-scoped\) names it/);
    await policies.update(scoped, parseUpdatePolicy({ qoSRateLimitPolicy: { projectsNamesScope: ['default'] } }), undefined);
    const current = await projects.get('busy');
    await refuses(projects.delete('busy', '1'), 'ETAG_MISMATCH');
    await projects.delete('busy', current.ETag);
    await refuses(projects.get('busy'), 'NOT_FOUND');
    await refuses(projects.delete('busy', undefined), 'NOT_FOUND');
    await create({ name: 'busy' });
  });

  test('guards: a delete loses to a volume created after the count; a create loses to a policy changed after the read', async () => {
    const { kv, store, policyStore, policies, create, createPolicy } = await world();
    await create({ name: 'racy' });
    const current = (await store.get('racy'))!;
    const checkedAt = await store.currentRevision();
    const volume = await putVolume(kv, { projectName: 'racy' });
    assert.equal(await store.delete(current, checkedAt), false, 'a volume appeared after the count');
    await removeVolume(kv, volume);
    assert.equal(await store.delete(current, checkedAt), true, "a volume come and gone since: etcd's range compare cannot see it");

    const uuid = await createPolicy('moving');
    const read = (await policyStore.get(uuid))!;
    await policies.update(uuid, parseUpdatePolicy({ description: 'changed' }), undefined);
    const record: ProjectRecord = { UUID: randomUUID(), name: 'racy2', description: '', defaultPolicies: [{ policyType: 'qosRateLimit', policyUUID: uuid }], builtIn: false, createdAt: '' };
    assert.equal((await store.create(record, [read])).succeeded, false, 'the policy changed after it was read');
    assert.equal((await store.create(record, [(await policyStore.get(uuid))!])).succeeded, true);
  });

  test('a write that loses its guard is tried again on fresh reads, and gives up busy after GUARDED_ATTEMPTS', async () => {
    const { kv, projects, create } = await world();
    await create({ name: 'contested' });
    let races = 0;
    kv.interleave = async () => {
      races++;
      if (races === 1) await putVolume(kv, { projectName: 'contested', state: 'Deleting' });
    };
    await projects.delete('contested', undefined);
    assert.equal(races, 2, 'the delete lost once to a new volume (Deleting: it does not count), then won');

    await create({ name: 'hot' });
    races = 0;
    kv.interleave = async () => {
      races++;
      await kv.put(keys.project('hot'), { ...JSON.parse((await kv.get(keys.project('hot')))!.value.toString()), description: `race ${races}` });
    };
    await refuses(projects.update('hot', parseUpdateProject({ description: 'mine' }), undefined), 'OPERATION_IN_PROGRESS', /hot/);
    assert.equal(races, GUARDED_ATTEMPTS);
    kv.interleave = undefined;
    assert.equal((await projects.get('hot')).description, `race ${GUARDED_ATTEMPTS}`);
  });

  test('concurrent creates of one name: exactly one succeeds, the others are ALREADY_EXISTS', async () => {
    const { projects, create } = await world();
    const results = await Promise.allSettled(Array.from({ length: 12 }, (_, i) => create({ name: 'contended', description: `try ${i}` })));
    const won = results.filter((r) => r.status === 'fulfilled');
    assert.equal(won.length, 1);
    for (const r of results) if (r.status === 'rejected') assert.equal((r.reason as StrataError).code, 'ALREADY_EXISTS');
    assert.deepEqual(await projects.get('contended'), won[0]!.value);
  });

  test('policies: one a project defaults to or a volume uses is not deleted, nor narrowed away from that project', async () => {
    const { kv, policies, projects, create, createPolicy } = await world();
    const gold = await createPolicy('gold');
    await create({ name: 'p1', defaultPolicies: [{ policyUUID: gold }] });
    await refuses(policies.update(gold, parseUpdatePolicy({ qoSRateLimitPolicy: { policyVisibility: 'Scoped', projectsNamesScope: ['default'] } }), undefined), 'INVALID_STATE', /default policy of project\(s\) p1/);
    await refuses(policies.delete(gold, undefined), 'INVALID_STATE', /project\(s\) p1 as their default policy/);
    await projects.update('p1', parseUpdateProject({ defaultPolicies: [] }), undefined);
    const volume = await putVolume(kv, { projectName: 'p1', qosPolicyUUID: gold });
    await refuses(policies.delete(gold, undefined), 'INVALID_STATE', /used by 1 volume$/);
    await removeVolume(kv, volume);
    await policies.delete(gold, undefined);
    await refuses(policies.get(CLUSTER, { UUID: gold }), 'NOT_FOUND');
    assert.equal(await kv.get(keys.policyName('gold')), null, 'the name index went with it');
  });

  test('credentials: one is never created in a project deleted meanwhile, and a project is not deleted under a new one', async () => {
    const { kv, projects, credentials, create } = await world();
    const { publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } });
    const upload = (project: string, name: string) => credentials.create(project, parseCreateCredential({ name, payload: publicKey }));
    await create({ name: 'doomed' });
    kv.interleave = async () => {
      kv.interleave = undefined;
      await projects.delete('doomed', undefined);
    };
    await refuses(upload('doomed', 'ci'), 'NOT_FOUND', /project/);
    assert.equal(await kv.get(keys.credential('doomed', 'ci')), null, 'the guard on the project as read refused the write');

    await create({ name: 'kept' });
    kv.interleave = async () => {
      kv.interleave = undefined;
      await upload('kept', 'late');
    };
    await refuses(projects.delete('kept', undefined), 'INVALID_STATE', /1 credential/);
    assert.deepEqual((await credentials.list('kept')).map((c) => c.name), ['late']);
  });
});
