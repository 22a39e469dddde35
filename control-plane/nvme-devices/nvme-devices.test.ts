// GET /api/v2/nvmeDevices[/{Serial}] against a real etcd, a bootstrapped cluster and real tokens.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import {
  fieldsOf,
  joinServer,
  reportInventory,
  startApiHarness,
  type ApiHarness,
  type JoinedServer,
} from '../../test/helpers/records.js';
import { InventoryReader } from '../inventory/inventory-reader.js';
import { createNvmeDevicesRoutes } from './nvme-devices-routes.js';
import { NvmeDevicesService } from './nvme-devices-service.js';

const DEVICE_FIELDS = [
  'size', 'numaNodeID', 'model', 'serial', 'serverUUID', 'state', 'failureTime', 'rebuildCompletionTime', 'name',
  'nodeUUID', 'ETag', 'statistics', 'deviceUsage',
].sort();
const ODD_SERIAL = 'S N/1+%é';
const FAILED_AT = '2024-05-01T10:00:00.000Z';

describe('NVMe devices API', () => {
  let api: ApiHarness;
  let s1: JoinedServer;
  let s2: JoinedServer;
  const nodeOf = (s: JoinedServer) => s.nodes[0]?.UUID as string;

  before(async () => {
    api = await startApiHarness((_etcd, auth, cache) => [createNvmeDevicesRoutes({ auth, devices: new NvmeDevicesService(new InventoryReader(cache)) })]);
    s1 = await joinServer(api.etcd, { nodes: [{ managedDeviceSerials: ['D1', 'D2'], journalDeviceSerial: 'J1' }] });
    s2 = await joinServer(api.etcd, { nodes: [{ managedDeviceSerials: ['E1'] }], present: false });
    await reportInventory(api.etcd, s1.server.UUID, {
      devices: [
        { serial: 'D1', sizeBytes: '3840755982336', numaNode: 1, controller: 'nvme1', model: 'Model D' },
        { serial: 'D2', present: false, reportedAt: FAILED_AT },
        { serial: 'J1', sizeBytes: '375083606016', controller: 'nvme2' },
        { serial: 'OS1', holdsOS: true, numaNode: -1, controller: 'nvme3' },
        { serial: 'U1', controller: 'nvme4' },
        { serial: 'GONE', present: false },
        { serial: ODD_SERIAL, controller: 'nvme5' },
      ],
    });
    await reportInventory(api.etcd, s2.server.UUID, { devices: [{ serial: 'E1' }] });
  });
  after(async () => {
    await api?.close();
  });

  const list = async (query = '') => {
    const res = await api.get(`/api/v2/nvmeDevices${query}`, api.adminToken);
    assert.equal(res.status, 200, `${query}: ${JSON.stringify(res.body)}`);
    assert.deepEqual(Object.keys(res.body), ['NvmeDevices']);
    return res.body.NvmeDevices as any[];
  };
  const serials = async (query = '') => (await list(query)).map((d) => d.serial).sort();

  test('lists devices with exactly the 13 fields of spec 2.13 under NvmeDevices', async () => {
    const devices = await list();
    assert.deepEqual(devices.map((d) => d.serial).sort(), ['D1', 'D2', 'E1', 'J1', 'OS1', ODD_SERIAL, 'U1'].sort(), 'an unused device that is gone is not listed');
    for (const d of devices) {
      assert.deepEqual(fieldsOf(d), DEVICE_FIELDS);
      assert.match(d.size, /^\d+$/);
      assert.match(d.numaNodeID, /^-?\d+$/);
      for (const f of ['model', 'serial', 'serverUUID', 'state', 'name', 'nodeUUID', 'ETag', 'deviceUsage']) assert.equal(typeof d[f], 'string', f);
      assert.match(d.ETag, /^\d+$/);
      assert.ok(d.failureTime === null || !Number.isNaN(Date.parse(d.failureTime)));
      assert.equal(d.rebuildCompletionTime, null);
      if (d.deviceUsage === 'Data') {
        assert.deepEqual(d.statistics, { UnrecoverableDataIntegrityErrors: 0, RecoverableDataIntegrityErrors: 0 });
      } else {
        assert.equal(d.statistics, null);
      }
    }
  });

  test('usage, node, state and failure time', async () => {
    const by = new Map((await list()).map((d) => [d.serial, d]));
    const d1 = by.get('D1');
    assert.deepEqual(
      { size: d1.size, numaNodeID: d1.numaNodeID, model: d1.model, serverUUID: d1.serverUUID, state: d1.state, failureTime: d1.failureTime, name: d1.name, nodeUUID: d1.nodeUUID, deviceUsage: d1.deviceUsage },
      { size: '3840755982336', numaNodeID: '1', model: 'Model D', serverUUID: s1.server.UUID, state: 'Healthy', failureTime: null, name: 'nvme1', nodeUUID: nodeOf(s1), deviceUsage: 'Data' },
    );
    assert.equal(by.get('D2').state, 'Failed');
    assert.equal(by.get('D2').deviceUsage, 'Data');
    assert.equal(by.get('D2').failureTime, FAILED_AT);
    assert.deepEqual([by.get('J1').deviceUsage, by.get('J1').state, by.get('J1').nodeUUID], ['Journal', 'Healthy', nodeOf(s1)]);
    assert.deepEqual([by.get('OS1').deviceUsage, by.get('OS1').state, by.get('OS1').nodeUUID, by.get('OS1').numaNodeID], ['OS', 'None', '', '-1']);
    assert.deepEqual([by.get('U1').deviceUsage, by.get('U1').state, by.get('U1').nodeUUID], ['UnManaged', 'None', '']);
    assert.deepEqual([by.get('E1').deviceUsage, by.get('E1').nodeUUID, by.get('E1').serverUUID], ['Data', nodeOf(s2), s2.server.UUID]);
  });

  test('GET by serial: URL-decoded path parameter, same object as the list, ETag = record revision', async () => {
    const res = await api.get(`/api/v2/nvmeDevices/${encodeURIComponent(ODD_SERIAL)}`, api.adminToken);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.serial, ODD_SERIAL);
    assert.deepEqual(res.body, (await list()).find((d) => d.serial === ODD_SERIAL));
    assert.equal(res.body.ETag, (await api.etcd.get(keys.device(ODD_SERIAL)).exec()).kvs[0]?.mod_revision);
    assert.equal((await api.get('/api/v2/nvmeDevices/D1', api.adminToken)).body.deviceUsage, 'Data');
  });

  test('filters: nodeUUID, serverUUID, deviceUsages (repeated, comma-separated, numbers)', async () => {
    assert.deepEqual(await serials(`?nodeUUID=${nodeOf(s1)}`), ['D1', 'D2', 'J1']);
    assert.deepEqual(await serials(`?serverUUID=${s2.server.UUID}`), ['E1']);
    assert.deepEqual(await serials('?deviceUsages=Data'), ['D1', 'D2', 'E1']);
    assert.deepEqual(await serials('?deviceUsages=Journal&deviceUsages=OS'), ['J1', 'OS1']);
    assert.deepEqual(await serials('?deviceUsages=Journal,UnManaged'), [ODD_SERIAL, 'U1', 'J1'].sort());
    assert.deepEqual(await serials('?deviceUsages=3'), ['OS1']);
    assert.deepEqual(await serials('?deviceUsages=Unknown'), []);
    assert.deepEqual(await serials(`?serverUUID=${s1.server.UUID}&deviceUsages=Data`), ['D1', 'D2']);
    assert.deepEqual(await serials('?nodeuuid=x&DeviceUsages=Bogus'), (await serials()), 'names are case-sensitive; unknown ignored');
  });

  test('an invalid deviceUsages value is a 400', async () => {
    for (const query of ['?deviceUsages=Bogus', '?deviceUsages=Data,Bogus', '?deviceUsages=7']) {
      const res = await api.get(`/api/v2/nvmeDevices${query}`, api.adminToken);
      assert.equal(res.status, 400, query);
      assert.equal(res.body.code, 3);
      assert.match(res.body.message, /deviceUsages/);
    }
  });

  test('unknown serial (or an unused device that is gone) is a 404 with the JSON error body', async () => {
    for (const serial of ['NOPE', 'GONE']) {
      const res = await api.get(`/api/v2/nvmeDevices/${serial}`, api.adminToken);
      assert.equal(res.status, 404, serial);
      assert.deepEqual(fieldsOf(res.body), ['code', 'error', 'message']);
      assert.equal(res.body.code, 5);
    }
  });

  test('401 without a token, 403 for a project viewer, 200 for a cluster viewer', async () => {
    for (const path of ['/api/v2/nvmeDevices', '/api/v2/nvmeDevices/D1']) {
      assert.equal((await api.get(path)).status, 401, path);
      assert.equal((await api.get(path, api.projectViewerToken)).status, 403, path);
      assert.equal((await api.get(path, api.clusterViewerToken)).status, 200, path);
    }
  });

  test('a data device the agent stops reporting turns Failed, with the time it was last reported', async () => {
    const [d1] = await reportInventory(api.etcd, s1.server.UUID, {
      devices: [{ serial: 'D1', sizeBytes: '3840755982336', numaNode: 1, controller: 'nvme1', model: 'Model D', present: false }],
    });
    const res = await api.get('/api/v2/nvmeDevices/D1', api.adminToken);
    assert.equal(res.body.state, 'Failed');
    assert.equal(res.body.failureTime, d1?.reportedAt);
  });
});
