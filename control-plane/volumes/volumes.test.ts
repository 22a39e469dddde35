// The volume routes over HTTP against a real etcd: create, get, list, update, delete, rollback,
// and the fields derived from what the data path reports.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { NO_KERNEL_CAPABILITIES } from '../../lib/contract/kernel-capabilities.js';
import { keys } from '../../lib/etcd/keys.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { deleteKey, fieldsOf, joinServer, keysUnder, markAbsent, markPresent, readKey, readText, reportInventory, textsUnder } from '../../test/helpers/records.js';
import type { SnapshotDirectory } from './volume-dependencies.js';
import { parseCreateVolume, parseUpdateVolume } from './volume-schema.js';
import { VolumeService, VolumeUsageCounter } from './volume-service.js';
import { FeatureFlagsService } from '../feature-flags/feature-flags-service.js';
import { FeatureFlagsStore } from '../feature-flags/feature-flags-store.js';
import { WatchedPolicyDirectory } from '../policies/policy-directory.js';
import { WatchedProjectDirectory } from '../projects/project-directory.js';
import { EtcdSnapshotDirectory } from '../snapshots/snapshot-service.js';
import { SnapshotStore } from '../snapshots/snapshot-store.js';
import { PresenceReplicaLimits } from '../cluster/presence-replica-limits.js';
import {
  startVolumesHarness,
  type HttpResult,
  type VolumesHarness,
} from '../../test/kits/volume-test-support.js';

const VOLUME_FIELDS = [
  'name', 'size', 'acl', 'IPAcl', 'compression', 'replicaCount', 'minReplicas', 'sectorSize', 'projectName', 'sourceSnapshotUUID',
  'sourceSnapshotName', 'placementRestrictions', 'qosPolicyUUID', 'qosPolicyName', 'labels', 'state', 'protectionState', 'nodeList', 'UUID',
  'nsid', 'rebuildProgress', 'statistics', 'ETag', 'connectedHosts', 'primaryNodeUUID', 'creationTime', 'clusterId', 'pgUUID', 'encrypted',
  'missingNodesAccess',
].sort();
const STATISTICS_BYTES = ['logicalUsedStorage', 'physicalUsedStorage', 'physicalCapacity', 'physicalOwnedCapacity', 'physicalOwnedMemory', 'physicalMemory', 'userWritten'];
const STATISTICS_NUMBERS = ['compressionRatio', 'totalCompressionRatio', 'unrecoverableDataIntegrityErrors', 'recoverableDataIntegrityErrors'];
const GIB = 1024 ** 3;
const HOST_A = 'nqn.2014-08.org.nvmexpress:uuid:6d8a4c57-1a2b-4c3d-8e9f-0a1b2c3d4e5f';
const HOST_B = 'nqn.2016-06.io.example:host-b';

let n = 0;
const unique = (prefix = 'vol') => `${prefix}-${++n}-${randomUUID().slice(0, 6)}`;

function ok(res: HttpResult, what = ''): any {
  assert.equal(res.status, 200, `${what} ${JSON.stringify(res.body)}`);
  return res.body;
}

function fails(res: HttpResult, status: number, grpc: number, what = ''): void {
  assert.equal(res.status, status, `${what}: expected ${status}, got ${res.status} ${JSON.stringify(res.body)}`);
  assert.equal(res.body.code, grpc, what);
  assert.equal(res.body.error, res.body.message, what);
  assert.match(res.contentType ?? '', /application\/json/);
}

describeForEveryBackend('volumes API', (backend) => {
  let h: VolumesHarness;
  const admin = () => h.tokens.admin;
  const createOk = async (body: Record<string, unknown> = {}, project = 'default') =>
    ok(await h.create({ name: unique(), size: '1GiB', ...body }, project), `create ${JSON.stringify(body)}`);
  const get = async (uuid: string, token = admin()) => h.request('GET', `/api/v2/volumes/${uuid}`, { token });
  const put = (path: string, body: unknown, options: { token?: string; headers?: Record<string, string> } = {}) =>
    h.request('PUT', path, { token: options.token ?? admin(), body, ...(options.headers ? { headers: options.headers } : {}) });
  const available = async (uuid: string) => h.setState(uuid, 'Available');

  before(async () => {
    h = await startVolumesHarness({ backend });
  });
  after(async () => {
    await h?.close();
  });

  describe('create', () => {
    test('answers the new volume: Creating, unplaced, every field typed for the wire', async () => {
      const name = unique();
      const v = ok(await h.create({ name, size: '1GiB' }));
      assert.deepEqual(fieldsOf(v), VOLUME_FIELDS);
      assert.equal(v.name, name);
      assert.equal(v.size, String(GIB));
      assert.equal(v.state, 'Creating');
      assert.equal(v.protectionState, 'Unknown');
      assert.deepEqual(v.nodeList, []);
      assert.equal(v.nsid, 0);
      assert.equal(v.primaryNodeUUID, '');
      assert.deepEqual(v.acl, { values: ['ALLOW_NONE'] });
      assert.deepEqual(v.IPAcl, { values: ['ALLOW_ANY'] });
      assert.equal(v.compression, 'false');
      assert.equal(v.replicaCount, 1);
      assert.equal(v.minReplicas, 0);
      assert.equal(v.sectorSize, 4096);
      assert.equal(v.projectName, 'default');
      assert.equal(v.sourceSnapshotUUID, '');
      assert.equal(v.sourceSnapshotName, '');
      assert.deepEqual(v.placementRestrictions, []);
      assert.equal(v.qosPolicyUUID, '');
      assert.equal(v.qosPolicyName, '');
      assert.deepEqual(v.labels, []);
      assert.match(v.UUID, /^[0-9a-f-]{36}$/);
      assert.equal(v.rebuildProgress, '0');
      assert.deepEqual(v.connectedHosts, []);
      assert.deepEqual(v.missingNodesAccess, []);
      assert.equal(v.clusterId, h.api.cluster.UUID);
      assert.equal(v.pgUUID, '');
      assert.equal(v.encrypted, false);
      assert.ok(Math.abs(Date.parse(v.creationTime) - Date.now()) < 60_000);
      assert.match(v.creationTime, /Z$/);
      assert.deepEqual(fieldsOf(v.statistics), [...STATISTICS_BYTES, ...STATISTICS_NUMBERS].sort());
      for (const f of STATISTICS_BYTES) assert.equal(v.statistics[f], '0', f);
      assert.equal(v.statistics.compressionRatio, 1);
      // The stored record, its index, its ETag.
      const kv = (await readKey(h.etcd, keys.volume(v.UUID)))!;
      assert.equal(v.ETag, kv.modRevision);
      const record = JSON.parse(kv.value.toString());
      assert.equal(record.generation, 1);
      assert.equal(record.placement, null);
      assert.deepEqual(JSON.parse((await readText(h.etcd, keys.volumeName('default', name)))!), { UUID: v.UUID });
      const event = h.recorder.events.find((e) => e.eventName === 'VolumeCreated' && e.component.kind === 'volume' && e.component.volumes[0]?.ID === v.UUID);
      assert.ok(event);
      assert.equal(event.severity, 'Info');
      assert.equal(event.type, 'Volume');
      assert.deepEqual(event.component, { kind: 'volume', projectName: 'default', volumes: [{ ID: v.UUID, Name: name }] });
    });

    test('accepts every size form; decimal units are powers of 1000; sizes round up to whole sectors', async () => {
      for (const size of ['1073741824', '1073741824b', '1 gib', '1GiB', '1gib', '1 GIB', ' 1GiB ', 1073741824, '1048576 KiB', '1024mib', '1g']) {
        assert.equal((await createOk({ size })).size, String(GIB), String(size));
      }
      assert.equal((await createOk({ size: '2 TiB' })).size, String(2 * 1024 ** 4));
      assert.equal((await createOk({ size: '1GB' })).size, '1000001536', '10^9 rounded up to 4 KiB');
      assert.equal((await createOk({ size: '4096' })).size, '4096');
      assert.equal((await createOk({ size: '1' })).size, '4096');
      assert.equal((await createOk({ size: '5000', sectorSize: 4096 })).size, '8192');
    });

    test('rejects a missing, zero, negative, fractional or malformed size (400, gRPC 3)', async () => {
      for (const size of [undefined, null, '', '0', 0, '0 GiB', '-1', -1, '1.5GiB', '1.5', 1.5, 'abc', '1 xib', 'GiB', {}, [], true, '9999999 pib', '1e9']) {
        const res = await h.create({ name: unique(), size });
        fails(res, 400, 3, `size ${JSON.stringify(size)}`);
        assert.match(res.body.error, /size/);
      }
    });

    test('numbers as strings, enums by name, number or bytes, lenient compression', async () => {
      const v = await createOk({ replicaCount: '3', sectorSize: '4096', compression: 'True' });
      assert.equal(v.replicaCount, 3);
      assert.equal(v.sectorSize, 4096);
      assert.equal(v.compression, 'true');
      const cases: [unknown, number][] = [[0, 4096], [2, 4096], ['0', 4096], [4096, 4096], ['4096', 4096], ['sectorSize_Default', 4096], ['sectorSize_4K', 4096], ['4K', 4096]];
      for (const [sectorSize, expected] of cases) assert.equal((await createOk({ sectorSize })).sectorSize, expected, String(sectorSize));
      // Every form of 512 parses, and is then refused for what it is (next test).
      for (const sectorSize of [1, '1', 512, '512', '512B', 'sectorSize_512B', 'sectorsize_512b']) {
        const res = await h.create({ name: unique(), size: '1GiB', sectorSize });
        fails(res, 400, 3, `sectorSize ${JSON.stringify(sectorSize)}`);
        assert.match(res.body.error, /sectorSize_512B is not supported/, String(sectorSize));
      }
      for (const sectorSize of [3, 1024, 'sectorSize_1K', true, {}]) fails(await h.create({ name: unique(), size: '1GiB', sectorSize }), 400, 3, `sectorSize ${JSON.stringify(sectorSize)}`);
      const compressions: [unknown, string][] = [[true, 'true'], ['true', 'true'], ['enable', 'true'], ['enabled', 'true'], ['Enabled', 'true'], [false, 'false'], ['False', 'false'], ['disable', 'false'], ['disabled', 'false'], ['', 'false']];
      for (const [compression, expected] of compressions) assert.equal((await createOk({ compression })).compression, expected, String(compression));
      for (const compression of ['yes', 1, 'on', {}]) fails(await h.create({ name: unique(), size: '1GiB', compression }), 400, 3, `compression ${JSON.stringify(compression)}`);
    });

    test('sectorSize_512B is refused at create (400, says why) and nothing is written: the data path serves 4096-byte blocks only', async () => {
      const name = unique();
      const res = await h.create({ name, size: '1GiB', sectorSize: 'sectorSize_512B' });
      fails(res, 400, 3, 'sectorSize_512B');
      assert.match(res.body.error, /sectorSize_512B is not supported: .*logical block size is 4096 bytes/);
      assert.equal(await readText(h.etcd, keys.volumeName('default', name)), null, 'no name index');
      const records = await textsUnder(h.etcd, keys.volumesPrefix());
      assert.equal(records.some((r) => JSON.parse(r).name === name), false, 'no volume record');
      fails(await h.request('GET', `/api/v2/projects/default/volumes/?name=${name}`, { token: admin() }), 404, 5, 'no volume');
    });

    test('null means not given; unknown keys are ignored', async () => {
      const v = await createOk({
        acl: null, IPAcl: null, compression: null, replicaCount: null, minReplicas: null, sectorSize: null, projectName: null, sourceSnapshotUUID: null,
        sourceSnapshotName: null, placementRestrictions: null, qosPolicyUUID: null, qosPolicyName: null, labels: null, unencrypted: null,
        someFutureField: { nested: [1, 2] }, Name: 'ignored', SIZE: 'ignored',
      });
      assert.equal(v.replicaCount, 1);
      assert.deepEqual(v.acl, { values: ['ALLOW_NONE'] });
      assert.equal((await createOk({ acl: { values: null } })).acl.values[0], 'ALLOW_NONE');
      assert.equal((await createOk({ acl: {} })).acl.values[0], 'ALLOW_NONE');
      assert.equal((await createOk({ minReplicas: '2', unencrypted: 'true' })).encrypted, false);
      fails(await h.create({ name: null, size: '1GiB' }), 400, 3, 'name null is missing');
      fails(await h.create({ size: '1GiB' }), 400, 3, 'name missing');
    });

    test('names: 1 to 253 of a-z A-Z 0-9 - _ .', async () => {
      assert.equal((await createOk({ name: 'a' })).name, 'a');
      const long = 'x'.repeat(253);
      assert.equal((await createOk({ name: long })).name, long);
      for (const name of ['', 'x'.repeat(254), 'has space', 'slash/name', 'ünïcode', 'a:b', 7, ['a'], { a: 1 }]) {
        fails(await h.create({ name, size: '1GiB' }), 400, 3, `name ${JSON.stringify(name)}`);
      }
    });

    test('path parameters override body fields; unscoped create uses projectName, default project when absent', async () => {
      assert.equal((await createOk({ projectName: '' }, 'p2')).projectName, 'p2');
      assert.equal((await createOk({ projectName: 'default' }, 'p2')).projectName, 'p2');
      const unscoped = ok(await h.request('POST', '/api/v2/volumes', { token: admin(), body: { name: unique(), size: '1GiB', projectName: 'p2' } }));
      assert.equal(unscoped.projectName, 'p2');
      const defaulted = ok(await h.request('POST', '/api/v2/volumes', { token: admin(), body: { name: unique(), size: '1GiB' } }));
      assert.equal(defaulted.projectName, 'default');
      fails(await h.request('POST', '/api/v2/volumes', { token: admin(), body: { name: unique(), size: '1GiB', projectName: 'nope' } }), 404, 5, 'unknown project');
      fails(await h.create({ name: unique(), size: '1GiB' }, 'nope'), 404, 5, 'unknown project in path');
      fails(await h.create({ name: unique(), size: '1GiB' }, 'bad%20name'), 400, 3, 'invalid project name in path');
    });

    test('acl: NQNs in request order, or exactly one of ALLOW_ANY / ALLOW_NONE', async () => {
      const upper = 'nqn.2014-08.org.nvmexpress:uuid:6D8A4C57-1A2B-4C3D-8E9F-0A1B2C3D4E5F';
      const values = [HOST_B, HOST_A, upper, 'nqn.2004-10.com.ubuntu:host', 'nqn.2023-12.local'];
      assert.deepEqual((await createOk({ acl: { values } })).acl.values, values);
      assert.deepEqual((await createOk({ acl: { values: ['ALLOW_ANY'] } })).acl.values, ['ALLOW_ANY']);
      assert.deepEqual((await createOk({ acl: { values: [] } })).acl.values, ['ALLOW_NONE']);
      const bad: unknown[] = [
        ['ALLOW_ANY', HOST_A], [HOST_A, 'ALLOW_NONE'], ['ALLOW_ANY', 'ALLOW_NONE'], ['ALLOW_NONE', 'ALLOW_NONE'], ['allow_any'],
        ['host-a'], ['nqn.14-08.org.x'], ['nqn.2014-13.org.x'], ['nqn.2014-08'], ['nqn.2014-08.org.nvmexpress:uuid:not-a-uuid'],
        [`nqn.2014-08.org.example:${'x'.repeat(200)}`], ['nqn.2014-08.org.ex ample'], [7], [null], 'ALLOW_ANY',
      ];
      for (const v of bad) fails(await h.create({ name: unique(), size: '1GiB', acl: { values: v } }), 400, 3, `acl ${JSON.stringify(v)}`);
      for (const acl of [['ALLOW_ANY'], 'ALLOW_ANY', 5]) fails(await h.create({ name: unique(), size: '1GiB', acl }), 400, 3, `acl ${JSON.stringify(acl)}`);
    });

    test('IPAcl: addresses, or exactly one of ALLOW_ANY / ALLOW_NONE; default ALLOW_ANY', async () => {
      const values = ['10.0.0.2', '::1', 'fe80::1', '192.168.1.1'];
      assert.deepEqual((await createOk({ IPAcl: { values } })).IPAcl.values, values);
      assert.deepEqual((await createOk({ IPAcl: { values: ['ALLOW_NONE'] } })).IPAcl.values, ['ALLOW_NONE']);
      for (const v of [['10.0.0.256'], ['10.0.0.0/24'], ['host'], ['ALLOW_ANY', '10.0.0.1'], [''], [1]]) {
        fails(await h.create({ name: unique(), size: '1GiB', IPAcl: { values: v } }), 400, 3, `IPAcl ${JSON.stringify(v)}`);
      }
    });

    test('replicaCount 1 to 3, bounded by the cluster current maximum', async () => {
      for (const replicaCount of [0, 4, -1, '4', 'three', 1.5]) fails(await h.create({ name: unique(), size: '1GiB', replicaCount }), 400, 3, `replicaCount ${replicaCount}`);
      h.limits.max = 2;
      try {
        const res = await h.create({ name: unique(), size: '1GiB', replicaCount: 3 });
        fails(res, 400, 3, 'above current maximum');
        assert.match(res.body.error, /maximum of 2/);
        assert.equal((await createOk({ replicaCount: 2 })).replicaCount, 2);
      } finally {
        h.limits.max = 3;
      }
    });

    test('labels: at most 16, unique keys, name charset', async () => {
      const labels = Array.from({ length: 16 }, (_, i) => ({ key: `k${i}`, value: `v.${i}` }));
      assert.deepEqual((await createOk({ labels })).labels, labels);
      const bad: unknown[] = [
        [...labels, { key: 'k16', value: 'v' }], [{ key: 'a', value: '1' }, { key: 'a', value: '2' }], [{ key: '', value: 'v' }], [{ key: 'k', value: '' }],
        [{ key: 'k', value: 'a b' }], [{ key: 'k' }], ['k=v'], [{ key: 'x'.repeat(254), value: 'v' }], { key: 'k', value: 'v' },
      ];
      for (const l of bad) fails(await h.create({ name: unique(), size: '1GiB', labels: l }), 400, 3, `labels ${JSON.stringify(l)}`);
    });

    test('placementRestrictions only for replicaCount 1 with fail-in-place and proactive-rebalance disabled', async () => {
      const restrictions = [{ operator: 'In', labelValueKeyPairs: [{ key: 'FD', value: 'rack-1' }, { key: 'ClusterID', value: h.api.cluster.UUID }] }];
      assert.deepEqual((await createOk({ placementRestrictions: restrictions })).placementRestrictions, restrictions);
      const byNumber = await createOk({ placementRestrictions: [{ operator: 1, labelValueKeyPairs: [{ key: 2, value: 'rack-2' }] }] });
      assert.deepEqual(byNumber.placementRestrictions, [{ operator: 'In', labelValueKeyPairs: [{ key: 'PrimaryFD', value: 'rack-2' }] }]);
      fails(await h.create({ name: unique(), size: '1GiB', replicaCount: 2, placementRestrictions: restrictions }), 400, 3, 'replicaCount 2');
      for (const flag of ['fail-in-place', 'proactive-rebalance'] as const) {
        await h.setFlag(flag, true);
        fails(await h.create({ name: unique(), size: '1GiB', placementRestrictions: restrictions }), 400, 3, flag);
        await h.setFlag(flag, false);
      }
      const bad: unknown[] = [
        [{ operator: 'Unknown', labelValueKeyPairs: [{ key: 'FD', value: 'a' }] }], [{ operator: 'In', labelValueKeyPairs: [] }],
        [{ operator: 'In', labelValueKeyPairs: [{ key: 'Unknown', value: 'a' }] }], [{ operator: 'In', labelValueKeyPairs: [{ key: 'FD', value: '' }] }],
        [{ operator: 'In', labelValueKeyPairs: [{ key: 'ClusterID', value: randomUUID() }] }], [{ operator: 'NotIn', labelValueKeyPairs: [{ key: 'FD', value: 'a' }] }], 'FD=a',
      ];
      for (const p of bad) fails(await h.create({ name: unique(), size: '1GiB', placementRestrictions: p }), 400, 3, `placementRestrictions ${JSON.stringify(p)}`);
      assert.deepEqual((await createOk({ placementRestrictions: [] })).placementRestrictions, []);
    });

    test('QoS policy by UUID or name; absent shows the project default in effect', async () => {
      const gold = await h.putPolicy({ name: unique('gold') });
      const silver = await h.putPolicy({ name: unique('silver') });
      const scoped = await h.putPolicy({ name: unique('scoped'), policyVisibility: 'Scoped', projectsNamesScope: ['p2'] });
      const byName = await createOk({ qosPolicyName: gold.name });
      assert.deepEqual([byName.qosPolicyUUID, byName.qosPolicyName], [gold.UUID, gold.name]);
      const byUuid = await createOk({ qosPolicyUUID: gold.UUID });
      assert.deepEqual([byUuid.qosPolicyUUID, byUuid.qosPolicyName], [gold.UUID, gold.name]);
      assert.equal((await createOk({ qosPolicyUUID: gold.UUID, qosPolicyName: gold.name })).qosPolicyUUID, gold.UUID);
      fails(await h.create({ name: unique(), size: '1GiB', qosPolicyUUID: gold.UUID, qosPolicyName: silver.name }), 400, 3, 'UUID and name disagree');
      fails(await h.create({ name: unique(), size: '1GiB', qosPolicyName: 'no-such-policy' }), 404, 5, 'unknown policy');
      fails(await h.create({ name: unique(), size: '1GiB', qosPolicyUUID: scoped.UUID }), 400, 3, 'policy not visible to default');
      assert.equal((await createOk({ qosPolicyUUID: scoped.UUID }, 'p2')).qosPolicyUUID, scoped.UUID);

      await h.putProject('p3', silver.UUID);
      const plain = await createOk({}, 'p3');
      assert.deepEqual([plain.qosPolicyUUID, plain.qosPolicyName], [silver.UUID, silver.name], 'the project default applies');
      assert.equal(JSON.parse((await readText(h.etcd, keys.volume(plain.UUID)))!).qosPolicyUUID, '', 'stored as "none given"');
      await h.putProject('p3', gold.UUID);
      assert.equal(ok(await get(plain.UUID)).qosPolicyName, gold.name, 'follows the project default');
    });

    test('clone from a snapshot by UUID or name: size, labels, compression and sector size come from the snapshot', async () => {
      const labels = [{ key: 'from', value: 'snapshot' }];
      const snap = await h.putSnapshot({ name: unique('snap'), projectName: 'default', sizeBytes: String(2 * GIB), compression: true, sectorSize: 4096, labels });
      const clone = await createOk({ size: null, sourceSnapshotUUID: snap.UUID });
      assert.equal(clone.size, String(2 * GIB));
      assert.deepEqual(clone.labels, labels);
      assert.equal(clone.compression, 'true');
      assert.equal(clone.sectorSize, 4096);
      assert.deepEqual([clone.sourceSnapshotUUID, clone.sourceSnapshotName], [snap.UUID, snap.name]);
      const byName = await createOk({ size: '3GiB', sourceSnapshotName: snap.name, labels: [{ key: 'own', value: 'x' }], compression: false, sectorSize: 'sectorSize_4K' });
      assert.equal(byName.size, String(3 * GIB));
      assert.deepEqual(byName.labels, [{ key: 'own', value: 'x' }]);
      assert.equal(byName.compression, 'false');
      assert.equal(byName.sourceSnapshotUUID, snap.UUID);

      fails(await h.create({ name: unique(), size: '1GiB', sourceSnapshotUUID: snap.UUID }), 400, 3, 'smaller than the snapshot');
      fails(await h.create({ name: unique(), sourceSnapshotUUID: snap.UUID, sectorSize: 512 }), 400, 3, 'sector size differs');
      // A snapshot of 512-byte sectors (stored by an earlier build) cannot be cloned into a volume served with them.
      const snap512 = await h.putSnapshot({ name: unique('snap'), projectName: 'default', sizeBytes: String(GIB), sectorSize: 512 });
      const refused = await h.create({ name: unique(), sourceSnapshotUUID: snap512.UUID });
      fails(refused, 400, 3, 'clone of a 512-byte-sector snapshot');
      assert.match(refused.body.error, /sectorSize_512B is not supported/);
      fails(await h.create({ name: unique(), sourceSnapshotUUID: snap.UUID, sourceSnapshotName: snap.name }), 400, 3, 'both given');
      fails(await h.create({ name: unique(), sourceSnapshotName: 'no-such-snapshot' }), 404, 5, 'unknown snapshot');
      fails(await h.create({ name: unique(), sourceSnapshotUUID: snap.UUID }, 'p2'), 404, 5, 'snapshot of another project');
      const creating = await h.putSnapshot({ name: unique('snap'), projectName: 'default', state: 'Creating' });
      fails(await h.create({ name: unique(), sourceSnapshotUUID: creating.UUID }), 503, 14, 'snapshot Creating');
      for (const state of ['Failed', 'Deleting'] as const) {
        const s = await h.putSnapshot({ name: unique('snap'), projectName: 'default', state });
        fails(await h.create({ name: unique(), sourceSnapshotUUID: s.UUID }), 400, 3, `snapshot ${state}`);
      }
    });

    test('a taken name is a 409 in the same project and free in another', async () => {
      const name = unique();
      await createOk({ name });
      fails(await h.create({ name, size: '2GiB' }), 409, 6, 'same project');
      assert.equal((await createOk({ name }, 'p2')).name, name);
    });

    test('401 without a valid token, 403 without write access to the project', async () => {
      const body = { name: unique(), size: '1GiB' };
      fails(await h.request('POST', '/api/v2/projects/default/volumes', { body }), 401, 16, 'no token');
      fails(await h.request('POST', '/api/v2/projects/default/volumes', { body, token: 'garbage' }), 401, 16, 'bad token');
      fails(await h.request('POST', '/api/v2/projects/default/volumes', { body, token: h.tokens.defaultViewer }), 403, 7, 'viewer');
      fails(await h.request('POST', '/api/v2/projects/default/volumes', { body, token: h.tokens.clusterViewer }), 403, 7, 'cluster viewer');
      fails(await h.request('POST', '/api/v2/projects/default/volumes', { body, token: h.tokens.p2Admin }), 403, 7, 'other project admin');
      ok(await h.request('POST', '/api/v2/projects/default/volumes', { body, token: h.tokens.defaultAdmin }));
      ok(await h.request('POST', '/api/v2/volumes', { body: { name: unique(), size: '1GiB', projectName: 'p2' }, token: h.tokens.p2Admin }));
      fails(await h.request('POST', '/api/v2/volumes', { body: { name: unique(), size: '1GiB' }, token: h.tokens.p2Admin }), 403, 7, 'default project implied');
      fails(await h.request('POST', '/api/v2/projects/default/volumes', { body: { size: '1GiB' } }), 401, 16, 'authentication before parameters');
      fails(await h.request('POST', '/api/v2/projects/default/volumes', { body: { size: '1GiB' }, token: h.tokens.p2Admin }), 400, 3, 'parameters before permission');
    });
  });

  describe('get', () => {
    test('by UUID, unscoped and project-scoped; the project must match', async () => {
      const v = await createOk();
      assert.deepEqual(ok(await get(v.UUID)), v);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/projects/default/volumes/${v.UUID}`, { token: admin() })), v);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/volumes/${v.UUID}?projectName=default`, { token: admin() })), v);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/volumes/${v.UUID.toUpperCase()}`, { token: admin() })), v, 'UUIDs are case-insensitive');
      assert.deepEqual(ok(await h.request('GET', `/api/v2/volumes/${v.UUID}?name=whatever`, { token: admin() })), v, 'a UUID wins over a name');
      fails(await h.request('GET', `/api/v2/projects/p2/volumes/${v.UUID}`, { token: admin() }), 404, 5, 'other project');
      fails(await h.request('GET', `/api/v2/volumes/${v.UUID}?projectName=p2`, { token: admin() }), 404, 5, 'other project in query');
      fails(await get(randomUUID()), 404, 5, 'unknown');
      fails(await get('not-a-uuid'), 400, 3, 'malformed UUID');
      fails(await h.request('GET', '/api/v2/volumes/%E0%A4%A', { token: admin() }), 400, 3, 'malformed escape');
    });

    test('by name with a trailing slash and an empty id: one object, 404 when absent', async () => {
      const v = await createOk();
      const p2 = await createOk({ name: v.name }, 'p2');
      assert.deepEqual(ok(await h.request('GET', `/api/v2/projects/default/volumes/?name=${v.name}`, { token: admin() })), v);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/volumes/?name=${v.name}&projectName=default`, { token: admin() })), v);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/volumes/?name=${v.name}`, { token: admin() })), v, 'default project');
      assert.deepEqual(ok(await h.request('GET', `/api/v2/projects/p2/volumes/?name=${v.name}`, { token: admin() })), p2);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/volumes/?name=${v.name}&projectName=p2`, { token: admin() })), p2);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/projects/p2/volumes/?name=${v.name}&projectName=default`, { token: admin() })), p2, 'path wins');
      assert.deepEqual(ok(await h.request('GET', `/api/v2/volumes/?UUID=${v.UUID}`, { token: admin() })), v);
      fails(await h.request('GET', '/api/v2/projects/default/volumes/?name=absent', { token: admin() }), 404, 5, 'absent');
      fails(await h.request('GET', '/api/v2/projects/default/volumes/', { token: admin() }), 400, 3, 'no name');
      fails(await h.request('GET', '/api/v2/projects/default/volumes/?Name=x', { token: admin() }), 400, 3, 'query names are case-sensitive');
      fails(await h.request('GET', '/api/v2/projects/default/volumes/?name=a&name=b', { token: admin() }), 400, 3, 'repeated');
      // Without the slash the same query is a list filter.
      const list = ok(await h.request('GET', `/api/v2/projects/default/volumes?name=${v.name}`, { token: admin() }));
      assert.deepEqual(list, { volumes: [v] });
    });

    test('read access: project roles of the volume project, cluster roles', async () => {
      const v = await createOk();
      ok(await get(v.UUID, h.tokens.defaultViewer));
      ok(await get(v.UUID, h.tokens.defaultAdmin));
      ok(await get(v.UUID, h.tokens.clusterViewer));
      // Another project's volume by UUID looks absent (issue 17: no existence oracle).
      const foreign = await get(v.UUID, h.tokens.p2Admin);
      fails(foreign, 404, 5, 'other project by UUID');
      const absentUUID = randomUUID();
      const absent = await get(absentUUID, h.tokens.p2Admin);
      fails(absent, 404, 5, 'absent UUID');
      assert.equal(foreign.body.message.replace(v.UUID, 'X'), absent.body.message.replace(absentUUID, 'X'), 'the same answer for both');
      fails(await h.request('GET', `/api/v2/projects/default/volumes/${v.UUID}`, { token: h.tokens.p2Admin }), 403, 7, 'other project scoped');
      fails(await h.request('GET', `/api/v2/projects/default/volumes/${randomUUID()}`, { token: h.tokens.p2Admin }), 403, 7, '403 before 404');
      fails(await h.request('GET', `/api/v2/volumes/?name=${v.name}`, { token: h.tokens.p2Admin }), 403, 7, 'by name');
      fails(await get(v.UUID, ''), 401, 16, 'no token');
    });
  });

  describe('list', () => {
    test('projectName is mandatory unless the caller has a cluster role', async () => {
      const d = await createOk();
      const p = await createOk({}, 'p2');
      const all = ok(await h.request('GET', '/api/v2/volumes', { token: admin() })).volumes.map((v: any) => v.UUID);
      assert.ok(all.includes(d.UUID) && all.includes(p.UUID));
      const viewer = ok(await h.request('GET', '/api/v2/volumes', { token: h.tokens.clusterViewer })).volumes.map((v: any) => v.UUID);
      assert.ok(viewer.includes(d.UUID) && viewer.includes(p.UUID));
      fails(await h.request('GET', '/api/v2/volumes', { token: h.tokens.defaultAdmin }), 400, 3, 'project token without projectName');
      const scoped = ok(await h.request('GET', '/api/v2/volumes?projectName=default', { token: h.tokens.defaultViewer })).volumes;
      assert.ok(scoped.every((v: any) => v.projectName === 'default'));
      assert.ok(scoped.some((v: any) => v.UUID === d.UUID));
      const path = ok(await h.request('GET', '/api/v2/projects/p2/volumes', { token: h.tokens.p2Admin })).volumes;
      assert.ok(path.every((v: any) => v.projectName === 'p2') && path.some((v: any) => v.UUID === p.UUID));
      fails(await h.request('GET', '/api/v2/projects/p2/volumes', { token: h.tokens.defaultAdmin }), 403, 7, 'other project');
      fails(await h.request('GET', '/api/v2/volumes?projectName=p2', { token: h.tokens.defaultViewer }), 403, 7, 'other project in query');
      fails(await h.request('GET', '/api/v2/projects/nope/volumes', { token: admin() }), 404, 5, 'unknown project');
      fails(await h.request('GET', '/api/v2/volumes'), 401, 16, 'no token');
    });

    test('filters: UUID, name, snapshotUUID, failureDomain; showAll adds Deleting volumes', async () => {
      await h.putProject('plist');
      const a = await createOk({}, 'plist');
      const b = await createOk({}, 'plist');
      const snap = await h.putSnapshot({ name: unique('snap'), projectName: 'plist' });
      const clone = await createOk({ sourceSnapshotUUID: snap.UUID }, 'plist');
      const server = await joinServer(h.etcd, { nodes: [{ failureDomains: ['fd-x'] }, { failureDomains: ['fd-y'] }] });
      await h.place(a.UUID, { nodeList: [server.nodes[0]!.UUID] });
      await h.place(b.UUID, { nodeList: [server.nodes[1]!.UUID] });
      const names = async (query: string) =>
        ok(await h.request('GET', `/api/v2/projects/plist/volumes${query}`, { token: admin() })).volumes.map((v: any) => v.UUID).sort();
      assert.deepEqual(await names(''), [a.UUID, b.UUID, clone.UUID].sort());
      assert.deepEqual(await names(`?UUID=${a.UUID}`), [a.UUID]);
      assert.deepEqual(await names(`?name=${b.name}`), [b.UUID]);
      assert.deepEqual(await names(`?snapshotUUID=${snap.UUID}`), [clone.UUID]);
      assert.deepEqual(await names('?failureDomain=fd-x'), [a.UUID]);
      assert.deepEqual(await names('?failureDomain=fd-y'), [b.UUID]);
      assert.deepEqual(await names('?failureDomain=none'), []);
      assert.deepEqual(await names(`?name=${a.name}&failureDomain=fd-y`), [], 'filters combine');
      assert.deepEqual(await names('?uuid=x&NAME=y'), [a.UUID, b.UUID, clone.UUID].sort(), 'unknown query names are ignored');
      ok(await h.request('DELETE', `/api/v2/volumes/${a.UUID}`, { token: admin() }));
      assert.deepEqual(await names(''), [b.UUID, clone.UUID].sort());
      assert.deepEqual(await names('?showAll=false'), [b.UUID, clone.UUID].sort());
      assert.deepEqual(await names('?showAll=true'), [a.UUID, b.UUID, clone.UUID].sort());
      assert.deepEqual(await names('?showAll=True'), [a.UUID, b.UUID, clone.UUID].sort());
      for (const query of ['?limit=abc', '?limit=-1', '?limit=1.5', '?offsetUUID=nope', '?showAll=maybe', '?UUID=nope', '?limit=1&limit=2']) {
        fails(await h.request('GET', `/api/v2/projects/plist/volumes${query}`, { token: admin() }), 400, 3, query);
      }
    });

    test('pages in UUID order: limit, offsetUUID, until an empty list', async () => {
      await h.putProject('ppage');
      const created = [];
      for (let i = 0; i < 11; i++) created.push((await createOk({}, 'ppage')).UUID);
      created.sort();
      const seen: string[] = [];
      let offset = '';
      for (let guard = 0; guard < 20; guard++) {
        const page = ok(await h.request('GET', `/api/v2/projects/ppage/volumes?limit=4${offset ? `&offsetUUID=${offset}` : ''}`, { token: admin() })).volumes;
        if (page.length === 0) break;
        assert.ok(page.length <= 4);
        seen.push(...page.map((v: any) => v.UUID));
        offset = page[page.length - 1].UUID;
      }
      assert.deepEqual(seen, created);
      const big = ok(await h.request('GET', '/api/v2/projects/ppage/volumes?limit=5000', { token: admin() })).volumes;
      assert.equal(big.length, 11, 'limit above the maximum is clamped');
      assert.equal(ok(await h.request('GET', '/api/v2/projects/ppage/volumes?limit=0', { token: admin() })).volumes.length, 11, 'limit 0 is the default');
      assert.equal(ok(await h.request('GET', '/api/v2/projects/ppage/volumes?limit=2', { token: admin() })).volumes.length, 2);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/projects/ppage/volumes?offsetUUID=${created[10]}`, { token: admin() })).volumes, []);
    });
  });

  describe('update', () => {
    test('size grows through Updating with a new generation and ETag; PUT answers {}', async () => {
      const v = await createOk();
      await available(v.UUID);
      const before = ok(await get(v.UUID));
      const res = ok(await put(`/api/v2/volumes/${v.UUID}`, { size: '2GiB' }));
      assert.deepEqual(res, {});
      const after = ok(await get(v.UUID));
      assert.equal(after.size, String(2 * GIB));
      assert.equal(after.state, 'Updating');
      assert.notEqual(after.ETag, before.ETag);
      assert.equal((await h.record(v.UUID))!.generation, 2);
      assert.ok(h.recorder.events.some((e) => e.eventName === 'VolumeUpdated' && e.component.kind === 'volume' && e.component.volumes[0]?.ID === v.UUID));
      fails(await put(`/api/v2/volumes/${v.UUID}`, { size: '3GiB' }), 503, 14, 'Updating');
    });

    test('shrinking is refused (400, says why) with or without Force, writing nothing; the same size changes nothing', async () => {
      const v = await createOk({ size: '4GiB' });
      await available(v.UUID);
      const etag = ok(await get(v.UUID)).ETag;
      ok(await put(`/api/v2/volumes/${v.UUID}`, { size: '4GiB' }));
      ok(await put(`/api/v2/volumes/${v.UUID}`, {}));
      ok(await put(`/api/v2/volumes/${v.UUID}`, { unknown: 1, size: null, labels: [] }));
      assert.equal(ok(await get(v.UUID)).ETag, etag, 'no-op updates do not write');
      const res = await put(`/api/v2/volumes/${v.UUID}`, { size: '1GiB' });
      fails(res, 400, 3, 'shrink without Force');
      assert.match(res.body.error, /Force/);
      fails(await put(`/api/v2/volumes/${v.UUID}`, { size: '1GiB', Force: false }), 400, 3, 'Force false');
      for (const Force of [true, 'true']) {
        const forced = await put(`/api/v2/volumes/${v.UUID}`, { size: '1GiB', Force, acl: { values: [HOST_A] } });
        fails(forced, 400, 3, `shrink with Force ${JSON.stringify(Force)}`);
        assert.match(forced.body.error, /shrinking a volume is not supported, with or without Force/);
      }
      const after = ok(await get(v.UUID));
      assert.equal(after.size, String(4 * GIB), 'the size the hosts see');
      assert.equal(after.state, 'Available');
      assert.equal(after.ETag, etag, 'nothing written, not even the acl sent with it');
      assert.equal((await h.record(v.UUID))!.generation, 1);
    });

    test('replicated volumes: changing replicaCount and shrinking are refused (400, says why), writing nothing; the same replicaCount is a no-op; growing goes through Updating at a new generation', async () => {
      const server = await joinServer(h.etcd, { nodes: [{}, {}] });
      const v = await createOk({ replicaCount: 2, size: '4GiB' });
      await h.place(v.UUID, { nodeList: server.nodes.map((n) => n.UUID) });
      const etag = ok(await get(v.UUID)).ETag;
      ok(await put(`/api/v2/volumes/${v.UUID}`, { replicaCount: 2 }));
      for (const replicaCount of [1, 3]) {
        const res = await put(`/api/v2/volumes/${v.UUID}`, { replicaCount, acl: { values: [HOST_A] } });
        fails(res, 400, 3, `replicaCount 2 → ${replicaCount}`);
        assert.match(res.body.error, /changing the replica count of an existing volume is not supported/);
      }
      fails(await put(`/api/v2/volumes/${v.UUID}`, { replicaCount: 4 }), 400, 3, 'replicaCount out of range');
      const shrink = await put(`/api/v2/volumes/${v.UUID}`, { size: '2GiB' });
      fails(shrink, 400, 3, 'shrink of a replicated volume');
      assert.match(shrink.body.error, /shrinking a volume is not supported/);
      assert.equal(ok(await get(v.UUID)).ETag, etag, 'nothing written');
      assert.deepEqual(ok(await put(`/api/v2/volumes/${v.UUID}`, { size: '8GiB' })), {});
      const grown = ok(await get(v.UUID));
      assert.equal(grown.size, String(8 * GIB));
      assert.equal(grown.state, 'Updating');
      assert.equal(Number(grown.replicaCount), 2);
      const record = (await h.record(v.UUID))!;
      assert.equal(record.generation, 2);
      assert.equal(record.sizeBytes, String(8 * GIB));
    });

    test('changing compression is refused (400, says why), writing nothing; sending the current value is a no-op', async () => {
      for (const [initial, change] of [[false, 'enabled'], [true, 'false']] as const) {
        const v = await createOk({ compression: initial });
        await available(v.UUID);
        const etag = ok(await get(v.UUID)).ETag;
        const res = await put(`/api/v2/projects/default/volumes/${v.UUID}`, { compression: change, acl: { values: [HOST_A] } });
        fails(res, 400, 3, `compression ${initial} → ${change}`);
        assert.match(res.body.error, /compression cannot be changed .*fixed when it is created/);
        const after = ok(await get(v.UUID));
        assert.equal(after.compression, String(initial));
        assert.equal(after.state, 'Available');
        assert.equal(after.ETag, etag, 'nothing written, not even the acl sent with it');
        ok(await put(`/api/v2/volumes/${v.UUID}`, { compression: String(initial) }));
        assert.equal(ok(await get(v.UUID)).ETag, etag, 'the current value changes nothing');
      }
    });

    test('acl, IPAcl and QoS go through Updating; labels and rename do not', async () => {
      const gold = await h.putPolicy({ name: unique('gold') });
      const cases: [Record<string, unknown>, (v: any) => void][] = [
        [{ acl: { values: [HOST_A, HOST_B] } }, (v) => assert.deepEqual(v.acl.values, [HOST_A, HOST_B])],
        [{ IPAcl: { values: ['10.1.1.1'] } }, (v) => assert.deepEqual(v.IPAcl.values, ['10.1.1.1'])],
        [{ qosPolicyName: gold.name }, (v) => assert.deepEqual([v.qosPolicyUUID, v.qosPolicyName], [gold.UUID, gold.name])],
      ];
      for (const [body, check] of cases) {
        const v = await createOk({ labels: [{ key: 'keep', value: 'me' }] });
        await available(v.UUID);
        ok(await put(`/api/v2/projects/default/volumes/${v.UUID}`, body), JSON.stringify(body));
        const after = ok(await get(v.UUID));
        check(after);
        assert.equal(after.state, 'Updating', JSON.stringify(body));
        assert.deepEqual(after.labels, [{ key: 'keep', value: 'me' }], 'omitted labels stay');
        assert.equal((await h.record(v.UUID))!.generation, 2);
      }
      const v = await createOk({ labels: [{ key: 'a', value: '1' }, { key: 'b', value: '2' }] });
      await available(v.UUID);
      ok(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'c', value: '3' }] }));
      let after = ok(await get(v.UUID));
      assert.deepEqual(after.labels, [{ key: 'c', value: '3' }], 'given labels replace all');
      assert.equal(after.state, 'Available');
      assert.equal((await h.record(v.UUID))!.generation, 1);
      fails(await put(`/api/v2/volumes/${v.UUID}`, { acl: { values: ['ALLOW_ANY', HOST_A] } }), 400, 3, 'mixed acl');
      fails(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'x', value: '1' }, { key: 'x', value: '2' }] }), 400, 3, 'duplicate labels');
      fails(await put(`/api/v2/volumes/${v.UUID}`, { qosPolicyName: 'no-such-policy' }), 404, 5, 'unknown policy');
      after = ok(await get(v.UUID));
      assert.deepEqual(after.labels, [{ key: 'c', value: '3' }]);
    });

    test('newName renames in one transaction: the old name is free, a taken one is 409', async () => {
      const v = await createOk();
      const other = await createOk();
      await available(v.UUID);
      const newName = unique('renamed');
      ok(await put(`/api/v2/volumes/${v.UUID}`, { newName }));
      const after = ok(await get(v.UUID));
      assert.equal(after.name, newName);
      assert.equal(after.state, 'Available');
      assert.equal((await readText(h.etcd, keys.volumeName('default', v.name))), null);
      assert.deepEqual(JSON.parse((await readText(h.etcd, keys.volumeName('default', newName)))!), { UUID: v.UUID });
      fails(await h.request('GET', `/api/v2/projects/default/volumes/?name=${v.name}`, { token: admin() }), 404, 5, 'old name');
      assert.equal(ok(await h.request('GET', `/api/v2/projects/default/volumes/?name=${newName}`, { token: admin() })).UUID, v.UUID);
      fails(await put(`/api/v2/volumes/${v.UUID}`, { newName: other.name }), 409, 6, 'taken');
      assert.equal(ok(await get(v.UUID)).name, newName);
      await createOk({ name: v.name });
      fails(await put(`/api/v2/volumes/${v.UUID}`, { newName: 'bad name' }), 400, 3, 'invalid new name');
    });

    test('by name: trailing slash with ?name= or a body name; path overrides body', async () => {
      const v = await createOk();
      await available(v.UUID);
      ok(await put(`/api/v2/projects/default/volumes/?name=${v.name}`, { labels: [{ key: 'via', value: 'query' }] }));
      assert.deepEqual(ok(await get(v.UUID)).labels, [{ key: 'via', value: 'query' }]);
      ok(await put('/api/v2/volumes/', { name: v.name, projectName: 'default', labels: [{ key: 'via', value: 'body' }] }));
      assert.deepEqual(ok(await get(v.UUID)).labels, [{ key: 'via', value: 'body' }]);
      ok(await put('/api/v2/volumes', { name: v.name, labels: [{ key: 'via', value: 'noslash' }] }));
      assert.deepEqual(ok(await get(v.UUID)).labels, [{ key: 'via', value: 'noslash' }]);
      ok(await put(`/api/v2/projects/default/volumes/${v.UUID}`, { projectName: 'p2', UUID: randomUUID(), labels: [{ key: 'via', value: 'path' }] }));
      assert.deepEqual(ok(await get(v.UUID)).labels, [{ key: 'via', value: 'path' }], 'path UUID and project win over the body');
      ok(await put(`/api/v2/volumes/${v.UUID}?projectName=default`, { labels: [{ key: 'via', value: 'pve' }] }));
      fails(await put(`/api/v2/volumes/${v.UUID}`, { projectName: 'p2', labels: [{ key: 'x', value: 'y' }] }), 404, 5, 'body project must match');
      fails(await put('/api/v2/projects/default/volumes/?name=absent', { labels: [{ key: 'x', value: 'y' }] }), 404, 5, 'absent');
      fails(await put('/api/v2/projects/default/volumes/', { labels: [{ key: 'x', value: 'y' }] }), 400, 3, 'no name');
    });

    test('state rules: Creating/Updating 503; Deleting/Failed 400', async () => {
      const v = await createOk();
      fails(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'a', value: 'b' }] }), 503, 14, 'Creating');
      await h.setState(v.UUID, 'Updating');
      fails(await put(`/api/v2/volumes/${v.UUID}`, { size: '2GiB' }), 503, 14, 'Updating');
      await h.setState(v.UUID, 'Rollback');
      fails(await put(`/api/v2/volumes/${v.UUID}`, { size: '2GiB' }), 503, 14, 'Rollback');
      await h.setState(v.UUID, 'Failed');
      fails(await put(`/api/v2/volumes/${v.UUID}`, { size: '2GiB' }), 400, 3, 'Failed');
      await h.setState(v.UUID, 'Deleting');
      fails(await put(`/api/v2/volumes/${v.UUID}`, { size: '2GiB' }), 400, 3, 'Deleting');
      fails(await put(`/api/v2/projects/default/volumes/?name=${v.name}`, { size: '2GiB' }), 400, 3, 'Deleting by name');
      fails(await put(`/api/v2/volumes/${randomUUID()}`, { size: '2GiB' }), 404, 5, 'unknown');
    });

    test('If-Match: the current ETag passes, a stale one is 412 and changes nothing', async () => {
      const v = await createOk();
      await available(v.UUID);
      const etag = ok(await get(v.UUID)).ETag;
      ok(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'a', value: '1' }] }, { headers: { 'If-Match': etag } }));
      const next = ok(await get(v.UUID)).ETag;
      assert.notEqual(next, etag);
      const stale = await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'b', value: '2' }] }, { headers: { 'If-Match': etag } });
      fails(stale, 412, 9, 'stale');
      assert.equal(ok(await get(v.UUID)).ETag, next);
      ok(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'b', value: '2' }] }, { headers: { 'If-Match': `"${next}"` } }));
      const third = ok(await get(v.UUID)).ETag;
      // A weak or empty tag never matches (strong comparison, issue 17): 412, nothing written.
      fails(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'c', value: '3' }] }, { headers: { 'If-Match': `W/"${third}"` } }), 412, 9, 'weak');
      fails(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'c', value: '3' }] }, { headers: { 'If-Match': '""' } }), 412, 9, 'empty tag');
      assert.equal(ok(await get(v.UUID)).ETag, third);
      ok(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'c', value: '3' }] }, { headers: { 'If-Match': third } }));
      ok(await put(`/api/v2/volumes/${v.UUID}`, { labels: [{ key: 'd', value: '4' }] }, { headers: { 'If-Match': '*' } }));
      fails(await h.request('DELETE', `/api/v2/volumes/${v.UUID}`, { token: admin(), headers: { 'If-Match': etag } }), 412, 9, 'stale delete');
      assert.equal(ok(await get(v.UUID)).state, 'Available');
    });

    test('write access is required', async () => {
      const v = await createOk();
      await available(v.UUID);
      const body = { labels: [{ key: 'a', value: '1' }] };
      fails(await put(`/api/v2/volumes/${v.UUID}`, body, { token: h.tokens.defaultViewer }), 403, 7, 'viewer');
      fails(await put(`/api/v2/volumes/${v.UUID}`, body, { token: h.tokens.clusterViewer }), 403, 7, 'cluster viewer');
      fails(await put(`/api/v2/volumes/${v.UUID}`, body, { token: h.tokens.p2Admin }), 404, 5, 'other project: looks absent (issue 17)');
      fails(await h.request('PUT', `/api/v2/volumes/${v.UUID}`, { body }), 401, 16, 'no token');
      ok(await put(`/api/v2/volumes/${v.UUID}`, body, { token: h.tokens.defaultAdmin }));
    });
  });

  describe('delete', () => {
    test('Deleting at once, name free at once, GET shows Deleting until the record goes, then 404', async () => {
      const v = await createOk();
      await available(v.UUID);
      const res = ok(await h.request('DELETE', `/api/v2/volumes/${v.UUID}`, { token: admin() }));
      assert.deepEqual(res, {});
      const record = (await h.record(v.UUID))!;
      assert.equal(record.state, 'Deleting');
      assert.equal(record.generation, 2);
      assert.equal(await readText(h.etcd, keys.volumeName('default', v.name)), null, 'index removed in the same transaction');
      assert.equal(ok(await get(v.UUID)).state, 'Deleting');
      assert.equal(ok(await h.request('GET', `/api/v2/projects/default/volumes/?name=${v.name}`, { token: admin() })).UUID, v.UUID, 'by name too');
      assert.ok(h.recorder.events.some((e) => e.eventName === 'VolumeDeleteRequested' && e.component.kind === 'volume' && e.component.volumes[0]?.ID === v.UUID));

      const reborn = await createOk({ name: v.name });
      assert.notEqual(reborn.UUID, v.UUID);
      assert.equal(ok(await h.request('GET', `/api/v2/projects/default/volumes/?name=${v.name}`, { token: admin() })).UUID, reborn.UUID, 'the live one wins');

      fails(await h.request('DELETE', `/api/v2/volumes/${v.UUID}`, { token: admin() }), 400, 3, 'already Deleting');
      await deleteKey(h.etcd, keys.volume(v.UUID)); // the cluster manager finishes
      fails(await get(v.UUID), 404, 5, 'gone');
    });

    test('by name (…/volumes/?name=X), by UUID with a bare ?, project-scoped', async () => {
      const a = await createOk();
      const b = await createOk();
      const c = await createOk({}, 'p2');
      for (const v of [a, b, c]) await available(v.UUID);
      ok(await h.request('DELETE', `/api/v2/projects/default/volumes/?name=${a.name}`, { token: admin() }));
      ok(await h.request('DELETE', `/api/v2/volumes/${b.UUID}?`, { token: admin() }));
      fails(await h.request('DELETE', `/api/v2/projects/default/volumes/${c.UUID}`, { token: admin() }), 404, 5, 'other project');
      ok(await h.request('DELETE', `/api/v2/volumes/?name=${c.name}&projectName=p2`, { token: admin() }));
      for (const v of [a, b, c]) assert.equal((await h.record(v.UUID))!.state, 'Deleting');
      fails(await h.request('DELETE', `/api/v2/projects/default/volumes/?name=${a.name}`, { token: admin() }), 400, 3, 'Deleting by name');
      fails(await h.request('DELETE', '/api/v2/projects/default/volumes/?name=absent', { token: admin() }), 404, 5, 'absent');
      fails(await h.request('DELETE', '/api/v2/projects/default/volumes/', { token: admin() }), 400, 3, 'no name');
      fails(await h.request('DELETE', '/api/v2/volumes', { token: admin() }), 400, 3, 'no name, no slash');
    });

    test('state rules: Creating/Updating 503; a Failed volume can be deleted', async () => {
      const v = await createOk();
      fails(await h.request('DELETE', `/api/v2/volumes/${v.UUID}`, { token: admin() }), 503, 14, 'Creating');
      await h.setState(v.UUID, 'Updating');
      fails(await h.request('DELETE', `/api/v2/volumes/${v.UUID}`, { token: admin() }), 503, 14, 'Updating');
      await h.setState(v.UUID, 'Failed');
      ok(await h.request('DELETE', `/api/v2/volumes/${v.UUID}`, { token: admin() }));
      assert.equal((await h.record(v.UUID))!.state, 'Deleting');
      fails(await h.request('DELETE', `/api/v2/volumes/${v.UUID}`, { token: h.tokens.defaultViewer }), 403, 7, 'viewer');
    });
  });

  describe('rollback', () => {
    test('to one of the volume snapshots: state Rollback, size of the snapshot, generation + 1', async () => {
      const v = await createOk({ size: '4GiB' });
      await available(v.UUID);
      const snap = await h.putSnapshot({ name: unique('snap'), projectName: 'default', sourceVolumeUUID: v.UUID, sizeBytes: String(2 * GIB) });
      const res = ok(await put(`/api/v2/projects/default/volumes/${v.UUID}/rollback`, { srcSnapshotUUID: snap.UUID }));
      assert.deepEqual(res, {});
      const record = (await h.record(v.UUID))!;
      assert.equal(record.state, 'Rollback');
      assert.equal(record.rollbackSnapshotUUID, snap.UUID);
      assert.equal(record.sizeBytes, String(2 * GIB));
      assert.equal(record.generation, 2);
      assert.ok(h.recorder.events.some((e) => e.eventName === 'VolumeRollbackRequested' && e.component.kind === 'volume' && e.component.volumes[0]?.ID === v.UUID));
      fails(await put(`/api/v2/projects/default/volumes/${v.UUID}/rollback`, { srcSnapshotName: snap.name }), 503, 14, 'already rolling back');
      await available(v.UUID);
      ok(await put(`/api/v2/volumes/${v.UUID}/rollback`, { srcSnapshotName: snap.name }));
    });

    test('refuses foreign or unusable snapshots, bad bodies and unsettled volumes', async () => {
      const v = await createOk();
      const url = `/api/v2/projects/default/volumes/${v.UUID}/rollback`;
      const own = await h.putSnapshot({ name: unique('snap'), projectName: 'default', sourceVolumeUUID: v.UUID });
      fails(await put(url, { srcSnapshotUUID: own.UUID }), 503, 14, 'volume Creating');
      await available(v.UUID);
      const foreign = await h.putSnapshot({ name: unique('snap'), projectName: 'default' });
      fails(await put(url, { srcSnapshotUUID: foreign.UUID }), 400, 3, 'snapshot of another volume');
      const creating = await h.putSnapshot({ name: unique('snap'), projectName: 'default', sourceVolumeUUID: v.UUID, state: 'Creating' });
      fails(await put(url, { srcSnapshotUUID: creating.UUID }), 503, 14, 'snapshot Creating');
      const failed = await h.putSnapshot({ name: unique('snap'), projectName: 'default', sourceVolumeUUID: v.UUID, state: 'Failed' });
      fails(await put(url, { srcSnapshotUUID: failed.UUID }), 400, 3, 'snapshot Failed');
      fails(await put(url, { srcSnapshotName: 'absent' }), 404, 5, 'absent snapshot');
      fails(await put(url, {}), 400, 3, 'no snapshot');
      fails(await put(url, { srcSnapshotUUID: own.UUID, srcSnapshotName: own.name }), 400, 3, 'both');
      fails(await put(url, { srcSnapshotUUID: own.UUID }, { token: h.tokens.defaultViewer }), 403, 7, 'viewer');
      fails(await put(`/api/v2/projects/p2/volumes/${v.UUID}/rollback`, { srcSnapshotUUID: own.UUID }), 404, 5, 'other project');
      await h.setState(v.UUID, 'Failed');
      fails(await put(url, { srcSnapshotUUID: own.UUID }), 400, 3, 'volume Failed');
      assert.equal((await h.record(v.UUID))!.generation, 1, 'nothing changed');
    });
  });

  describe('what the data path reports', () => {
    test('protection, statistics, connected hosts and missing node access', async () => {
      const server = await joinServer(h.etcd, { nodes: [{}, {}, {}] });
      const [n1, n2, n3] = server.nodes.map((node) => node.UUID) as [string, string, string];
      const v = await createOk({ replicaCount: 3, acl: { values: [HOST_A, HOST_B] } });
      await h.place(v.UUID, { nodeList: [n1, n2, n3], primaryNodeUUID: n2, nsid: 17, state: 'Creating' });
      let got = ok(await get(v.UUID));
      assert.equal(got.protectionState, 'Unknown', 'Creating');
      assert.deepEqual(got.nodeList, [n1, n2, n3]);
      assert.equal(got.nsid, 17);
      assert.equal(got.primaryNodeUUID, n2);

      await h.setState(v.UUID, 'Available');
      got = ok(await get(v.UUID));
      assert.equal(got.protectionState, 'NotAvailable', 'nothing reported yet');
      assert.equal(got.rebuildProgress, '0');

      await h.report(v.UUID, n1, { physicalUsedBytes: '100', logicalUsedBytes: '300', connectedHosts: [{ hostNQN: HOST_A, address: '10.0.0.9' }] });
      await h.report(v.UUID, n2, {
        physicalUsedBytes: '9007199254740993', logicalUsedBytes: '18014398509481986',
        connectedHosts: [{ hostNQN: HOST_A, address: '10.0.0.9' }, { hostNQN: HOST_B, address: '10.0.0.10' }],
      });
      await h.report(v.UUID, n3, { physicalUsedBytes: '200', connectedHosts: [{ hostNQN: HOST_B, address: '10.0.0.10' }] });
      await h.report(v.UUID, randomUUID(), { physicalUsedBytes: '5', connectedHosts: [{ hostNQN: 'nqn.2014-08.org.stale:x', address: '' }] });
      got = ok(await get(v.UUID));
      assert.equal(got.protectionState, 'FullyProtected');
      assert.equal(got.rebuildProgress, '100');
      assert.deepEqual(got.connectedHosts, [HOST_A, HOST_B].sort(), 'deduplicated; nodes outside nodeList ignored');
      assert.deepEqual(got.missingNodesAccess, [n1, n3], 'HOST_A has no path via n3, HOST_B none via n1');
      assert.equal(got.statistics.logicalUsedStorage, '18014398509481986', 'the primary report, exact past 2^53');
      assert.equal(got.statistics.physicalUsedStorage, '9007199254740993');
      assert.equal(got.statistics.compressionRatio, 2);
      assert.equal(got.statistics.physicalCapacity, '9007199254741293', 'every replica');

      await h.report(v.UUID, n3, { state: 'Failed', error: 'pool full' });
      assert.equal(ok(await get(v.UUID)).protectionState, 'Degraded');
      await h.report(v.UUID, n3, {});
      await deleteKey(h.etcd, keys.presence(server.server.UUID));
      got = ok(await get(v.UUID));
      assert.equal(got.protectionState, 'NotAvailable', 'no agent alive');
      const listed = ok(await h.request('GET', `/api/v2/volumes?UUID=${v.UUID}`, { token: admin() })).volumes;
      assert.deepEqual(listed, [got], 'the list maps the same way');
    });

    test('connection info: subsystem, every path, discovery endpoints, device link; read access', async () => {
      const server = await joinServer(h.etcd, {
        server: { endpoints: ['192.0.2.7'] },
        nodes: [{ nvmeEndpoint: '', discoveryEndpoint: '192.0.2.7:8009' }, { nvmeEndpoint: '', discoveryEndpoint: '' }],
      });
      const [n1, n2] = server.nodes.map((node) => node.UUID) as [string, string];
      const v = await createOk({ replicaCount: 2, acl: { values: [HOST_A] } }, 'p2');
      const url = `/api/v2/projects/p2/volumes/${v.UUID}/connection`;
      let got = ok(await h.request('GET', url, { token: admin() }));
      assert.deepEqual([got.state, got.paths, got.nsid], ['Creating', [], 0], 'nothing to connect to before placement');
      assert.equal(got.subsystemNQN, `${h.api.cluster.subsystemNQN}:vol:${v.UUID}`);
      assert.equal(got.devicePath, `/dev/disk/by-id/nvme-uuid.${v.UUID}`);

      await h.place(v.UUID, { nodeList: [n1, n2], primaryNodeUUID: n2, nsid: 9 });
      await h.report(v.UUID, n2, {});
      got = ok(await h.request('GET', url, { token: h.tokens.p2Admin }));
      assert.deepEqual(got.paths, [
        { nodeUUID: n1, address: '192.0.2.7', port: 4420, primary: false, served: false },
        { nodeUUID: n2, address: '192.0.2.7', port: 4420, primary: true, served: true },
      ]);
      assert.deepEqual(got.discoveryEndpoints, ['192.0.2.7:8009']);
      assert.deepEqual(got.acl, [HOST_A]);
      assert.equal(got.commands.connect[0], `nvme connect -t tcp -a 192.0.2.7 -s 4420 -n ${got.subsystemNQN} -q <host NQN: cat /etc/nvme/hostnqn>`);
      assert.match(got.commands.connectAll[0], /^nvme connect-all -t tcp -a 192\.0\.2\.7 -s 8009 -q .* --persistent$/);
      // A host that connects to the cluster subsystemNQN for I/O is told it is refused, why, and what to run.
      assert.deepEqual(Object.keys(got.clusterSubsystem).sort(), ['directConnect', 'instead', 'reason', 'subsystemNQN']);
      assert.equal(got.clusterSubsystem.subsystemNQN, h.api.cluster.subsystemNQN);
      assert.equal(got.clusterSubsystem.directConnect, 'refused');
      assert.match(got.clusterSubsystem.reason, /no per-host namespace masking/);
      assert.match(got.clusterSubsystem.reason, /nothing listens on port 4420/);
      assert.deepEqual(got.clusterSubsystem.instead, got.commands.connectAll);
      assert.deepEqual(ok(await h.request('GET', `/api/v2/volumes/${v.UUID}/connection`, { token: admin() })), got, 'unscoped route');
      fails(await h.request('GET', url, { token: h.tokens.defaultAdmin }), 403, 7, 'another project');
      fails(await h.request('GET', `/api/v2/projects/p2/volumes/${randomUUID()}/connection`, { token: admin() }), 404, 5, 'unknown volume');
      fails(await h.request('GET', `/api/v2/projects/p2/volumes/not-a-uuid/connection`, { token: admin() }), 400, 3, 'bad UUID');
    });

    test('status reports stay with their volume on sparse pages (one project among many) and dense ones', async () => {
      await h.putProject('psparse');
      const server = await joinServer(h.etcd, { nodes: [{}, {}] });
      const nodes = server.nodes.map((node) => node.UUID);
      const placed: { UUID: string; project: string; used: string }[] = [];
      for (let i = 0; i < 30; i++) {
        const project = i % 6 === 0 ? 'psparse' : 'p2';
        const v = await createOk({ replicaCount: 2 }, project);
        await h.place(v.UUID, { nodeList: nodes });
        for (const node of nodes) await h.report(v.UUID, node, { logicalUsedBytes: String(1000 + i), physicalUsedBytes: String(1000 + i) });
        placed.push({ UUID: v.UUID, project, used: String(1000 + i) });
      }
      for (const project of ['psparse', 'p2']) {
        const listed = ok(await h.request('GET', `/api/v2/projects/${project}/volumes?showAll=true`, { token: admin() })).volumes;
        for (const p of placed.filter((x) => x.project === project)) {
          const v = listed.find((x: any) => x.UUID === p.UUID);
          assert.equal(v.statistics.logicalUsedStorage, p.used, project);
          assert.equal(v.statistics.physicalCapacity, String(2 * Number(p.used)), project);
        }
      }
      const uuids = placed.map((p) => p.UUID);
      await h.sync();
      const statuses = await h.store.statusesOf(uuids);
      for (const uuid of uuids) {
        assert.deepEqual(statuses.get(uuid)!.map((s) => s.nodeUUID).sort(), [...nodes].sort());
      }
    });
  });

  test('usage counts for projects, policies and snapshots', async () => {
    await h.putProject('pusage');
    const policy = await h.putPolicy({ name: unique('usage') });
    const snap = await h.putSnapshot({ name: unique('snap'), projectName: 'pusage' });
    const usage = new VolumeUsageCounter(h.store, h.sync);
    assert.equal(await usage.countInProject('pusage'), 0);
    const a = await createOk({ qosPolicyUUID: policy.UUID }, 'pusage');
    await createOk({ sourceSnapshotUUID: snap.UUID, qosPolicyName: policy.name }, 'pusage');
    assert.equal(await usage.countInProject('pusage'), 2);
    assert.equal(await usage.countUsingPolicy(policy.UUID), 2);
    assert.equal(await usage.countClonedFrom(snap.UUID), 1);
    await h.setState(a.UUID, 'Available');
    ok(await h.request('DELETE', `/api/v2/volumes/${a.UUID}`, { token: admin() }));
    assert.equal(await usage.countInProject('pusage'), 1, 'a Deleting volume no longer counts (docs/volumes.md)');
    assert.equal(await usage.countUsingPolicy(policy.UUID), 1);
    await deleteKey(h.etcd, keys.volume(a.UUID));
    assert.equal(await usage.countInProject('pusage'), 1);
    assert.equal(await usage.countUsingPolicy(policy.UUID), 1);
  });

  test('a snapshot or policy that changed after it was checked refuses the write', async () => {
    // Directories that answer from a moment ago: the snapshot was Available, the policy existed.
    const snap = await h.putSnapshot({ name: unique('snap'), projectName: 'default', state: 'Deleting' });
    const stale: SnapshotDirectory = {
      resolve: async (project, ref) => ({ ...(await new EtcdSnapshotDirectory(new SnapshotStore(h.etcd)).resolve(project, ref)), state: 'Available' }),
      countOfVolume: async () => 0,
    };
    const ghost = randomUUID();
    await h.sync();
    const policies = new WatchedPolicyDirectory(h.api.cache);
    const service = new VolumeService({
      store: h.store, projects: new WatchedProjectDirectory(h.api.cache), snapshots: stale, flags: new FeatureFlagsService(new FeatureFlagsStore(h.etcd), h.recorder), replicaLimits: h.limits,
      events: h.recorder, clusterUUID: h.api.cluster.UUID, clusterSubsystemNQN: h.api.cluster.subsystemNQN,
      policies: { resolve: async () => ({ UUID: ghost, name: 'ghost' }), nameOf: (uuid) => policies.nameOf(uuid) },
    });
    const body = { name: unique(), size: '1GiB' };
    await assert.rejects(service.create(parseCreateVolume({ ...body, sourceSnapshotUUID: snap.UUID })), (err: any) => err.code === 'INVALID_STATE');
    await assert.rejects(service.create(parseCreateVolume({ ...body, qosPolicyName: 'ghost' })), (err: any) => err.code === 'NOT_FOUND');
    const v = await createOk();
    await available(v.UUID);
    const allow = () => undefined;
    await assert.rejects(service.update({ UUID: v.UUID }, parseUpdateVolume({ qosPolicyName: 'ghost' }), allow), (err: any) => err.code === 'NOT_FOUND');
    const own = await h.putSnapshot({ name: unique('snap'), projectName: 'default', sourceVolumeUUID: v.UUID, state: 'Failed' });
    await assert.rejects(service.rollback({ UUID: v.UUID }, { UUID: own.UUID }, allow), (err: any) => err.code === 'INVALID_STATE');
    assert.equal((await h.record(v.UUID))!.generation, 1, 'nothing written');
    await h.sync();
    assert.equal((await h.store.scan((x) => x.name === body.name)).length, 0);
  });
});

describeForEveryBackend('volumes API while nodes come and go (replica limit from the presence keys)', (backend) => {
  let h: VolumesHarness;

  before(async () => {
    h = await startVolumesHarness({ replicaLimits: (cache) => new PresenceReplicaLimits(cache, 3), backend });
  });
  after(async () => {
    await h?.close();
  });

  test('no Active node: 503 with the JSON error body and Retry-After, then 200 once a node is back; too few nodes stays a 400', async () => {
    const name = unique();
    const body = { name, size: '1GiB', projectName: 'default' };
    // No agent has joined yet: no server has an Active node.
    for (const path of ['/api/v2/projects/default/volumes', '/api/v2/volumes']) {
      const res = await h.request('POST', path, { token: h.tokens.admin, body });
      fails(res, 503, 14, `POST ${path} with no Active node`);
      assert.match(res.body.error, /no node is Active/);
      const retryAfter = res.headers.get('retry-after');
      assert.ok(retryAfter !== null && Number.isInteger(Number(retryAfter)) && Number(retryAfter) > 0, `Retry-After ${retryAfter}`);
    }
    fails(await h.request('GET', `/api/v2/projects/default/volumes/?name=${name}`, { token: h.tokens.admin }), 404, 5, 'a refused create leaves no volume');

    // One server joins: one replica fits, two are a bad request (400, not worth retrying).
    const { server } = await joinServer(h.etcd);
    const tooMany = await h.create({ name: unique(), size: '1GiB', replicaCount: 2 });
    fails(tooMany, 400, 3, 'replicaCount above the current maximum');
    assert.match(tooMany.body.error, /maximum of 1/);
    assert.equal(tooMany.headers.get('retry-after'), null);
    assert.equal(ok(await h.create(body)).state, 'Creating');

    // Its agent's lease lapses: 503 again; it registers again: creates go through.
    await markAbsent(h.etcd, server.UUID);
    fails(await h.create({ name: unique(), size: '1GiB' }), 503, 14, 'lease lapsed');
    await markPresent(h.etcd, server.UUID, server.nodeUUIDs);
    assert.equal(ok(await h.create({ name: unique(), size: '1GiB' })).state, 'Creating');
  });
});

describeForEveryBackend('volumes API: a QoS policy needs ublk on the volume\'s nodes (issue 18)', (backend) => {
  let h: VolumesHarness;

  before(async () => {
    h = await startVolumesHarness({ kernelCapabilities: true, backend });
  });
  after(async () => {
    await h?.close();
  });

  test('attaching a policy where a node has no ublk is a 400 naming the node and why; nothing is written', async () => {
    const NONE = NO_KERNEL_CAPABILITIES;
    const trixie = await joinServer(h.etcd, { nodes: [{ name: 'trixie-node' }] });
    const bookworm = await joinServer(h.etcd, { nodes: [{ name: 'bookworm-node' }] });
    const [newNode, oldNode] = [trixie.nodes[0]!.UUID, bookworm.nodes[0]!.UUID];
    await reportInventory(h.etcd, trixie.server.UUID, { facts: { kernel: '6.12.117+deb13-amd64', kernelCapabilities: { ...NONE, ublk: true } } });
    await reportInventory(h.etcd, bookworm.server.UUID, { facts: { kernel: '6.1.0-56-amd64', kernelCapabilities: NONE } });
    const gold = await h.putPolicy({ name: unique('gold') });
    const volumeKeys = async () => (await keysUnder(h.etcd, keys.volumesPrefix())).length;
    const refusedFor = (res: HttpResult, what: string) => {
      fails(res, 400, 3, what);
      assert.match(res.body.error, new RegExp(`attach QoS policy ${gold.name} .*bookworm-node \\(${oldNode}, kernel 6\\.1\\.0-56-amd64\\) lacks userspace block devices \\(ublk`), what);
      assert.match(res.body.error, /Debian 12's 6\.1 kernel has no ublk/, what);
      assert.doesNotMatch(res.body.error, /trixie-node/, what);
      assert.deepEqual(res.body.details, [{ capability: 'ublk', nodes: [oldNode] }], what);
    };

    // Create: not placed yet, so any node may serve it.
    const before = await volumeKeys();
    refusedFor(await h.create({ name: unique(), size: '1GiB', qosPolicyName: gold.name }), 'create with a policy');
    assert.equal(await volumeKeys(), before, 'a refused create writes nothing');

    // Update: the volume's own nodes decide.
    const onOld = ok(await h.create({ name: unique(), size: '1GiB' }), 'without a policy');
    await h.place(onOld.UUID, { nodeList: [oldNode] });
    const stored = await h.record(onOld.UUID);
    refusedFor(await h.request('PUT', `/api/v2/volumes/${onOld.UUID}`, { token: h.tokens.admin, body: { qosPolicyUUID: gold.UUID } }), 'update on a 6.1 node');
    assert.deepEqual(await h.record(onOld.UUID), stored, 'a refused update writes nothing');
    const replicated = ok(await h.create({ name: unique(), size: '1GiB', replicaCount: 2 }));
    await h.place(replicated.UUID, { nodeList: [newNode, oldNode] });
    refusedFor(await h.request('PUT', `/api/v2/volumes/${replicated.UUID}`, { token: h.tokens.admin, body: { qosPolicyName: gold.name } }), 'a replica on a 6.1 node');

    const onNew = ok(await h.create({ name: unique(), size: '1GiB' }));
    await h.place(onNew.UUID, { nodeList: [newNode] });
    ok(await h.request('PUT', `/api/v2/volumes/${onNew.UUID}`, { token: h.tokens.admin, body: { qosPolicyUUID: gold.UUID } }), 'on a node with ublk');
    assert.equal((await h.record(onNew.UUID))!.qosPolicyUUID, gold.UUID);

    // The old server boots a kernel with ublk: creates with a policy go through.
    await reportInventory(h.etcd, bookworm.server.UUID, { facts: { kernel: '6.12.117+deb13-amd64', kernelCapabilities: { ...NONE, ublk: true } } });
    assert.equal(ok(await h.create({ name: unique(), size: '1GiB', qosPolicyName: gold.name })).qosPolicyUUID, gold.UUID);
  });
});
