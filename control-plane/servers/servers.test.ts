// GET /api/v2/servers[/{UUID}] against a real etcd, a bootstrapped cluster and real tokens.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import {
  controlPlaneRecord,
  fieldsOf,
  joinServer,
  markAbsent,
  markPresent,
  putRecord,
  reportInventory,
  startApiHarness,
  type ApiHarness,
  type JoinedServer,
} from '../../test/helpers/records.js';
import { InventoryReader } from '../inventory/inventory-reader.js';
import { createServersRoutes } from './servers-routes.js';
import { EtcdMembers } from '../../lib/etcd/members.js';
import { ServersService } from './servers-service.js';
import { WatchedReplicationRisk } from './replication-risk.js';
import type { ReplicaSetRecord } from '../../lib/records.js';
import { putVolume, volumeRecord } from '../../test/kits/snapshot-test-fixtures.js';

const SERVER_FIELDS = [
  'UUID', 'name', 'RiskOfServiceLossState', 'NodesUUIDs', 'state', 'ServerEndpoints', 'ETag', 'ProductVersion',
  'UpgradeStatus', 'ApiEndpoints', 'LastUpgrade', 'IsWitness', 'LastEviction', 'health',
  'ServerPermanenetFailureTimeout', 'tpm2IsSupported', 'etcdMemberInfo',
].sort();

describe('servers API', () => {
  let api: ApiHarness;
  let healthy: JoinedServer;
  let partial: JoinedServer;
  let down: JoinedServer;

  before(async () => {
    api = await startApiHarness((etcd, auth, cache) => [
      createServersRoutes({ auth, servers: new ServersService(new InventoryReader(cache), new EtcdMembers(etcd, { cacheMs: 0 }), new WatchedReplicationRisk(cache)) }),
    ]);
    healthy = await joinServer(api.etcd, { server: { name: 'alpha', hostname: 'host-a', endpoints: ['10.0.0.1:7443'] }, nodes: [{}, {}] });
    partial = await joinServer(api.etcd, { server: { name: 'beta', hostname: 'host-b' }, nodes: [{}, {}] });
    await markPresent(api.etcd, partial.server.UUID, [partial.server.nodeUUIDs[0] as string]);
    down = await joinServer(api.etcd, { server: { name: 'gamma', hostname: 'host-c' }, present: false });
    await reportInventory(api.etcd, healthy.server.UUID, { facts: { productVersion: '0.1.0', tpm2IsSupported: true } });
    await reportInventory(api.etcd, partial.server.UUID, { facts: { productVersion: '0.0.9' } });
    await putRecord(api.etcd, keys.controlPlane('cp-a'), controlPlaneRecord({ instanceId: 'cp-a', hostname: 'HOST-A', apiEndpoint: '10.0.0.1:443' }));
    await putRecord(api.etcd, keys.controlPlane('cp-x'), controlPlaneRecord({ instanceId: 'cp-x', hostname: 'elsewhere', apiEndpoint: '10.0.0.9:443' }));
  });
  after(async () => {
    await api?.close();
  });

  test('lists every server with exactly the 17 fields of spec 2.16, typed for the wire', async () => {
    const res = await api.get('/api/v2/servers', api.adminToken);
    assert.equal(res.status, 200);
    assert.match(res.contentType ?? '', /application\/json/);
    assert.deepEqual(Object.keys(res.body), ['servers']);
    assert.equal(res.body.servers.length, 3);
    for (const s of res.body.servers) {
      assert.deepEqual(fieldsOf(s), SERVER_FIELDS);
      assert.equal(typeof s.UUID, 'string');
      assert.equal(typeof s.name, 'string');
      assert.ok(Array.isArray(s.NodesUUIDs));
      assert.equal(s.state, 'Enabled');
      assert.ok(Array.isArray(s.ServerEndpoints));
      assert.match(s.ETag, /^\d+$/);
      assert.equal(typeof s.ProductVersion, 'string');
      assert.equal(s.UpgradeStatus, 'None');
      assert.ok(Array.isArray(s.ApiEndpoints));
      assert.deepEqual(s.LastUpgrade, { Status: 'None', StartTime: null, EndTime: null, TargetVersion: '', ErrorMessage: '', ProgressStep: 0, ProgressTotal: 0 });
      assert.equal(s.IsWitness, false);
      assert.deepEqual(s.LastEviction, { status: 'None', startTime: null, endTime: null, errorMessage: '', progress: 0 });
      assert.equal(s.ServerPermanenetFailureTimeout, null);
      assert.equal(typeof s.tpm2IsSupported, 'boolean');
      assert.deepEqual(s.etcdMemberInfo, { state: 'Unknown', role: 'UnknownRole' }, 'no etcd member has its address: not measured');
    }
  });
  test('maps record, facts, presence and control planes', async () => {
    const byName = new Map((await api.get('/api/v2/servers', api.adminToken)).body.servers.map((s: any) => [s.name, s]));
    const a: any = byName.get('alpha');
    assert.equal(a.UUID, healthy.server.UUID);
    assert.deepEqual(a.NodesUUIDs, healthy.server.nodeUUIDs);
    assert.deepEqual(a.ServerEndpoints, ['10.0.0.1:7443']);
    assert.equal(a.ProductVersion, '0.1.0');
    assert.equal(a.tpm2IsSupported, true);
    assert.deepEqual(a.ApiEndpoints, ['10.0.0.1:443'], 'control planes on the same host (case-insensitive)');
    assert.equal(a.health, 'OK');
    assert.equal(a.RiskOfServiceLossState, 'NoRiskOfServiceLoss');

    const b: any = byName.get('beta');
    assert.equal(b.health, 'Warning');
    assert.equal(b.RiskOfServiceLossState, 'InRiskOfServiceLoss');
    assert.equal(b.ProductVersion, '0.0.9');
    assert.equal(b.tpm2IsSupported, false);
    assert.deepEqual(b.ApiEndpoints, []);

    const c: any = byName.get('gamma');
    assert.equal(c.health, 'Error');
    assert.equal(c.RiskOfServiceLossState, 'InRiskOfServiceLoss');
    assert.equal(c.ProductVersion, '', 'no facts reported yet');
  });

  test('GET by UUID returns the same object as the list; ETag is the record revision', async () => {
    const list = (await api.get('/api/v2/servers', api.adminToken)).body.servers;
    const res = await api.get(`/api/v2/servers/${healthy.server.UUID}`, api.adminToken);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, list.find((s: any) => s.UUID === healthy.server.UUID));
    const kv = (await api.etcd.get(keys.server(healthy.server.UUID)).exec()).kvs[0];
    assert.equal(res.body.ETag, kv?.mod_revision);

    await putRecord(api.etcd, keys.server(healthy.server.UUID), { ...healthy.server, endpoints: ['10.0.0.1:7443'] });
    const again = await api.get(`/api/v2/servers/${healthy.server.UUID}`, api.adminToken);
    assert.notEqual(again.body.ETag, res.body.ETag, 'a rewrite changes the ETag');
  });

  test('filters: UUID, Name, RiskOfServiceLoss (name or number); unknown and wrong-case names are ignored', async () => {
    const names = async (query: string) => {
      const res = await api.get(`/api/v2/servers${query}`, api.adminToken);
      assert.equal(res.status, 200, query);
      return res.body.servers.map((s: any) => s.name).sort();
    };
    assert.deepEqual(await names(`?UUID=${partial.server.UUID}`), ['beta']);
    assert.deepEqual(await names('?Name=gamma'), ['gamma']);
    assert.deepEqual(await names('?Name=nope'), []);
    assert.deepEqual(await names('?RiskOfServiceLoss=InRiskOfServiceLoss'), ['beta', 'gamma']);
    assert.deepEqual(await names('?RiskOfServiceLoss=1'), ['alpha']);
    assert.deepEqual(await names('?RiskOfServiceLoss=NoRiskOfServiceLoss&Name=beta'), []);
    assert.deepEqual(await names('?name=gamma&uuid=x&whatever=1'), ['alpha', 'beta', 'gamma']);
    assert.deepEqual(await names('?Name='), ['alpha', 'beta', 'gamma'], 'empty value = not given');
  });

  test('an invalid RiskOfServiceLoss is a 400 with the JSON error body', async () => {
    for (const value of ['Risky', '9']) {
      const res = await api.get(`/api/v2/servers?RiskOfServiceLoss=${value}`, api.adminToken);
      assert.equal(res.status, 400);
      assert.equal(res.body.code, 3);
      assert.equal(res.body.error, res.body.message);
      assert.match(res.body.message, /RiskOfServiceLoss/);
    }
  });

  test('unknown UUID is a 404 with the JSON error body', async () => {
    const res = await api.get('/api/v2/servers/00000000-0000-0000-0000-000000000000', api.adminToken);
    assert.equal(res.status, 404);
    assert.deepEqual(fieldsOf(res.body), ['code', 'error', 'message']);
    assert.equal(res.body.code, 5);
  });

  test('401 without a token, 403 for a project viewer, 200 for a cluster viewer', async () => {
    for (const path of ['/api/v2/servers', `/api/v2/servers/${healthy.server.UUID}`]) {
      const anonymous = await api.get(path);
      assert.equal(anonymous.status, 401, path);
      assert.equal(anonymous.body.code, 16);
      const viewer = await api.get(path, api.projectViewerToken);
      assert.equal(viewer.status, 403, path);
      assert.equal(viewer.body.code, 7);
      assert.equal((await api.get(path, api.clusterViewerToken)).status, 200, path);
    }
  });

  test('health follows presence: the agent going away turns OK into Error', async () => {
    await markAbsent(api.etcd, healthy.server.UUID);
    let s = (await api.get(`/api/v2/servers/${healthy.server.UUID}`, api.adminToken)).body;
    assert.equal(s.health, 'Error');
    assert.equal(s.RiskOfServiceLossState, 'InRiskOfServiceLoss');
    await markPresent(api.etcd, healthy.server.UUID, healthy.server.nodeUUIDs);
    s = (await api.get(`/api/v2/servers/${healthy.server.UUID}`, api.adminToken)).body;
    assert.equal(s.health, 'OK');
    assert.equal(s.RiskOfServiceLossState, 'NoRiskOfServiceLoss');
  });

  test('RiskOfServiceLoss follows replicated volumes: the last live in-sync copy is at risk, the server whose loss caused it is the source', async () => {
    const one = await joinServer(api.etcd, { server: { name: 'risk-1' } });
    const two = await joinServer(api.etcd, { server: { name: 'risk-2' } });
    const [n1, n2] = [one.nodes[0]!.UUID, two.nodes[0]!.UUID];
    const risk = async (s: JoinedServer) => (await api.get(`/api/v2/servers/${s.server.UUID}`, api.adminToken)).body.RiskOfServiceLossState;
    const volume = volumeRecord({ replicaCount: 2, state: 'Available', placement: { nodeList: [n1, n2], primaryNodeUUID: n1, nsid: 1, port: 20001 } });
    await putVolume(api.etcd, volume);
    const set: ReplicaSetRecord = { volumeUUID: volume.UUID, epoch: 1, primaryNodeUUID: n1, inSync: [n1, n2], reason: '', announced: 'Unknown', updatedAt: '' };
    await putRecord(api.etcd, keys.replicaSet(volume.UUID), set);
    assert.deepEqual([await risk(one), await risk(two)], ['NoRiskOfServiceLoss', 'NoRiskOfServiceLoss'], 'two live in-sync copies');
    await markAbsent(api.etcd, two.server.UUID);
    assert.deepEqual([await risk(one), await risk(two)], ['InRiskOfServiceLoss', 'SourceOfRiskOfServiceLoss'], 'one live copy left');
    await markPresent(api.etcd, two.server.UUID, two.server.nodeUUIDs);
    await putRecord(api.etcd, keys.replicaSet(volume.UUID), { ...set, inSync: [n1] });
    assert.deepEqual([await risk(one), await risk(two)], ['InRiskOfServiceLoss', 'NoRiskOfServiceLoss'], 'the other copy is alive but out of sync');
    await putRecord(api.etcd, keys.replicaSet(volume.UUID), set);
    assert.deepEqual([await risk(one), await risk(two)], ['NoRiskOfServiceLoss', 'NoRiskOfServiceLoss'], 'resynced');
  });

  test("etcdMemberInfo is measured from etcd's member list, leader and each member's /health", async () => {
    // The test's etcd is one member on 127.0.0.1: the server at that address runs it.
    const local = await joinServer(api.etcd, { server: { name: 'etcd-host', endpoints: ['127.0.0.1'] } });
    const learnerHost = await joinServer(api.etcd, { server: { name: 'learner-host', endpoints: ['127.0.0.2'] } });
    const member = async (s: JoinedServer) => (await api.get(`/api/v2/servers/${s.server.UUID}`, api.adminToken)).body.etcdMemberInfo;
    assert.deepEqual(await member(local), { state: 'Healthy', role: 'Leader' });
    assert.deepEqual(await member(learnerHost), { state: 'Unknown', role: 'UnknownRole' }, 'no member there yet');

    // A learner added but never started (it does not count for quorum): Learner, and Unhealthy.
    const added = await api.etcd.cluster.memberAdd({ peerURLs: ['http://127.0.0.2:2380'], isLearner: true });
    try {
      assert.deepEqual(await member(learnerHost), { state: 'Unhealthy', role: 'Learner' });
      assert.deepEqual(await member(local), { state: 'Healthy', role: 'Leader' });
    } finally {
      await api.etcd.cluster.memberRemove({ ID: added.member.ID });
    }
    assert.deepEqual(await member(learnerHost), { state: 'Unknown', role: 'UnknownRole' });

    // Two servers at the member's address (one host running several): which runs it is not known.
    const twin = await joinServer(api.etcd, { server: { name: 'twin-host', endpoints: ['127.0.0.1'] } });
    assert.deepEqual(await member(local), { state: 'Unknown', role: 'UnknownRole' });
    assert.deepEqual(await member(twin), { state: 'Unknown', role: 'UnknownRole' });
  });
});
