// What the nodes' measured storage pools (NodePoolRecord, from agents' PoolReports) show in the
// API, against a real etcd: node and cluster statistics, a node's local rebuild, and each
// device's state, failure time and rebuild completion time.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { NodeRecord } from '../../lib/records.js';
import { joinServer, nodePoolRecord as poolRecord, putRecord, reportInventory, startApiHarness, type ApiHarness, type JoinedServer } from '../../test/helpers/records.js';
import { WatchedVolumeHealth } from '../cluster/volume-health.js';
import { ClusterService } from '../cluster/cluster-service.js';
import { createClusterRoutes } from '../cluster/cluster-routes.js';
import { InventoryReader } from '../inventory/inventory-reader.js';
import { createNodesRoutes } from '../nodes/nodes-routes.js';
import { NodesService } from '../nodes/nodes-service.js';
import { createNvmeDevicesRoutes } from './nvme-devices-routes.js';
import { NvmeDevicesService } from './nvme-devices-service.js';

const GiB = 1024n ** 3n;
const COMPLETED = '2024-06-01T12:00:00.000Z';
const FAILED = '2024-06-02T08:30:00.000Z';

describe('storage pools in the API', () => {
  let api: ApiHarness;
  let s1: JoinedServer;
  let s2: JoinedServer;
  const node = (s: JoinedServer) => s.nodes[0] as NodeRecord;

  before(async () => {
    api = await startApiHarness((etcd, auth, cache) => {
      const reader = new InventoryReader(cache);
      return [
        createNodesRoutes({ auth, nodes: new NodesService(reader) }),
        createClusterRoutes({ auth, cluster: new ClusterService(reader, new WatchedVolumeHealth(cache)) }),
        createNvmeDevicesRoutes({ auth, devices: new NvmeDevicesService(reader) }),
      ];
    });
    s1 = await joinServer(api.etcd, { nodes: [{ name: 'ec', managedDeviceSerials: ['A1', 'A2', 'A3', 'A4', 'A5'], journalDeviceSerial: 'AJ', ec: true }] });
    s2 = await joinServer(api.etcd, { nodes: [{ name: 'plain', managedDeviceSerials: ['B1', 'B2'] }] });
    const size = String(4n * GiB);
    await reportInventory(api.etcd, s1.server.UUID, { devices: ['A1', 'A2', 'A3', 'A4', 'A5', 'AJ'].map((serial) => ({ serial, sizeBytes: size })) });
    await reportInventory(api.etcd, s2.server.UUID, { devices: ['B1', 'B2'].map((serial) => ({ serial, sizeBytes: size })) });

    // ec: raid5 over A1..A4 with AJ as write journal, A4 rebuilding at 37 %, A5 refused.
    const ec = poolRecord(node(s1), {
      state: 'Rebuilding', level: 'raid5', journal: true, rebuildProgressPercent: 37,
      rawBytes: String(16n * GiB), arrayBytes: String(12n * GiB), capacityBytes: String(11n * GiB), freeBytes: String(7n * GiB),
      provisionedBytes: String(20n * GiB), logicalUsedBytes: String(8n * GiB), physicalUsedBytes: String(4n * GiB),
      physicalUsedIncludingParityBytes: String((4n * GiB * 4n) / 3n),
      recoverableIntegrityErrors: '40', unrecoverableIntegrityErrors: '3',
    });
    ec.devices = [
      { serial: 'A1', role: 'data', state: 'Healthy', sizeBytes: size, error: '', stateSince: COMPLETED, rebuildCompletedAt: COMPLETED },
      { serial: 'A2', role: 'data', state: 'Healthy', sizeBytes: size, error: '', stateSince: COMPLETED, rebuildCompletedAt: '', recoverableIntegrityErrors: '32' },
      { serial: 'A3', role: 'data', state: 'Failed', sizeBytes: size, error: 'md marked the device faulty', stateSince: FAILED, rebuildCompletedAt: '' },
      { serial: 'A4', role: 'data', state: 'Rebuilding', sizeBytes: size, error: '', stateSince: FAILED, rebuildCompletedAt: '' },
      { serial: 'AJ', role: 'journal', state: 'Healthy', sizeBytes: size, error: '', stateSince: COMPLETED, rebuildCompletedAt: '' },
    ];
    await putRecord(api.etcd, keys.nodePool(node(s1).UUID), ec);
    // plain: raid0 over B1 + B2, nothing stored yet.
    await putRecord(api.etcd, keys.nodePool(node(s2).UUID), poolRecord(node(s2), {
      rawBytes: String(8n * GiB), arrayBytes: String(8n * GiB), capacityBytes: String(7n * GiB), freeBytes: String(7n * GiB),
    }));
  });
  after(async () => {
    await api?.close();
  });

  const nodes = async () => new Map(((await api.get('/api/v2/nodes', api.adminToken)).body.nodes as any[]).map((n) => [n.name, n]));
  const devices = async () => new Map(((await api.get('/api/v2/nvmeDevices', api.adminToken)).body.NvmeDevices as any[]).map((d) => [d.serial, d]));

  test('node statistics come from the measured pool', async () => {
    const ec = (await nodes()).get('ec');
    assert.deepEqual(ec.statistics, {
      managedPhysicalStorage: String(20n * GiB), // the five data devices present (inventory)
      effectivePhysicalStorage: String(11n * GiB),
      logicalStorage: String(20n * GiB),
      logicalUsedStorage: String(8n * GiB),
      physicalUsedStorage: String(4n * GiB),
      physicalUsedStorageIncludingParity: String((4n * GiB * 4n) / 3n),
      freePhysicalStorage: String(7n * GiB),
      estimatedFreeLogicalStorage: String(14n * GiB), // free × 2
      estimatedLogicalStorage: String(22n * GiB), // logical used + estimated free logical
      compressionRatio: 2,
      UnrecoverableDataIntegrityErrors: 3, // btrfs' read, corruption and generation errors
      RecoverableDataIntegrityErrors: 40, // md's corrected read errors of the members
      GarbageCollectorDataIntegrityErrors: 0, // not measured
      metadataUtilization: 0, // not measured
    });
    assert.deepEqual([ec.inLocalRebuild, ec.localRebuildProgress], [true, 37]);
    const plain = (await nodes()).get('plain');
    assert.deepEqual([plain.statistics.effectivePhysicalStorage, plain.statistics.freePhysicalStorage, plain.statistics.compressionRatio], [String(7n * GiB), String(7n * GiB), 1]);
    assert.deepEqual([plain.inLocalRebuild, plain.localRebuildProgress], [false, 0]);
    const counts = (n: any) => [n.statistics.UnrecoverableDataIntegrityErrors, n.statistics.RecoverableDataIntegrityErrors];
    assert.deepEqual(counts(plain), [0, 0], 'its agent reported no counts: the documented "not measured" 0');
  });

  test('a device\'s recoverable count is md\'s for that member; its unrecoverable count is not measured', async () => {
    const d = await devices();
    const counts = (serial: string) => [d.get(serial).statistics.UnrecoverableDataIntegrityErrors, d.get(serial).statistics.RecoverableDataIntegrityErrors];
    assert.deepEqual(counts('A2'), [0, 32]);
    assert.deepEqual(counts('A1'), [0, 0], 'not reported for this device');
    assert.deepEqual(counts('B1'), [0, 0]);
    assert.equal(d.get('AJ').statistics, null, 'a journal device has no statistics');
  });

  test('cluster statistics are the sums, the ratio the cluster\'s', async () => {
    const { statistics } = (await api.get('/api/v2/cluster', api.adminToken)).body;
    assert.deepEqual(statistics, {
      installedPhysicalStorage: String(32n * GiB),
      managedPhysicalStorage: String(28n * GiB),
      effectivePhysicalStorage: String(18n * GiB),
      logicalStorage: String(20n * GiB),
      logicalUsedStorage: String(8n * GiB),
      physicalUsedStorage: String(4n * GiB),
      physicalUsedStorageIncludingParity: String((4n * GiB * 4n) / 3n),
      freePhysicalStorage: String(14n * GiB),
      estimatedFreeLogicalStorage: String(28n * GiB),
      estimatedLogicalStorage: String(36n * GiB),
      compressionRatio: 2,
    });
  });

  test('device state, failure time and rebuild completion time come from the pool', async () => {
    const d = await devices();
    const view = (serial: string) => [d.get(serial).state, d.get(serial).failureTime, d.get(serial).rebuildCompletionTime];
    assert.deepEqual(view('A1'), ['Healthy', null, COMPLETED]);
    assert.deepEqual(view('A2'), ['Healthy', null, null]);
    assert.deepEqual(view('A3'), ['Failed', FAILED, null]);
    assert.deepEqual(view('A4'), ['Rebuilding', null, null]);
    assert.deepEqual(view('A5'), ['Adding', null, null], 'a data device the pool does not list yet');
    assert.deepEqual(view('AJ'), ['Healthy', null, null], 'the journal: no rebuild time');
    assert.deepEqual(view('B1'), ['Healthy', null, null]);
  });

  test('a device that is gone is Failed whatever the pool last said; a Failed pool fails its unlisted devices', async () => {
    await reportInventory(api.etcd, s2.server.UUID, { devices: [{ serial: 'B2', present: false, reportedAt: FAILED }] });
    assert.deepEqual([(await devices()).get('B2').state, (await devices()).get('B2').failureTime], ['Failed', FAILED]);
    await putRecord(api.etcd, keys.nodePool(node(s2).UUID), { ...poolRecord(node(s2)), state: 'Failed', error: 'cannot assemble', devices: [], reportedAt: COMPLETED });
    assert.deepEqual([(await devices()).get('B1').state, (await devices()).get('B1').failureTime], ['Failed', COMPLETED]);
    assert.equal((await nodes()).get('plain').statistics.effectivePhysicalStorage, '0');
  });
});
