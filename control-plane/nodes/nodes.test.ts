// GET /api/v2/nodes[/{UUID}] against a real etcd, a bootstrapped cluster and real tokens.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import {
  fieldsOf,
  joinServer,
  markAbsent,
  markPresent,
  reportInventory,
  startApiHarness,
  type ApiHarness,
  type JoinedServer,
} from '../../test/helpers/records.js';
import { StrataError } from '../../lib/errors.js';
import { InventoryReader } from '../inventory/inventory-reader.js';
import { NodeCommandsService } from './node-commands-service.js';
import { NodeCommandsStore } from './node-commands-store.js';
import { createNodesRoutes } from './nodes-routes.js';
import { NodesService } from './nodes-service.js';

const NODE_FIELDS = [
  'name', 'UUID', 'state', 'status', 'nvmeEndpoint', 'failureDomains', 'failureInfo', 'hostname', 'inLocalRebuild',
  'localRebuildProgress', 'numManagedDevices', 'maxNvmeDevices', 'ec', 'statistics', 'serverUUID', 'ETag', 'readOnly',
  'powerupProgress', 'permanentFailure', 'journalDeviceNotFound', 'journalNvmeDevice', 'journalRaidDevice',
].sort();
const BYTE_STATISTICS = [
  'managedPhysicalStorage', 'effectivePhysicalStorage', 'logicalStorage', 'logicalUsedStorage', 'physicalUsedStorage',
  'physicalUsedStorageIncludingParity', 'freePhysicalStorage', 'estimatedFreeLogicalStorage', 'estimatedLogicalStorage',
];
const NUMBER_STATISTICS = [
  'compressionRatio', 'UnrecoverableDataIntegrityErrors', 'RecoverableDataIntegrityErrors', 'GarbageCollectorDataIntegrityErrors', 'metadataUtilization',
];

describe('nodes API', () => {
  let api: ApiHarness;
  let s1: JoinedServer;
  let s2: JoinedServer;
  const n = (s: JoinedServer, i: number) => s.nodes[i] as (typeof s.nodes)[number];

  before(async () => {
    api = await startApiHarness((_etcd, auth, cache) => [createNodesRoutes({ auth, nodes: new NodesService(new InventoryReader(cache)) })]);
    s1 = await joinServer(api.etcd, {
      server: { hostname: 'host-1' },
      nodes: [
        { name: 'n-a', failureDomains: ['fd1'], managedDeviceSerials: ['D1', 'D2', 'D4'], journalDeviceSerial: 'J1', nvmeEndpoint: '10.0.0.1:4420', ec: true, maxNvmeDevices: 12 },
        { name: 'n-b', failureDomains: ['fd2'], journalDeviceSerial: 'J-MISSING', nvmeEndpoint: '10.0.0.1:4421' },
      ],
    });
    s2 = await joinServer(api.etcd, { server: { hostname: 'host-2' }, nodes: [{ name: 'n-c', failureDomains: ['fd1', 'fd3'] }], present: false });
    await reportInventory(api.etcd, s1.server.UUID, {
      facts: {},
      devices: [
        { serial: 'D1', sizeBytes: '1000' },
        { serial: 'D2', sizeBytes: '9007199254740993' }, // past 2^53: must stay exact
        { serial: 'D3', sizeBytes: '5000' }, // unmanaged
        { serial: 'D4', sizeBytes: '7000', present: false }, // managed but gone: no storage
        { serial: 'J1', sizeBytes: '300' },
      ],
    });
  });
  after(async () => {
    await api?.close();
  });

  const list = async (query = '') => {
    const res = await api.get(`/api/v2/nodes${query}`, api.adminToken);
    assert.equal(res.status, 200, `${query}: ${JSON.stringify(res.body)}`);
    assert.deepEqual(Object.keys(res.body), ['nodes']);
    return res.body.nodes as any[];
  };
  const byName = async () => new Map((await list()).map((node) => [node.name, node]));

  test('lists every node with exactly the 22 fields and 14 statistics, typed for the wire', async () => {
    const nodes = await list();
    assert.equal(nodes.length, 3);
    for (const node of nodes) {
      assert.deepEqual(fieldsOf(node), NODE_FIELDS);
      for (const f of ['name', 'UUID', 'state', 'status', 'nvmeEndpoint', 'failureInfo', 'hostname', 'serverUUID', 'ETag', 'journalDeviceNotFound']) {
        assert.equal(typeof node[f], 'string', f);
      }
      for (const f of ['inLocalRebuild', 'ec', 'readOnly', 'permanentFailure']) assert.equal(typeof node[f], 'boolean', f);
      for (const f of ['localRebuildProgress', 'numManagedDevices', 'maxNvmeDevices', 'powerupProgress']) assert.equal(typeof node[f], 'number', f);
      assert.ok(Array.isArray(node.failureDomains));
      assert.match(node.ETag, /^\d+$/);
      assert.deepEqual(fieldsOf(node.statistics), [...BYTE_STATISTICS, ...NUMBER_STATISTICS].sort());
      for (const f of BYTE_STATISTICS) assert.match(node.statistics[f], /^\d+$/, f);
      for (const f of NUMBER_STATISTICS) assert.equal(typeof node.statistics[f], 'number', f);
      assert.equal(node.statistics.compressionRatio, 1);
      assert.deepEqual(fieldsOf(node.journalNvmeDevice), ['deviceSerial']);
      assert.deepEqual(node.journalRaidDevice, { deviceUUID: '', memberDeviceSerials: [] });
    }
  });

  test('maps the record, presence and devices', async () => {
    const nodes = await byName();
    const a = nodes.get('n-a');
    assert.equal(a.UUID, n(s1, 0).UUID);
    assert.equal(a.serverUUID, s1.server.UUID);
    assert.equal(a.hostname, 'host-1');
    assert.equal(a.state, 'Active');
    assert.equal(a.status, 'ConnectivityOK');
    assert.equal(a.failureInfo, '');
    assert.equal(a.nvmeEndpoint, '10.0.0.1:4420');
    assert.deepEqual(a.failureDomains, ['fd1']);
    assert.equal(a.ec, true);
    assert.equal(a.maxNvmeDevices, 12);
    assert.equal(a.numManagedDevices, 3);
    assert.equal(a.statistics.managedPhysicalStorage, '9007199254741993', 'present data devices only, exact past 2^53');
    for (const f of BYTE_STATISTICS.slice(1)) assert.equal(a.statistics[f], '0', f);
    assert.deepEqual(a.journalNvmeDevice, { deviceSerial: 'J1' });
    assert.equal(a.journalDeviceNotFound, '');

    const b = nodes.get('n-b');
    assert.equal(b.state, 'Active');
    assert.equal(b.numManagedDevices, 0);
    assert.equal(b.statistics.managedPhysicalStorage, '0');
    assert.deepEqual(b.journalNvmeDevice, { deviceSerial: 'J-MISSING' });
    assert.equal(b.journalDeviceNotFound, 'J-MISSING', 'configured journal the server does not report');

    const c = nodes.get('n-c');
    assert.equal(c.state, 'Inactive');
    assert.equal(c.status, 'ConnectivityProblem');
    assert.notEqual(c.failureInfo, '');
    assert.deepEqual(c.journalNvmeDevice, { deviceSerial: '' });
    assert.equal(c.journalDeviceNotFound, '');
  });

  test('GET by UUID equals the list item; ETag is the node record revision', async () => {
    const uuid = n(s1, 1).UUID;
    const res = await api.get(`/api/v2/nodes/${uuid}`, api.adminToken);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, (await list()).find((node) => node.UUID === uuid));
    assert.equal(res.body.ETag, (await api.etcd.get(keys.node(uuid)).exec()).kvs[0]?.mod_revision);
  });

  test('filters: name, UUID, failureDomain; none or exactly one', async () => {
    const names = async (query: string) => (await list(query)).map((node) => node.name).sort();
    assert.deepEqual(await names('?name=n-b'), ['n-b']);
    assert.deepEqual(await names(`?UUID=${n(s2, 0).UUID}`), ['n-c']);
    assert.deepEqual(await names('?failureDomain=fd1'), ['n-a', 'n-c']);
    assert.deepEqual(await names('?failureDomain=fd3'), ['n-c']);
    assert.deepEqual(await names('?failureDomain=none'), []);
    assert.deepEqual(await names('?Name=n-b&uuid=x&failuredomain=fd2'), ['n-a', 'n-b', 'n-c'], 'names are case-sensitive; unknown ignored');
    assert.deepEqual(await names('?name=&failureDomain=fd2'), ['n-b'], 'an empty value is not a filter');
  });

  test('several filters (or a repeated one) are a 400', async () => {
    for (const query of ['?name=n-a&UUID=x', '?name=n-a&failureDomain=fd1', '?UUID=x&failureDomain=fd1&name=y', '?name=a&name=b']) {
      const res = await api.get(`/api/v2/nodes${query}`, api.adminToken);
      assert.equal(res.status, 400, query);
      assert.equal(res.body.code, 3);
      assert.equal(res.body.error, res.body.message);
    }
  });

  test('unknown UUID is a 404 with the JSON error body', async () => {
    const res = await api.get('/api/v2/nodes/11111111-1111-1111-1111-111111111111', api.adminToken);
    assert.equal(res.status, 404);
    assert.deepEqual(fieldsOf(res.body), ['code', 'error', 'message']);
    assert.equal(res.body.code, 5);
  });

  test('401 without a token, 403 for a project viewer, 200 for a cluster viewer', async () => {
    for (const path of ['/api/v2/nodes', `/api/v2/nodes/${n(s1, 0).UUID}`]) {
      assert.equal((await api.get(path)).status, 401, path);
      const denied = await api.get(path, api.projectViewerToken);
      assert.equal(denied.status, 403, path);
      assert.equal(denied.body.code, 7);
      assert.equal((await api.get(path, api.clusterViewerToken)).status, 200, path);
    }
  });

  test('state follows presence: deleting the presence key makes the nodes Inactive', async () => {
    await markAbsent(api.etcd, s1.server.UUID);
    let nodes = await byName();
    assert.equal(nodes.get('n-a').state, 'Inactive');
    assert.equal(nodes.get('n-a').status, 'ConnectivityProblem');
    assert.equal(nodes.get('n-b').state, 'Inactive');

    // Presence lists only the nodes the agent serves: the other stays Inactive.
    await markPresent(api.etcd, s1.server.UUID, [n(s1, 0).UUID]);
    nodes = await byName();
    assert.equal(nodes.get('n-a').state, 'Active');
    assert.equal(nodes.get('n-b').state, 'Inactive');

    await markPresent(api.etcd, s1.server.UUID, s1.server.nodeUUIDs);
    assert.equal((await byName()).get('n-b').state, 'Active');
  });

  test('the limit of commands in progress is part of the write: a request that counted before another command was recorded checks again and gets 429', async () => {
    const busy = await joinServer(api.etcd, { server: { hostname: 'busy' }, nodes: [{ name: 'busy-1' }, { name: 'busy-2' }] });
    const [first, second] = busy.server.nodeUUIDs as [string, string];
    // The first request stops between its count and its write until the second has been recorded.
    let reached!: () => void;
    let release!: () => void;
    const atCheck = new Promise<void>((r) => (reached = r));
    const paused = new Promise<void>((r) => (release = r));
    let calls = 0;
    const copies = {
      onlyCopyOn: async () => {
        if (calls++ === 0) {
          reached();
          await paused;
        }
        return [];
      },
    };
    const service = new NodeCommandsService({ inventory: new InventoryReader(api.cache), copies, store: new NodeCommandsStore(api.etcd), events: { prepare: async () => null }, maxInProgress: 1 });
    const slow = service.stop(first, { force: false });
    await atCheck;
    await service.stop(second, { force: true });
    release();
    await assert.rejects(slow, (err: unknown) => err instanceof StrataError && err.code === 'TOO_MANY_REQUESTS');
    assert.equal(await api.etcd.get(keys.nodeCommand(first)).string(), null, 'never more commands in progress than the limit');
    assert.notEqual(await api.etcd.get(keys.nodeCommand(second)).string(), null);
    await markAbsent(api.etcd, busy.server.UUID);
  });
});
