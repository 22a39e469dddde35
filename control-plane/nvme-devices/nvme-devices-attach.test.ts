// POST /api/v2/nvmeDevices {serialNumber, nodeUUID} against a real etcd, a bootstrapped cluster
// and real tokens: the node record's desired devices, the event, the device's new ETag and
// state, every refusal of spec 4.9 (and that a refused request writes nothing), lenient input,
// idempotent retries, and two requests racing for one device.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import { createLogger } from '../../lib/logger.js';
import type { NodeRecord } from '../../lib/records.js';
import {
  joinServer,
  markAbsent,
  markPresent,
  nodePoolRecord as poolRecord,
  putRecord,
  reportInventory,
  startApiHarness,
  type ApiHarness,
  type JoinedServer,
} from '../../test/helpers/records.js';
import { EtcdEventLog } from '../events/etcd-event-log.js';
import { EventLogStore } from '../events/event-log-store.js';
import { InventoryReader } from '../inventory/inventory-reader.js';
import { createNvmeDevicesRoutes } from './nvme-devices-routes.js';
import { NvmeDevicesService } from './nvme-devices-service.js';
import { NvmeDevicesStore } from './nvme-devices-store.js';

describe('POST /api/v2/nvmeDevices', () => {
  let api: ApiHarness;
  let s1: JoinedServer;
  let s2: JoinedServer;
  const node = (s: JoinedServer, i = 0) => s.nodes[i] as NodeRecord;

  before(async () => {
    api = await startApiHarness((etcd, auth, cache) => [
      createNvmeDevicesRoutes({
        auth,
        devices: new NvmeDevicesService(new InventoryReader(cache), { store: new NvmeDevicesStore(etcd), events: new EtcdEventLog(new EventLogStore(etcd), createLogger('test', 'silent')) }),
      }),
    ]);
    s1 = await joinServer(api.etcd, {
      nodes: [
        { name: 'n1', managedDeviceSerials: ['D1'], journalDeviceSerial: 'J1', maxNvmeDevices: 4 },
        { name: 'n2', managedDeviceSerials: ['E1'], maxNvmeDevices: 1 },
      ],
    });
    s2 = await joinServer(api.etcd, { nodes: [{ name: 'm1', managedDeviceSerials: [] }] });
    await reportInventory(api.etcd, s1.server.UUID, {
      devices: [
        { serial: 'D1', controller: 'nvme0' }, { serial: 'J1', controller: 'nvme1' }, { serial: 'E1', controller: 'nvme2' },
        { serial: 'NEW1', controller: 'nvme3', sizeBytes: '3840755982336' }, { serial: 'NEW2', controller: 'nvme4' }, { serial: 'NEW3', controller: 'nvme5' },
        { serial: '12345', controller: 'nvme6' }, { serial: 'OSDISK', holdsOS: true }, { serial: 'PULLED', present: false },
      ],
    });
    await reportInventory(api.etcd, s2.server.UUID, { devices: [{ serial: 'OTHER1', controller: 'nvme0' }] });
  });
  after(async () => {
    await api?.close();
  });
  beforeEach(async () => {
    await markPresent(api.etcd, s1.server.UUID, s1.server.nodeUUIDs);
  });

  const post = async (body: unknown, options: { token?: string | null; ifMatch?: string; raw?: string } = {}) => {
    const headers: Record<string, string> = { 'Content-Type': 'application/json' };
    const token = options.token === undefined ? api.adminToken : options.token;
    if (token) headers['Authorization'] = `Bearer ${token}`;
    if (options.ifMatch !== undefined) headers['If-Match'] = options.ifMatch;
    const res = await fetch(`${api.baseUrl}/api/v2/nvmeDevices`, { method: 'POST', headers, body: options.raw ?? JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  const nodeRecord = async (uuid: string) => JSON.parse((await api.etcd.get(keys.node(uuid)).string()) ?? 'null') as NodeRecord;
  const events = async () =>
    Object.values(await api.etcd.getAll().prefix(keys.eventsPrefix()).strings())
      .map((v) => JSON.parse(v) as { EventName: string; Description: string; ComponentNVMeSSDInfo?: { ID: string; Name: string } })
      .filter((e) => e.EventName === 'NVMeSSDAttachedToNode');
  const everything = async () => new Map((await api.etcd.getAll().prefix('/strata/').exec()).kvs.map((kv) => [kv.key.toString(), kv.mod_revision]));
  const refused = async (body: unknown, status: number, code: number, message: RegExp, options: Parameters<typeof post>[1] = {}) => {
    const before = await everything();
    const res = await post(body, options);
    assert.equal(res.status, status, JSON.stringify(res.body));
    assert.equal(res.body.code, code);
    assert.equal(res.body.error, res.body.message);
    assert.match(res.body.message, message);
    assert.deepEqual(await everything(), before, 'a refused request writes nothing');
  };

  test('gives the device to the node: desired devices in the node record, an event, a new device ETag; {} back', async () => {
    const etagBefore = (await api.get('/api/v2/nvmeDevices/NEW1', api.adminToken)).body.ETag;
    const res = await post({ serialNumber: 'NEW1', nodeUUID: node(s1).UUID });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body, {});
    assert.deepEqual((await nodeRecord(node(s1).UUID)).managedDeviceSerials, ['D1', 'NEW1']);
    const [event] = await events();
    assert.ok(event);
    assert.deepEqual(event.ComponentNVMeSSDInfo, { ID: 'NEW1', Name: 'nvme3' });
    assert.match(event.Description, /node n1/);

    const device = (await api.get('/api/v2/nvmeDevices/NEW1', api.adminToken)).body;
    assert.notEqual(device.ETag, etagBefore, 'the device changed (node, usage): so did its ETag');
    assert.deepEqual([device.deviceUsage, device.nodeUUID, device.state], ['Data', node(s1).UUID, 'Healthy'], 'no pool report yet: Healthy while present');

    // Once the node's pool reports (without the new device yet): Adding.
    await putRecord(api.etcd, keys.nodePool(node(s1).UUID), poolRecord({ ...node(s1), managedDeviceSerials: ['D1'] }));
    assert.equal((await api.get('/api/v2/nvmeDevices/NEW1', api.adminToken)).body.state, 'Adding');
  });

  test('is idempotent: the same request again succeeds and changes nothing', async () => {
    const before = await everything();
    const eventsBefore = (await events()).length;
    const res = await post({ serialNumber: 'NEW1', nodeUUID: node(s1).UUID });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, {});
    assert.deepEqual(await everything(), before);
    assert.equal((await events()).length, eventsBefore);
  });

  test('400: empty input, missing or null fields, a body that is not an object', async () => {
    await refused({}, 400, 3, /serialNumber is required; nodeUUID is required/);
    await refused({ serialNumber: 'NEW2' }, 400, 3, /nodeUUID is required/);
    await refused({ serialNumber: null, nodeUUID: node(s1).UUID }, 400, 3, /serialNumber is required/);
    await refused({ serialNumber: '  ', nodeUUID: node(s1).UUID }, 400, 3, /serialNumber is required/);
    await refused({ serialNumber: ['NEW2'], nodeUUID: node(s1).UUID }, 400, 3, /serialNumber/);
    await refused(undefined, 400, 3, /JSON/, { raw: '[1,2]' });
    await refused(undefined, 400, 3, /JSON/, { raw: '{"serialNumber":' });
    // Authentication comes first (docs/api.md: 401, then parameters, then 403).
    await refused({}, 401, 16, /authentication required/, { token: null });
  });

  test('400: the device belongs to a node already (another node, or this node\'s journal)', async () => {
    await refused({ serialNumber: 'E1', nodeUUID: node(s1).UUID }, 400, 3, /already the data device of node n2/);
    await refused({ serialNumber: 'J1', nodeUUID: node(s1).UUID }, 400, 3, /already the journal device of this node/);
    await refused({ serialNumber: 'NEW1', nodeUUID: node(s1, 1).UUID }, 400, 3, /already the data device of node n1/);
  });

  test('400: node at its device maximum, not the server\'s node, not active; a device holding the OS', async () => {
    await refused({ serialNumber: 'NEW2', nodeUUID: node(s1, 1).UUID }, 400, 3, /already has 1 data devices, its maximum \(maxNvmeDevices 1\)/);
    await refused({ serialNumber: 'OTHER1', nodeUUID: node(s1).UUID }, 400, 3, /not a node of server/);
    await refused({ serialNumber: 'NEW2', nodeUUID: node(s2).UUID }, 400, 3, /not a node of server/);
    await refused({ serialNumber: 'OSDISK', nodeUUID: node(s1).UUID }, 400, 3, /operating system/);
    await markAbsent(api.etcd, s1.server.UUID);
    await refused({ serialNumber: 'NEW2', nodeUUID: node(s1).UUID }, 400, 3, /is not Active/);
    await markPresent(api.etcd, s1.server.UUID, [node(s1, 1).UUID]); // the agent serves only n2
    await refused({ serialNumber: 'NEW2', nodeUUID: node(s1).UUID }, 400, 3, /is not Active/);
  });

  test('400: a pool on an md raid5/6 with a write journal cannot grow (the kernel cannot reshape it)', async () => {
    const uuid = node(s1).UUID;
    await putRecord(api.etcd, keys.nodePool(uuid), poolRecord(await nodeRecord(uuid), { level: 'raid5', journal: true }));
    await refused({ serialNumber: 'NEW2', nodeUUID: uuid }, 400, 3, /raid5 array with a write journal/);
    await putRecord(api.etcd, keys.nodePool(uuid), poolRecord(await nodeRecord(uuid), { level: 'raid5', journal: false }));
  });

  test('404: unknown device or node, or a device that is gone and no node uses', async () => {
    await refused({ serialNumber: 'NOPE', nodeUUID: node(s1).UUID }, 404, 5, /NVMe device NOPE not found/);
    await refused({ serialNumber: 'NEW2', nodeUUID: '11111111-1111-4111-8111-111111111111' }, 404, 5, /node 11111111-1111-4111-8111-111111111111 not found/);
    await refused({ serialNumber: 'PULLED', nodeUUID: node(s1).UUID }, 404, 5, /NVMe device PULLED not found/);
  });

  test('412 when If-Match is not the device\'s ETag; the right ETag passes', async () => {
    const etag = (await api.get('/api/v2/nvmeDevices/NEW2', api.adminToken)).body.ETag as string;
    await refused({ serialNumber: 'NEW2', nodeUUID: node(s1).UUID }, 412, 9, /ETag mismatch/, { ifMatch: '"1"' });
    const res = await post({ serialNumber: 'NEW2', nodeUUID: node(s1).UUID }, { ifMatch: `"${etag}"` });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual((await nodeRecord(node(s1).UUID)).managedDeviceSerials, ['D1', 'NEW1', 'NEW2']);
  });

  test('lenient input: a serial as a JSON number, unknown keys ignored', async () => {
    const res = await post({ serialNumber: 12345, nodeUUID: ` ${node(s1).UUID} `, ledPattern: 'locate', extra: { x: 1 } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual((await nodeRecord(node(s1).UUID)).managedDeviceSerials, ['D1', 'NEW1', 'NEW2', '12345']);
  });

  test('401 without a token, 403 without cluster write (viewers)', async () => {
    const body = { serialNumber: 'NEW3', nodeUUID: node(s2).UUID };
    assert.equal((await post(body, { token: null })).status, 401);
    for (const token of [api.clusterViewerToken, api.projectViewerToken]) {
      const res = await post(body, { token });
      assert.equal(res.status, 403);
      assert.equal(res.body.code, 7);
    }
  });

  test('two requests giving one device to two nodes: exactly one wins, the other is refused', async () => {
    const joined = await joinServer(api.etcd, { nodes: [{ name: 'r1' }, { name: 'r2' }] });
    await reportInventory(api.etcd, joined.server.UUID, { devices: [{ serial: 'RACE' }] });
    const results = await Promise.all(joined.nodes.map((n) => post({ serialNumber: 'RACE', nodeUUID: n.UUID })));
    assert.deepEqual(results.map((r) => r.status).sort(), [200, 400], JSON.stringify(results));
    const owners = await Promise.all(joined.nodes.map(async (n) => (await nodeRecord(n.UUID)).managedDeviceSerials.includes('RACE')));
    assert.deepEqual(owners.filter(Boolean).length, 1);
  });
});
