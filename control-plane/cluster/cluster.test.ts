// GET /api/v2/cluster and /api/v2/clusterinfo against a real etcd, a bootstrapped cluster and
// real tokens; the semantic-version order behind MinVersionInCluster.
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
import { createClusterRoutes } from './cluster-routes.js';
import { ClusterService } from './cluster-service.js';
import { compareVersions, minVersion } from './semver.js';
import { WatchedVolumeHealth, clusterHealthState, countVolumeHealth, healthOfVolume } from './volume-health.js';
import { putVolume, statusRecord, volumeRecord } from '../../test/kits/snapshot-test-fixtures.js';
import type { ReplicaSetRecord, VolumeRecord } from '../../lib/records.js';

const CLUSTER_FIELDS = [
  'UUID', 'subsystemNQN', 'currentMaxReplicas', 'supportedMaxReplicas', 'statistics', 'ETag', 'health',
  'MinVersionInCluster', 'MinAllowedVersion', 'MaxAllowedVersion', 'apiEndpoints', 'discoveryEndpoints', 'clusterName',
  'lastUpgrade', 'inBandAuthMode', 'encryptionStatus', 'federatedAuthenticationStatus',
].sort();
const CLUSTER_INFO_FIELDS = [
  'UUID', 'subsystemNQN', 'currentMaxReplicas', 'supportedMaxReplicas', 'ETag', 'apiEndpoints', 'discoveryEndpoints',
  'nvmeEndpoints', 'clusterName', 'lastUpgrade', 'encryptionStatus', 'inBandAuthMode',
].sort();
const BYTE_STATISTICS = [
  'installedPhysicalStorage', 'managedPhysicalStorage', 'effectivePhysicalStorage', 'logicalStorage', 'logicalUsedStorage',
  'physicalUsedStorage', 'physicalUsedStorageIncludingParity', 'freePhysicalStorage', 'estimatedFreeLogicalStorage',
  'estimatedLogicalStorage',
];
const HEALTH_COUNTS = ['numDegradedVolumes', 'numReadOnlyVolumes', 'numNotAvailableVolumes', 'numInactiveNodes', 'numHealthyVolumes'];
const NO_UPGRADE = { Status: 'None', StartTime: null, EndTime: null, TargetVersion: '', ErrorMessage: '', ProgressStep: 0, ProgressTotal: 0 };
const NO_ENCRYPTION = { encryptionState: 'Disabled', kekGeneration: '0', kekUpdateDate: null, previousKekGenerations: [], rotationState: 'NoRotation' };

describe('semantic version order', () => {
  test('orders by numbers, not text, with pre-releases before their release', () => {
    const sorted = ['1.0.0', '0.10.0', '0.9.1', '0.9.1-rc.1', '0.9.1-rc.10', '0.9.1-rc.2', '0.9.1-alpha', 'v0.2', '0.9.1+build.5'];
    sorted.sort(compareVersions);
    assert.deepEqual(sorted, ['v0.2', '0.9.1-alpha', '0.9.1-rc.1', '0.9.1-rc.2', '0.9.1-rc.10', '0.9.1', '0.9.1+build.5', '0.10.0', '1.0.0']);
    assert.equal(compareVersions('1.2.3', '1.2.3+abc'), 0);
    assert.equal(compareVersions('1.0.0-1', '1.0.0-a'), -1, 'numeric identifiers first');
    assert.equal(compareVersions('1.0.0-a', '1.0.0-a.1'), -1, 'shorter pre-release first');
    assert.equal(compareVersions('garbage', '0.0.1'), 1, 'non-versions order last');
    assert.equal(minVersion(['0.10.0', '', '0.9.0', 'weird']), '0.9.0');
    assert.equal(minVersion([]), '');
  });
});

describe('cluster API', () => {
  let api: ApiHarness;
  const servers: JoinedServer[] = [];

  before(async () => {
    api = await startApiHarness((etcd, auth, cache) => [
      createClusterRoutes({ auth, cluster: new ClusterService(new InventoryReader(cache), new WatchedVolumeHealth(cache), { productVersion: '0.10.0' }) }),
    ]);
  });
  after(async () => {
    await api?.close();
  });

  const getCluster = async () => {
    const res = await api.get('/api/v2/cluster', api.adminToken);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body;
  };
  const getInfo = async (token = api.adminToken) => {
    const res = await api.get('/api/v2/clusterinfo', token);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body;
  };

  test('a fresh cluster: exactly the 17 fields of spec 2.7, typed for the wire', async () => {
    const c = await getCluster();
    assert.deepEqual(fieldsOf(c), CLUSTER_FIELDS);
    assert.equal(c.UUID, api.cluster.UUID);
    assert.equal(c.subsystemNQN, api.cluster.subsystemNQN);
    assert.equal(c.clusterName, 'test-cluster');
    assert.equal(c.currentMaxReplicas, 0, 'no Active node');
    assert.equal(c.supportedMaxReplicas, 3);
    assert.equal(c.ETag, (await api.etcd.get(keys.cluster()).exec()).kvs[0]?.mod_revision);
    assert.deepEqual(fieldsOf(c.statistics), [...BYTE_STATISTICS, 'compressionRatio'].sort());
    for (const f of BYTE_STATISTICS) assert.equal(c.statistics[f], '0', f);
    assert.equal(c.statistics.compressionRatio, 1);
    assert.deepEqual(fieldsOf(c.health), [...HEALTH_COUNTS, 'state'].sort());
    assert.equal(c.health.state, 'OK');
    for (const f of HEALTH_COUNTS) assert.equal(c.health[f], 0, f);
    assert.equal(c.MinVersionInCluster, '');
    assert.equal(c.MinAllowedVersion, '0.10.0');
    assert.equal(c.MaxAllowedVersion, '0.10.0');
    assert.deepEqual(c.apiEndpoints, []);
    assert.deepEqual(c.discoveryEndpoints, []);
    assert.deepEqual(c.lastUpgrade, NO_UPGRADE);
    assert.equal(c.inBandAuthMode, 'Disabled');
    assert.deepEqual(c.encryptionStatus, NO_ENCRYPTION);
    assert.deepEqual(c.federatedAuthenticationStatus, { federatedAuthenticationEnabled: false, idpHealthInfos: [] });
  });

  test('clusterinfo: exactly the 12 fields of spec 2.8, readable by any valid token', async () => {
    const info = await getInfo(api.projectViewerToken);
    assert.deepEqual(fieldsOf(info), CLUSTER_INFO_FIELDS);
    const c = await getCluster();
    for (const f of ['UUID', 'subsystemNQN', 'currentMaxReplicas', 'supportedMaxReplicas', 'ETag', 'apiEndpoints', 'discoveryEndpoints', 'clusterName', 'lastUpgrade', 'encryptionStatus', 'inBandAuthMode']) {
      assert.deepEqual(info[f], c[f], f);
    }
    assert.deepEqual(info.nvmeEndpoints, []);
  });

  test('401 without a token; /cluster needs a cluster role (403), /clusterinfo does not', async () => {
    for (const path of ['/api/v2/cluster', '/api/v2/clusterinfo']) {
      const res = await api.get(path);
      assert.equal(res.status, 401, path);
      assert.equal(res.body.code, 16);
    }
    const denied = await api.get('/api/v2/cluster', api.projectViewerToken);
    assert.equal(denied.status, 403);
    assert.deepEqual(fieldsOf(denied.body), ['code', 'error', 'message']);
    assert.equal(denied.body.code, 7);
    assert.equal((await api.get('/api/v2/cluster', api.clusterViewerToken)).status, 200);
    assert.equal((await api.get('/api/v2/clusterinfo', api.clusterViewerToken)).status, 200);
  });

  test('endpoints, statistics, versions and health follow the inventory', async () => {
    for (const i of [1, 2]) {
      servers.push(await joinServer(api.etcd, {
        server: { name: `s${i}` },
        nodes: [
          { nvmeEndpoint: `10.0.0.${i}:4420`, discoveryEndpoint: `10.0.0.${i}:8009`, managedDeviceSerials: [`D${i}`] },
          { nvmeEndpoint: `10.0.0.${i}:4421`, discoveryEndpoint: `10.0.0.${i}:8010` },
        ],
      }));
    }
    servers.push(await joinServer(api.etcd, { server: { name: 's3' }, nodes: [{ nvmeEndpoint: '10.0.0.3:4420', discoveryEndpoint: '10.0.0.3:8009' }], present: false }));
    const [a, b, c] = servers as [JoinedServer, JoinedServer, JoinedServer];
    await reportInventory(api.etcd, a.server.UUID, {
      facts: { productVersion: '0.10.0' },
      devices: [{ serial: 'D1', sizeBytes: '9007199254740993' }, { serial: 'OS-A', sizeBytes: '1000', holdsOS: true }, { serial: 'OLD', sizeBytes: '5', present: false }],
    });
    await reportInventory(api.etcd, b.server.UUID, { facts: { productVersion: '0.9.1' }, devices: [{ serial: 'D2', sizeBytes: '2000' }] });
    await reportInventory(api.etcd, c.server.UUID, { facts: { productVersion: '0.9.1-rc.1' } });
    await putRecord(api.etcd, keys.controlPlane('cp-2'), controlPlaneRecord({ instanceId: 'cp-2', apiEndpoint: '10.0.0.2:443' }));
    await putRecord(api.etcd, keys.controlPlane('cp-1'), controlPlaneRecord({ instanceId: 'cp-1', apiEndpoint: '10.0.0.1:443' }));

    const cluster = await getCluster();
    assert.equal(cluster.currentMaxReplicas, 2, 'two servers have Active nodes');
    assert.deepEqual(cluster.health, { state: 'Warning', numDegradedVolumes: 0, numReadOnlyVolumes: 0, numNotAvailableVolumes: 0, numInactiveNodes: 1, numHealthyVolumes: 0 });
    assert.equal(cluster.statistics.installedPhysicalStorage, '9007199254743993', 'every present device, exact past 2^53');
    assert.equal(cluster.statistics.managedPhysicalStorage, '9007199254742993', 'data devices only');
    assert.equal(cluster.MinVersionInCluster, '0.9.1-rc.1', 'semantic order, not text order');
    assert.deepEqual(cluster.apiEndpoints, ['10.0.0.1:443', '10.0.0.2:443']);
    assert.deepEqual([...cluster.discoveryEndpoints].sort(), ['10.0.0.1:8009', '10.0.0.1:8010', '10.0.0.2:8009', '10.0.0.2:8010'], 'Active nodes only');

    const info = await getInfo();
    assert.equal(info.currentMaxReplicas, 2);
    assert.deepEqual([...info.nvmeEndpoints].sort(), ['10.0.0.1:4420', '10.0.0.1:4421', '10.0.0.2:4420', '10.0.0.2:4421']);
    assert.deepEqual(info.apiEndpoints, cluster.apiEndpoints);
  });

  test('currentMaxReplicas counts distinct servers with Active nodes, capped by supportedMaxReplicas', async () => {
    const [a, b, c] = servers as [JoinedServer, JoinedServer, JoinedServer];
    await markPresent(api.etcd, c.server.UUID, c.server.nodeUUIDs);
    let cluster = await getCluster();
    assert.equal(cluster.currentMaxReplicas, 3);
    assert.equal(cluster.health.state, 'OK');
    assert.equal(cluster.health.numInactiveNodes, 0);

    servers.push(await joinServer(api.etcd, { server: { name: 's4' } }));
    assert.equal((await getCluster()).currentMaxReplicas, 3, 'never above supportedMaxReplicas');

    // Only one node of each of a and b: the server still counts once.
    await markPresent(api.etcd, a.server.UUID, [a.server.nodeUUIDs[0] as string]);
    await markAbsent(api.etcd, b.server.UUID);
    await markAbsent(api.etcd, c.server.UUID);
    await markAbsent(api.etcd, (servers[3] as JoinedServer).server.UUID);
    cluster = await getCluster();
    assert.equal(cluster.currentMaxReplicas, 1);
    assert.equal(cluster.health.state, 'Warning');
    assert.equal(cluster.health.numInactiveNodes, 5);
    assert.deepEqual(cluster.discoveryEndpoints, ['10.0.0.1:8009']);
    assert.deepEqual((await getInfo()).nvmeEndpoints, ['10.0.0.1:4420']);

    await markAbsent(api.etcd, a.server.UUID);
    cluster = await getCluster();
    assert.equal(cluster.currentMaxReplicas, 0);
    assert.equal(cluster.health.state, 'Error', 'nodes exist but none is Active');
    assert.equal(cluster.health.numInactiveNodes, 6);
    assert.deepEqual(cluster.discoveryEndpoints, []);
  });

  test('health counts the volumes by their real state: degraded → Warning; a Failed or unserved volume → Error', async () => {
    // Every node Active again; three volumes over a's and b's nodes.
    const [a, b, c, d] = servers as [JoinedServer, JoinedServer, JoinedServer, JoinedServer];
    for (const s of [a, b, c, d]) await markPresent(api.etcd, s.server.UUID, s.server.nodeUUIDs);
    const nodeA = a.server.nodeUUIDs[0] as string;
    const nodeB = b.server.nodeUUIDs[0] as string;
    const placed = (nodeList: string[]) => ({ nodeList, primaryNodeUUID: nodeList[0] as string, nsid: 1, port: 20001 });
    const serve = async (v: VolumeRecord, node: string, state: 'Served' | 'Failed' = 'Served') =>
      putRecord(api.etcd, keys.volumeStatus(v.UUID, node), statusRecord(v.UUID, node, [], { state }));
    const health = async () => (await getCluster()).health;

    const one = await putVolume(api.etcd, volumeRecord({ replicaCount: 2, placement: placed([nodeA, nodeB]) }));
    // As the controller places a replicated volume: its replica set, both copies in sync.
    const replicaSet: ReplicaSetRecord = { volumeUUID: one.UUID, epoch: 1, primaryNodeUUID: nodeB, inSync: [nodeA, nodeB], reason: 'created', announced: 'Unknown', updatedAt: new Date().toISOString() };
    await putRecord(api.etcd, keys.replicaSet(one.UUID), replicaSet);
    const two = await putVolume(api.etcd, volumeRecord({ replicaCount: 1, placement: placed([nodeB]) }));
    for (const [v, node] of [[one, nodeA], [one, nodeB], [two, nodeB]] as const) await serve(v, node);
    // Neither Creating (no data yet) nor Deleting (going away) counts.
    await putVolume(api.etcd, volumeRecord({ state: 'Creating', placement: null }));
    await putVolume(api.etcd, volumeRecord({ state: 'Deleting', placement: placed([nodeA]) }));
    assert.deepEqual(await health(), { state: 'OK', numDegradedVolumes: 0, numReadOnlyVolumes: 0, numNotAvailableVolumes: 0, numInactiveNodes: 0, numHealthyVolumes: 2 });

    await serve(one, nodeA, 'Failed');
    assert.deepEqual(await health(), { state: 'Warning', numDegradedVolumes: 1, numReadOnlyVolumes: 0, numNotAvailableVolumes: 0, numInactiveNodes: 0, numHealthyVolumes: 1 }, 'one replica of two serves');

    await putVolume(api.etcd, { ...two, state: 'Failed', failureReason: 'the backing could not be created' });
    assert.deepEqual(await health(), { state: 'Error', numDegradedVolumes: 1, numReadOnlyVolumes: 0, numNotAvailableVolumes: 1, numInactiveNodes: 0, numHealthyVolumes: 0 }, 'a Failed volume is not available');

    await putVolume(api.etcd, { ...two, state: 'Available' });
    await serve(one, nodeA);
    await markAbsent(api.etcd, b.server.UUID);
    // The leader promotes the in-sync copy on a's node (docs/replication.md).
    await putRecord(api.etcd, keys.replicaSet(one.UUID), { ...replicaSet, epoch: 2, primaryNodeUUID: nodeA });
    const down = await health();
    assert.equal(down.state, 'Error', 'the only replica of two is on an Inactive node');
    assert.deepEqual([down.numHealthyVolumes, down.numDegradedVolumes, down.numNotAvailableVolumes, down.numInactiveNodes], [0, 1, 1, 2]);

    await markPresent(api.etcd, b.server.UUID, b.server.nodeUUIDs);
    assert.equal((await health()).state, 'OK');
  });
});

describe('volume health (pure)', () => {
  test('each volume by lifecycle state, then protection state; the cluster state from the counts', () => {
    assert.equal(healthOfVolume({ state: 'Creating' }, 'Unknown'), null);
    assert.equal(healthOfVolume({ state: 'Deleting' }, 'FullyProtected'), null);
    assert.equal(healthOfVolume({ state: 'Failed' }, 'FullyProtected'), 'failed');
    assert.equal(healthOfVolume({ state: 'Available' }, 'FullyProtected'), 'healthy');
    assert.equal(healthOfVolume({ state: 'Updating' }, 'Degraded'), 'degraded');
    assert.equal(healthOfVolume({ state: 'Rollback' }, 'ReadOnly'), 'readOnly');
    assert.equal(healthOfVolume({ state: 'Available' }, 'NotAvailable'), 'notAvailable');
    assert.equal(healthOfVolume({ state: 'Available' }, 'Unknown'), 'notAvailable', 'placed but no replica known to serve');
    assert.equal(healthOfVolume({ state: 'Creating', waitingFor: '2 Active node(s) needed, 1 available' }, 'Unknown'), 'waiting', 'may fit later');
    assert.equal(clusterHealthState(countVolumeHealth(['healthy', 'waiting']), { total: 2, active: 2 }), 'Warning', 'a volume waiting to be placed');
    const counts = countVolumeHealth(['healthy', 'failed', 'notAvailable', 'degraded', null, 'readOnly', 'healthy']);
    assert.deepEqual(counts, { healthy: 2, degraded: 1, readOnly: 1, notAvailable: 2 });
    const nodes = { total: 2, active: 2 };
    assert.equal(clusterHealthState({ healthy: 3, degraded: 0, readOnly: 0, notAvailable: 0 }, nodes), 'OK');
    assert.equal(clusterHealthState({ healthy: 3, degraded: 1, readOnly: 0, notAvailable: 0 }, nodes), 'Warning');
    assert.equal(clusterHealthState({ healthy: 3, degraded: 0, readOnly: 0, notAvailable: 0 }, { total: 2, active: 1 }), 'Warning');
    assert.equal(clusterHealthState({ healthy: 3, degraded: 1, readOnly: 1, notAvailable: 0 }, nodes), 'Error');
    assert.equal(clusterHealthState({ healthy: 0, degraded: 0, readOnly: 0, notAvailable: 1 }, nodes), 'Error');
    assert.equal(clusterHealthState({ healthy: 0, degraded: 0, readOnly: 0, notAvailable: 0 }, { total: 1, active: 0 }), 'Error');
  });
});
