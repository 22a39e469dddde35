// The snapshot API on a real etcd and on the in-memory one (describeForEveryBackend), a
// bootstrapped cluster, real tokens and real HTTP.
// Volumes, their placement and status are written directly, as their owners would write them.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { SnapshotRecord, VolumeRecord } from '../../lib/records.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { deleteKey, fieldsOf, readKey, readText, startApiHarnessOn, type ApiHarness } from '../../test/helpers/records.js';
import { createSnapshotRoutes } from './snapshot-routes.js';
import { EtcdSnapshotDirectory, SnapshotService } from './snapshot-service.js';
import { SnapshotStore } from './snapshot-store.js';
import {
  CollectingEvents,
  TestClones,
  TestProjects,
  call,
  changeVolume,
  dump,
  projectTokens,
  putProject,
  putVolume,
  setSnapshotState,
  volumeRecord,
  type HttpResult,
} from '../../test/kits/snapshot-test-fixtures.js';

const SNAPSHOT_FIELDS = [
  'state', 'UUID', 'name', 'description', 'creationTime', 'retentionTime', 'sourceVolumeUUID', 'sourceVolumeName', 'replicaCount',
  'nodeList', 'nsid', 'acl', 'compression', 'size', 'IPAcl', 'sectorSize', 'statistics', 'ETag', 'projectName', 'primaryNodeUUID',
  'labels', 'clusterId', 'pgUUID',
].sort();
const STATISTICS = ['physicalCapacity', 'physicalOwnedCapacity', 'physicalOwnedMemory', 'physicalMemory', 'userWritten'].sort();
const BASE = '/api/v2/projects/default/snapshots';
const OTHER = '/api/v2/projects/other/snapshots';

describeForEveryBackend('snapshots API', (backend) => {
  let api: ApiHarness<KvClient>;
  let events: CollectingEvents;
  let directory: EtcdSnapshotDirectory;
  let tokens: { admin: string; viewer: string; none: string };
  let otherTokens: { admin: string; viewer: string; none: string };

  before(async () => {
    events = new CollectingEvents();
    api = await startApiHarnessOn(backend, (etcd, auth) => {
      const store = new SnapshotStore(etcd);
      directory = new EtcdSnapshotDirectory(store);
      const snapshots = new SnapshotService({ store, projects: new TestProjects(etcd), clones: new TestClones(etcd), events });
      return [createSnapshotRoutes({ auth, snapshots })];
    });
    await putProject(api.etcd, 'other');
    tokens = await projectTokens(api.etcd, 'default');
    otherTokens = await projectTokens(api.etcd, 'other');
  });
  after(async () => {
    await api?.close();
  });

  const req = (method: string, path: string, options: { token?: string | null; body?: unknown; headers?: Record<string, string> } = {}): Promise<HttpResult> => {
    const token = options.token === null ? undefined : (options.token ?? tokens.admin);
    return call(api.baseUrl, method, path, { ...(token !== undefined ? { token } : {}), ...(options.body !== undefined ? { body: options.body } : {}), ...(options.headers ? { headers: options.headers } : {}) });
  };
  const expectError = (res: HttpResult, status: number, grpc: number, what: string) => {
    assert.equal(res.status, status, `${what}: ${JSON.stringify(res.body)}`);
    assert.equal(res.contentType?.startsWith('application/json'), true, what);
    assert.equal(res.body.code, grpc, what);
    assert.equal(res.body.error, res.body.message, what);
  };
  const newVolume = (overrides: Partial<VolumeRecord> = {}) => putVolume(api.etcd, volumeRecord(overrides));
  const create = async (body: Record<string, unknown>, path = BASE, token = tokens.admin) => {
    const res = await req('POST', path, { body, token });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body;
  };
  const stored = async (uuid: string) => {
    const kv = await readKey(api.etcd, keys.snapshot(uuid));
    return kv ? { record: JSON.parse(kv.value.toString()) as SnapshotRecord, revision: kv.modRevision } : null;
  };
  const unique = (prefix: string) => `${prefix}-${randomUUID().slice(0, 8)}`;

  describe('create', () => {
    test('a replicated volume: 400, nothing stored (its copies cannot be captured at one instant yet)', async () => {
      const volume = await newVolume({ name: unique('vol'), replicaCount: 2 });
      const name = unique('s');
      const res = await req('POST', BASE, { body: { name, sourceVolumeUUID: volume.UUID } });
      expectError(res, 400, 3, 'replicated');
      assert.match(String(res.body.message), /replicated volumes are not supported yet/);
      assert.equal(await readKey(api.etcd, keys.snapshotName('default', name)), null, 'no name index');
    });

    test('by sourceVolumeUUID: Creating, exactly the record fields, typed for the wire, stored with its name index', async () => {
      const volume = await newVolume({ name: unique('vol'), sizeBytes: '9007199254740993', compression: true, sectorSize: 512, replicaCount: 1 });
      const before = Date.now();
      const snap = await create({ name: 'snap-a', sourceVolumeUUID: volume.UUID, retentionTime: '86400s', description: 'nightly', projectName: '' });
      assert.deepEqual(fieldsOf(snap), SNAPSHOT_FIELDS);
      assert.equal(snap.state, 'Creating');
      assert.match(snap.UUID, /^[0-9a-f-]{36}$/);
      assert.equal(snap.name, 'snap-a');
      assert.equal(snap.description, 'nightly');
      assert.equal(snap.retentionTime, '86400s');
      assert.equal(snap.sourceVolumeUUID, volume.UUID);
      assert.equal(snap.sourceVolumeName, volume.name);
      assert.equal(snap.projectName, 'default', 'the path project wins over the body');
      assert.equal(snap.replicaCount, 1);
      assert.deepEqual(snap.nodeList, volume.placement!.nodeList);
      assert.equal(snap.primaryNodeUUID, volume.placement!.primaryNodeUUID);
      assert.equal(snap.nsid, 0);
      assert.deepEqual(snap.acl, { values: ['ALLOW_NONE'] });
      assert.deepEqual(snap.IPAcl, { values: ['ALLOW_NONE'] });
      assert.equal(snap.compression, true, 'a JSON boolean');
      assert.equal(snap.size, '9007199254740993', 'bytes as a decimal string, exact past 2^53');
      assert.equal(snap.sectorSize, 512);
      assert.deepEqual(fieldsOf(snap.statistics), STATISTICS);
      for (const f of STATISTICS) assert.equal(snap.statistics[f], '0', f);
      assert.deepEqual(snap.labels, volume.labels);
      assert.equal(snap.clusterId, api.cluster.UUID);
      assert.equal(snap.pgUUID, '');
      const created = Date.parse(snap.creationTime);
      assert.ok(created >= before - 1000 && created <= Date.now() + 1000);
      assert.match(snap.creationTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

      const record = await stored(snap.UUID);
      assert.equal(snap.ETag, record?.revision, 'ETag is the record revision');
      assert.deepEqual(record?.record, {
        UUID: snap.UUID, name: 'snap-a', projectName: 'default', description: 'nightly', sourceVolumeUUID: volume.UUID, sourceVolumeName: volume.name,
        sizeBytes: '9007199254740993', compression: true, sectorSize: 512, labels: volume.labels, state: 'Creating', failureReason: '',
        retentionSeconds: 86_400, creationTime: snap.creationTime,
      });
      assert.deepEqual(JSON.parse((await readText(api.etcd, keys.snapshotName('default', 'snap-a')))!), { UUID: snap.UUID });
      const event = events.named('SnapshotCreated').find((e) => e.description.includes(snap.UUID));
      assert.ok(event);
      assert.equal(event.type, 'Volume');
      assert.equal(event.reportingService, 'API');
      assert.deepEqual(event.component, { kind: 'volume', projectName: 'default', volumes: [{ ID: volume.UUID, Name: volume.name }] });
    });

    test('by sourceVolumeName; both given must agree', async () => {
      const volume = await newVolume({ name: unique('vol') });
      const snap = await create({ name: unique('s'), sourceVolumeName: volume.name });
      assert.equal(snap.sourceVolumeUUID, volume.UUID);
      const both = await create({ name: unique('s'), sourceVolumeName: volume.name, sourceVolumeUUID: volume.UUID });
      assert.equal(both.sourceVolumeUUID, volume.UUID);
      const other = await newVolume({ name: unique('vol') });
      expectError(await req('POST', BASE, { body: { name: unique('s'), sourceVolumeName: other.name, sourceVolumeUUID: volume.UUID } }), 400, 3, 'disagreeing');
    });

    test('the trailing-slash collection path creates too', async () => {
      const volume = await newVolume();
      const snap = await create({ name: unique('s'), sourceVolumeUUID: volume.UUID }, `${BASE}/`);
      assert.equal(snap.state, 'Creating');
    });

    test('retentionTime: every accepted form is answered as "<seconds>s"', async () => {
      const volume = await newVolume();
      const forms: [unknown, string][] = [
        ['86400s', '86400s'], ['24h', '86400s'], ['30m', '1800s'], ['7d', '604800s'], [3600, '3600s'], ['3600', '3600s'],
        ['1h30m', '5400s'], ['', '0s'], [0, '0s'], [null, '0s'], [undefined, '0s'], ['1.5s', '2s'], [{ seconds: 60 }, '60s'],
      ];
      for (const [retentionTime, expected] of forms) {
        const snap = await create({ name: unique('r'), sourceVolumeUUID: volume.UUID, ...(retentionTime !== undefined ? { retentionTime } : {}) });
        assert.equal(snap.retentionTime, expected, JSON.stringify(retentionTime));
        assert.equal((await stored(snap.UUID))?.record.retentionSeconds, Number(expected.slice(0, -1)));
      }
      for (const retentionTime of ['-1s', '5 parsecs', true, [], { weeks: 1 }, '36501d']) {
        expectError(await req('POST', BASE, { body: { name: unique('r'), sourceVolumeUUID: volume.UUID, retentionTime } }), 400, 3, JSON.stringify(retentionTime));
      }
    });

    test('409 for a name taken in the project; the same name in another project is fine', async () => {
      const volume = await newVolume();
      const name = unique('dup');
      await create({ name, sourceVolumeUUID: volume.UUID });
      const before = await dump(api.etcd, '/strata/snapshot');
      expectError(await req('POST', BASE, { body: { name, sourceVolumeUUID: volume.UUID } }), 409, 6, 'duplicate');
      assert.deepEqual(await dump(api.etcd, '/strata/snapshot'), before, 'nothing written');
      const otherVolume = await newVolume({ projectName: 'other' });
      const inOther = await create({ name, sourceVolumeUUID: otherVolume.UUID }, OTHER, otherTokens.admin);
      assert.equal(inOther.projectName, 'other');
    });

    test('concurrent creates of one name: exactly one wins', async () => {
      const volume = await newVolume();
      const name = unique('race');
      const results = await Promise.all(Array.from({ length: 8 }, () => req('POST', BASE, { body: { name, sourceVolumeUUID: volume.UUID } })));
      assert.deepEqual(results.map((r) => r.status).sort(), [200, 409, 409, 409, 409, 409, 409, 409]);
    });

    test('404 for an unknown volume, a volume of another project, and an unknown project', async () => {
      expectError(await req('POST', BASE, { body: { name: unique('s'), sourceVolumeUUID: randomUUID() } }), 404, 5, 'unknown UUID');
      expectError(await req('POST', BASE, { body: { name: unique('s'), sourceVolumeName: 'no-such-volume' } }), 404, 5, 'unknown name');
      const foreign = await newVolume({ projectName: 'other' });
      expectError(await req('POST', BASE, { body: { name: unique('s'), sourceVolumeUUID: foreign.UUID } }), 404, 5, 'UUID of another project');
      expectError(await req('POST', BASE, { body: { name: unique('s'), sourceVolumeName: foreign.name } }), 404, 5, 'name of another project');
      const volume = await newVolume();
      expectError(await req('POST', '/api/v2/projects/nope/snapshots', { body: { name: unique('s'), sourceVolumeUUID: volume.UUID }, token: api.adminToken }), 404, 5, 'unknown project');
    });

    test('the source volume must be Available: transient states 503, Deleting/Failed 400', async () => {
      for (const [state, status, grpc] of [['Creating', 503, 14], ['Updating', 503, 14], ['Rollback', 503, 14], ['Failed', 400, 3], ['Deleting', 400, 3]] as const) {
        const volume = await newVolume({ state });
        const before = await dump(api.etcd, '/strata/snapshot');
        expectError(await req('POST', BASE, { body: { name: unique('s'), sourceVolumeUUID: volume.UUID } }), status, grpc, state);
        assert.deepEqual(await dump(api.etcd, '/strata/snapshot'), before, `${state}: nothing written`);
      }
      const unplaced = await newVolume({ placement: null });
      expectError(await req('POST', BASE, { body: { name: unique('s'), sourceVolumeUUID: unplaced.UUID } }), 503, 14, 'Available but not placed');
    });

    test('400 for missing or invalid fields, bad JSON and non-object bodies', async () => {
      const volume = await newVolume();
      const bodies: unknown[] = [
        {}, { name: 'x' }, { sourceVolumeUUID: volume.UUID }, { name: 'bad name', sourceVolumeUUID: volume.UUID }, { name: 'x'.repeat(254), sourceVolumeUUID: volume.UUID },
        { name: 'ok', sourceVolumeUUID: 42 }, { name: ['a'], sourceVolumeUUID: volume.UUID }, { name: 'ok', sourceVolumeUUID: volume.UUID, description: { a: 1 } },
        '[1,2]', '"text"', '42', 'true', '{"name": ', 'not json',
      ];
      for (const body of bodies) expectError(await req('POST', BASE, { body }), 400, 3, JSON.stringify(body));
    });
  });

  describe('get', () => {
    test('by UUID and by ?Name= (trailing slash) return the same object; by name without the slash is a list', async () => {
      const volume = await newVolume();
      const name = unique('get');
      const snap = await create({ name, sourceVolumeUUID: volume.UUID });
      const byUUID = await req('GET', `${BASE}/${snap.UUID}`, { token: tokens.viewer });
      assert.equal(byUUID.status, 200);
      assert.deepEqual(byUUID.body, snap);
      const byName = await req('GET', `${BASE}/?Name=${name}`, { token: tokens.viewer });
      assert.equal(byName.status, 200);
      assert.deepEqual(byName.body, snap);
      const list = await req('GET', `${BASE}?Name=${name}`);
      assert.deepEqual(list.body, { snapshots: [snap] });
      const both = await req('GET', `${BASE}/${snap.UUID}?Name=${name}`);
      assert.deepEqual(both.body, snap);
    });

    test('by-name GET needs Name (capital N); lower-case name or nothing is a 400', async () => {
      expectError(await req('GET', `${BASE}/?name=whatever`), 400, 3, 'lower-case name');
      assert.match((await req('GET', `${BASE}/?name=whatever`)).body.message, /capital N/);
      expectError(await req('GET', `${BASE}/`), 400, 3, 'no name');
      expectError(await req('GET', `${BASE}/?Name=`), 400, 3, 'empty Name');
    });

    test('404: unknown UUID, unknown name, another project\'s snapshot, UUID and Name disagreeing, unknown project', async () => {
      const volume = await newVolume({ projectName: 'other' });
      const foreign = await create({ name: unique('f'), sourceVolumeUUID: volume.UUID }, OTHER, otherTokens.admin);
      expectError(await req('GET', `${BASE}/${randomUUID()}`), 404, 5, 'unknown UUID');
      expectError(await req('GET', `${BASE}/?Name=no-such`), 404, 5, 'unknown name');
      expectError(await req('GET', `${BASE}/${foreign.UUID}`, { token: api.adminToken }), 404, 5, 'other project by UUID');
      expectError(await req('GET', `${BASE}/?Name=${foreign.name}`, { token: api.adminToken }), 404, 5, 'other project by name');
      expectError(await req('GET', `${OTHER}/${foreign.UUID}?Name=not-its-name`, { token: otherTokens.viewer }), 404, 5, 'UUID and Name disagree');
      expectError(await req('GET', `/api/v2/projects/nope/snapshots/${foreign.UUID}`, { token: api.adminToken }), 404, 5, 'unknown project');
      expectError(await req('GET', '/api/v2/projects/nope/snapshots', { token: api.adminToken }), 404, 5, 'list of unknown project');
      expectError(await req('GET', '/api/v2/projects/bad%20name/snapshots', { token: api.adminToken }), 400, 3, 'invalid project name');
    });

    test('fields from the source volume follow it: its current name, nodeList and primary', async () => {
      const volume = await newVolume({ name: unique('orig') });
      const snap = await create({ name: unique('s'), sourceVolumeUUID: volume.UUID });
      const moved = await changeVolume(api.etcd, volume, { name: unique('renamed'), placement: { ...volume.placement!, nodeList: ['a', 'b'], primaryNodeUUID: 'b' } });
      let got = (await req('GET', `${BASE}/${snap.UUID}`)).body;
      assert.equal(got.sourceVolumeName, moved.name);
      assert.deepEqual(got.nodeList, ['a', 'b']);
      assert.equal(got.primaryNodeUUID, 'b');
      assert.equal(got.size, volume.sizeBytes, 'size is the size when taken');
      // The volume gone (as after a forced cleanup): what the snapshot recorded when taken.
      await deleteKey(api.etcd, keys.volume(volume.UUID));
      got = (await req('GET', `${BASE}/${snap.UUID}`)).body;
      assert.equal(got.sourceVolumeName, volume.name);
      assert.deepEqual(got.nodeList, []);
      assert.equal(got.primaryNodeUUID, '');
      assert.equal(got.replicaCount, 0);
    });
  });

  describe('list', () => {
    let listVolume: VolumeRecord;
    let second: VolumeRecord;
    const made: any[] = [];

    before(async () => {
      listVolume = await putVolume(api.etcd, volumeRecord({ name: unique('lv') }));
      second = await putVolume(api.etcd, volumeRecord({ name: unique('lv2') }));
      for (let i = 0; i < 5; i++) made.push(await create({ name: `list-${i}-${randomUUID().slice(0, 4)}`, sourceVolumeUUID: i < 3 ? listVolume.UUID : second.UUID }));
    });

    const list = async (query = '', token = tokens.admin) => {
      const res = await req('GET', `${BASE}${query}`, { token });
      assert.equal(res.status, 200, `${query}: ${JSON.stringify(res.body)}`);
      assert.deepEqual(Object.keys(res.body), ['snapshots']);
      return res.body.snapshots as any[];
    };

    test('lists the project\'s snapshots only, in UUID order, each with all fields', async () => {
      const all = await list();
      for (const s of all) {
        assert.deepEqual(fieldsOf(s), SNAPSHOT_FIELDS);
        assert.equal(s.projectName, 'default');
      }
      const uuids = all.map((s) => s.UUID);
      assert.deepEqual(uuids, [...uuids].sort());
      for (const m of made) assert.ok(uuids.includes(m.UUID));
      assert.ok(!(await list('', tokens.admin)).some((s) => s.projectName === 'other'));
    });

    test('filters: sourceVolumeUUID, sourceVolumeName, name, UUID; together they all apply', async () => {
      const uuidsOf = (items: any[]) => items.map((s) => s.UUID).sort();
      assert.deepEqual(uuidsOf(await list(`?sourceVolumeUUID=${listVolume.UUID}`)), uuidsOf(made.slice(0, 3)));
      assert.deepEqual(uuidsOf(await list(`?sourceVolumeName=${second.name}`)), uuidsOf(made.slice(3)));
      assert.deepEqual(uuidsOf(await list(`?name=${made[1].name}`)), [made[1].UUID]);
      assert.deepEqual(uuidsOf(await list(`?UUID=${made[4].UUID}`)), [made[4].UUID]);
      assert.deepEqual(uuidsOf(await list(`?UUID=${made[4].UUID}&sourceVolumeUUID=${listVolume.UUID}`)), []);
      assert.deepEqual(uuidsOf(await list(`?name=${made[0].name}&sourceVolumeName=${listVolume.name}`)), [made[0].UUID]);
      expectError(await req('GET', `${BASE}?sourceVolumeUUID=none`, { token: tokens.admin }), 400, 3, 'a filter UUID must be a UUID (issue 17)');
      assert.deepEqual(uuidsOf(await list(`?sourceVolumeUUID=${listVolume.UUID}&unknown=1&SOURCEVOLUMEUUID=x`)), uuidsOf(made.slice(0, 3)));
    });

    test('pages: limit and offsetUUID until an empty page', async () => {
      const all = await list(`?sourceVolumeUUID=${listVolume.UUID}`);
      const seen: string[] = [];
      let offset = '';
      for (;;) {
        const page = await list(`?sourceVolumeUUID=${listVolume.UUID}&limit=2${offset ? `&offsetUUID=${offset}` : ''}`);
        if (page.length === 0) break;
        assert.ok(page.length <= 2);
        seen.push(...page.map((s) => s.UUID));
        offset = page[page.length - 1].UUID;
      }
      assert.deepEqual(seen, all.map((s) => s.UUID));
      expectError(await req('GET', `${BASE}?limit=-3`), 400, 3, 'negative limit');
      expectError(await req('GET', `${BASE}?showAll=perhaps`), 400, 3, 'bad showAll');
    });

    test('Deleting snapshots are hidden unless showAll=true', async () => {
      const volume = await newVolume();
      const snap = await create({ name: unique('hide'), sourceVolumeUUID: volume.UUID });
      await setSnapshotState(api.etcd, snap.UUID, 'Available');
      assert.equal((await req('DELETE', `${BASE}/${snap.UUID}`)).status, 200);
      assert.deepEqual(await list(`?sourceVolumeUUID=${volume.UUID}`), []);
      const shown = await list(`?sourceVolumeUUID=${volume.UUID}&showAll=true`);
      assert.deepEqual(shown.map((s) => [s.UUID, s.state]), [[snap.UUID, 'Deleting']]);
    });
  });

  describe('delete', () => {
    const available = async (overrides: Partial<VolumeRecord> = {}) => {
      const volume = await newVolume(overrides);
      const snap = await create({ name: unique('del'), sourceVolumeUUID: volume.UUID });
      await setSnapshotState(api.etcd, snap.UUID, 'Available');
      return { volume, snap };
    };

    test('by UUID: {} and Deleting; the name is free at once; an event is recorded', async () => {
      const { volume, snap } = await available();
      const res = await req('DELETE', `${BASE}/${snap.UUID}`);
      assert.equal(res.status, 200);
      assert.deepEqual(res.body, {});
      const record = await stored(snap.UUID);
      assert.equal(record?.record.state, 'Deleting');
      assert.equal(await readText(api.etcd, keys.snapshotName('default', snap.name)), null);
      assert.ok(events.named('SnapshotDeleteRequested').some((e) => e.description.includes(snap.UUID)));
      // GET still shows it, by UUID and by name, until the cluster manager removes it.
      assert.equal((await req('GET', `${BASE}/${snap.UUID}`)).body.state, 'Deleting');
      assert.equal((await req('GET', `${BASE}/?Name=${snap.name}`)).body.UUID, snap.UUID);
      // The name can be used again; by name, the live snapshot wins.
      const again = await create({ name: snap.name, sourceVolumeUUID: volume.UUID });
      assert.notEqual(again.UUID, snap.UUID);
      assert.equal((await req('GET', `${BASE}/?Name=${snap.name}`)).body.UUID, again.UUID);
    });

    test('by ?name= (lower-case n, trailing slash); ?Name= is a 400; a bare ? after the UUID works', async () => {
      const { snap } = await available();
      expectError(await req('DELETE', `${BASE}/?Name=${snap.name}`), 400, 3, 'capital N on DELETE');
      assert.match((await req('DELETE', `${BASE}/?Name=${snap.name}`)).body.message, /lower-case n/);
      expectError(await req('DELETE', `${BASE}/`), 400, 3, 'no name');
      const res = await req('DELETE', `${BASE}/?name=${snap.name}`);
      assert.equal(res.status, 200);
      assert.deepEqual(res.body, {});
      assert.equal((await stored(snap.UUID))?.record.state, 'Deleting');
      expectError(await req('DELETE', `${BASE}/?name=${snap.name}`), 404, 5, 'by name again: the name is free');

      const { snap: bare } = await available();
      assert.equal((await req('DELETE', `${BASE}/${bare.UUID}?`)).status, 200);
    });

    test('state rules: Creating 503, Deleting 400, Failed may be deleted', async () => {
      const volume = await newVolume();
      const creating = await create({ name: unique('c'), sourceVolumeUUID: volume.UUID });
      expectError(await req('DELETE', `${BASE}/${creating.UUID}`), 503, 14, 'Creating');
      assert.equal((await stored(creating.UUID))?.record.state, 'Creating');

      await setSnapshotState(api.etcd, creating.UUID, 'Failed', { failureReason: 'node n2: no space' });
      assert.equal((await req('GET', `${BASE}/${creating.UUID}`)).body.state, 'Failed');
      assert.equal((await req('DELETE', `${BASE}/${creating.UUID}`)).status, 200);
      expectError(await req('DELETE', `${BASE}/${creating.UUID}`), 400, 3, 'Deleting');
    });

    test('a snapshot with live clones cannot be deleted (400); once they are deleted it can', async () => {
      const { snap } = await available();
      const clone = await newVolume({ sourceSnapshotUUID: snap.UUID, sourceSnapshotName: snap.name });
      const before = await dump(api.etcd, '/strata/snapshot');
      const res = await req('DELETE', `${BASE}/${snap.UUID}`);
      expectError(res, 400, 3, 'has clones');
      assert.match(res.body.message, /1 cloned volume/);
      assert.deepEqual(await dump(api.etcd, '/strata/snapshot'), before, 'nothing changed');
      await changeVolume(api.etcd, clone, { state: 'Deleting' });
      assert.equal((await req('DELETE', `${BASE}/${snap.UUID}`)).status, 200);
    });

    test('If-Match: a stale ETag is 412 and changes nothing; the current one deletes', async () => {
      const { snap } = await available();
      const current = (await req('GET', `${BASE}/${snap.UUID}`)).body.ETag;
      assert.notEqual(current, snap.ETag, 'the state change bumped the ETag');
      expectError(await req('DELETE', `${BASE}/${snap.UUID}`, { headers: { 'If-Match': snap.ETag } }), 412, 9, 'stale ETag');
      assert.equal((await stored(snap.UUID))?.record.state, 'Available');
      expectError(await req('DELETE', `${BASE}/?name=${snap.name}`, { headers: { 'If-Match': `"${snap.ETag}"` } }), 412, 9, 'stale ETag by name');
      assert.equal((await req('DELETE', `${BASE}/${snap.UUID}`, { headers: { 'If-Match': `"${current}"` } })).status, 200);
    });

    test('404: unknown UUID or name, another project\'s snapshot, UUID and name disagreeing', async () => {
      const { snap } = await available();
      expectError(await req('DELETE', `${BASE}/${randomUUID()}`), 404, 5, 'unknown UUID');
      expectError(await req('DELETE', `${BASE}/?name=never-was`), 404, 5, 'unknown name');
      expectError(await req('DELETE', `${OTHER}/${snap.UUID}`, { token: api.adminToken }), 404, 5, 'another project');
      expectError(await req('DELETE', `${BASE}/${snap.UUID}?name=not-its-name`), 404, 5, 'disagreeing');
      expectError(await req('DELETE', `/api/v2/projects/nope/snapshots/${snap.UUID}`, { token: api.adminToken }), 404, 5, 'unknown project');
      assert.equal((await stored(snap.UUID))?.record.state, 'Available');
    });
  });

  describe('permissions', () => {
    test('401 without a valid token; reads need project read, writes project write', async () => {
      const volume = await newVolume();
      const snap = await create({ name: unique('perm'), sourceVolumeUUID: volume.UUID });
      await setSnapshotState(api.etcd, snap.UUID, 'Available');
      const reads = [`${BASE}`, `${BASE}/${snap.UUID}`, `${BASE}/?Name=${snap.name}`];
      for (const path of reads) {
        expectError(await req('GET', path, { token: null }), 401, 16, `no token ${path}`);
        expectError(await req('GET', path, { token: 'not.a.jwt' }), 401, 16, `bad token ${path}`);
        for (const token of [tokens.viewer, tokens.admin, api.clusterViewerToken, api.adminToken, api.projectViewerToken]) {
          assert.equal((await req('GET', path, { token })).status, 200, path);
        }
        for (const token of [otherTokens.admin, otherTokens.viewer, tokens.none]) expectError(await req('GET', path, { token }), 403, 7, `foreign read ${path}`);
      }
      const body = { name: unique('perm'), sourceVolumeUUID: volume.UUID };
      expectError(await req('POST', BASE, { body, token: null }), 401, 16, 'create without token');
      for (const token of [tokens.viewer, api.clusterViewerToken, api.projectViewerToken, otherTokens.admin, tokens.none]) {
        expectError(await req('POST', BASE, { body, token }), 403, 7, 'create');
        expectError(await req('DELETE', `${BASE}/${snap.UUID}`, { token }), 403, 7, 'delete');
        expectError(await req('DELETE', `${BASE}/?name=${snap.name}`, { token }), 403, 7, 'delete by name');
      }
      assert.equal((await stored(snap.UUID))?.record.state, 'Available');
      assert.equal((await req('POST', BASE, { body, token: tokens.admin })).status, 200);
      assert.equal((await req('DELETE', `${BASE}/${snap.UUID}`, { token: api.adminToken })).status, 200, 'cluster admin may write any project');
    });

    test('401 before bad parameters; bad parameters are 400 before permission (issue 17)', async () => {
      expectError(await req('POST', BASE, { body: { name: 'bad name' }, token: null }), 401, 16, 'invalid body, no token');
      expectError(await req('GET', `${BASE}/?name=x`, { token: null }), 401, 16, 'bad query, no token');
      expectError(await req('POST', BASE, { body: { name: 'bad name' }, token: otherTokens.admin }), 400, 3, 'invalid body, token of another project');
      expectError(await req('GET', `${BASE}/?name=x`, { token: otherTokens.admin }), 400, 3, 'bad query, token of another project');
    });
  });

  describe('SnapshotDirectory', () => {
    test('resolves by UUID or name within the project, with the ETag', async () => {
      const volume = await newVolume({ compression: false, sectorSize: 4096 });
      const snap = await create({ name: unique('dir'), sourceVolumeUUID: volume.UUID });
      const byUUID = await directory.resolve('default', { UUID: snap.UUID });
      assert.deepEqual(byUUID, {
        UUID: snap.UUID, name: snap.name, projectName: 'default', sourceVolumeUUID: volume.UUID, sizeBytes: volume.sizeBytes,
        compression: false, sectorSize: 4096, labels: volume.labels, state: 'Creating', revision: snap.ETag,
      });
      assert.deepEqual(await directory.resolve('default', { name: snap.name }), byUUID);
      assert.deepEqual(await directory.resolve('default', { UUID: snap.UUID, name: snap.name }), byUUID);
      await assert.rejects(directory.resolve('other', { UUID: snap.UUID }), { code: 'NOT_FOUND' });
      await assert.rejects(directory.resolve('default', { name: 'missing' }), { code: 'NOT_FOUND' });
      await assert.rejects(directory.resolve('default', { UUID: snap.UUID, name: 'other-name' }), { code: 'INVALID_ARGUMENT' });
      await assert.rejects(directory.resolve('default', {}), { code: 'INVALID_ARGUMENT' });
      assert.equal(await directory.countOfVolume(volume.UUID), 1);
      assert.ok((await directory.countInProject('default')) > 0);
      assert.equal(await directory.countInProject('empty-project'), 0);
    });
  });

  describe('fuzz', () => {
    test('random create bodies: never a 5xx, and a refused body writes nothing', async () => {
      const volume = await newVolume({ name: 'fuzz-volume' });
      let seed = 20240611;
      const rand = () => {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        return seed / 0x7fffffff;
      };
      const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;
      const scalar = (): unknown =>
        pick([
          () => null, () => true, () => false, () => 0, () => -1, () => 1.5, () => 1e308, () => Number.MAX_SAFE_INTEGER + 2, () => '',
          () => 'x'.repeat(Math.floor(rand() * 3000)), () => randomBytes(12).toString('base64'), () => '\u0000\uffff\ud800', () => '24h', () => '7d',
          () => 'fuzz-volume', () => volume.UUID, () => `${Math.floor(rand() * 1e6)}s`, () => '-5s', () => '1e400',
          () => '../../etc', () => 'name with spaces', () => '%2F', () => '{}',
        ])();
      const value = (depth: number): unknown => {
        const r = rand();
        if (depth > 3 || r < 0.6) return scalar();
        if (r < 0.8) return Array.from({ length: Math.floor(rand() * 4) }, () => value(depth + 1));
        return Object.fromEntries(Array.from({ length: Math.floor(rand() * 4) }, () => [pick(['name', 'seconds', 'nanos', 'values', 'x']), value(depth + 1)]));
      };
      const fields = ['name', 'sourceVolumeUUID', 'sourceVolumeName', 'retentionTime', 'description', 'projectName', 'labels', '__proto__', 'constructor'];
      const bodies: unknown[] = ['', 'null', '[]', '[{}]', '"x"', '7', 'true', '{', '{"a":}', '\u0000', '{"name":"a"}{}', '{"__proto__": {"name": "p", "sourceVolumeUUID": "x"}, "constructor": {"name": 1}}', `{"name":"${'y'.repeat(2 * 1024 * 1024)}"}`];
      for (let i = 0; i < 150; i++) {
        const body: Record<string, unknown> = {};
        for (const field of fields) if (rand() < 0.5) body[field] = value(0);
        if (rand() < 0.3) body['sourceVolumeUUID'] = volume.UUID;
        bodies.push(rand() < 0.9 ? body : value(0));
      }
      // A valid body with one field replaced: reaches the volume lookup and the write.
      for (let i = 0; i < 150; i++) {
        const body: Record<string, unknown> = { name: `fuzz-${i}`, ...(rand() < 0.5 ? { sourceVolumeUUID: volume.UUID } : { sourceVolumeName: volume.name }), retentionTime: '1h' };
        body[pick(fields)] = value(0);
        bodies.push(body);
      }
      const statuses: Record<number, number> = {};
      for (const body of bodies) {
        const before = await dump(api.etcd, '/strata/snapshot');
        const res = await req('POST', BASE, { body: typeof body === 'string' ? body : JSON.stringify(body) });
        assert.ok(res.status < 500, `${res.status} for ${JSON.stringify(body).slice(0, 200)}: ${JSON.stringify(res.body)}`);
        assert.equal(typeof res.body, 'object', `JSON answer for ${JSON.stringify(body).slice(0, 200)}`);
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
        const afterDump = await dump(api.etcd, '/strata/snapshot');
        if (res.status === 200) {
          assert.equal(res.body.state, 'Creating');
          assert.equal(res.body.sourceVolumeUUID, volume.UUID);
          assert.equal(Object.keys(afterDump).length, Object.keys(before).length + 2, 'record and name index');
        } else {
          assert.ok([400, 404, 409].includes(res.status), `${res.status} for ${JSON.stringify(body).slice(0, 200)}`);
          assert.deepEqual(afterDump, before, `refused body changed etcd: ${JSON.stringify(body).slice(0, 200)}`);
        }
      }
      assert.ok((statuses[200] ?? 0) > 20 && (statuses[400] ?? 0) > 100, `the fuzz reaches both refusals and writes: ${JSON.stringify(statuses)}`);
    });
  });
});
