// GET /api/v2/kernelCapabilities and the one capability check (KernelCapabilitiesService.require)
// against a real etcd and the API harness.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { StrataError } from '../../lib/errors.js';
import { joinServer, reportInventory, startApiHarness, type ApiHarness, type JoinedServer } from '../../test/helpers/records.js';
import { InventoryReader } from '../inventory/inventory-reader.js';
import { createKernelCapabilitiesRoutes } from './kernel-capabilities-routes.js';
import { KernelCapabilitiesService } from './kernel-capabilities-service.js';

const ALL = { nvmetInBandAuth: true, nvmeTcpTls: true, tlshd: true, ublk: true, dmVdo: true };
const NONE = { nvmetInBandAuth: false, nvmeTcpTls: false, tlshd: false, ublk: false, dmVdo: false };

describe('kernel capabilities API and check', () => {
  let api: ApiHarness;
  let service: KernelCapabilitiesService;
  let trixie: JoinedServer;
  let bookworm: JoinedServer;
  let silent: JoinedServer;

  before(async () => {
    api = await startApiHarness((_etcd, auth, cache) => {
      service = new KernelCapabilitiesService(new InventoryReader(cache));
      return [createKernelCapabilitiesRoutes({ auth, capabilities: service })];
    });
    trixie = await joinServer(api.etcd, { server: { name: 'trixie' }, nodes: [{ name: 'trixie-n' }] });
    bookworm = await joinServer(api.etcd, { server: { name: 'bookworm' }, nodes: [{ name: 'bookworm-n' }] });
    silent = await joinServer(api.etcd, { server: { name: 'silent' }, nodes: [{ name: 'silent-n' }] });
    await reportInventory(api.etcd, trixie.server.UUID, { facts: { kernel: '6.12.117+deb13-amd64', kernelCapabilities: ALL } });
    await reportInventory(api.etcd, bookworm.server.UUID, { facts: { kernel: '6.1.0-56-amd64', kernelCapabilities: NONE } });
    await reportInventory(api.etcd, silent.server.UUID, { facts: { kernel: '6.12.117+deb13-amd64' } }); // an agent that predates capabilities
  });
  after(async () => {
    await api?.close();
  });

  test('lists each server’s kernel and measured capabilities; an unreported server has none (cluster read)', async () => {
    const res = await api.get('/api/v2/kernelCapabilities', api.clusterViewerToken);
    assert.equal(res.status, 200);
    const byName = new Map((res.body.servers as { name: string }[]).map((s) => [s.name, s]));
    assert.deepEqual(byName.get('trixie'), { serverUUID: trixie.server.UUID, name: 'trixie', NodesUUIDs: trixie.server.nodeUUIDs, kernel: '6.12.117+deb13-amd64', measured: true, capabilities: ALL });
    assert.deepEqual(byName.get('bookworm'), { serverUUID: bookworm.server.UUID, name: 'bookworm', NodesUUIDs: bookworm.server.nodeUUIDs, kernel: '6.1.0-56-amd64', measured: true, capabilities: NONE });
    assert.deepEqual(byName.get('silent'), { serverUUID: silent.server.UUID, name: 'silent', NodesUUIDs: silent.server.nodeUUIDs, kernel: '6.12.117+deb13-amd64', measured: false, capabilities: NONE });
    assert.equal((await api.get('/api/v2/kernelCapabilities', api.projectViewerToken)).status, 403);
    assert.equal((await api.get('/api/v2/kernelCapabilities')).status, 401);
  });

  test('require(): passes when every involved node has it; otherwise 400 naming exactly the nodes that lack it', async () => {
    await service.require('nvmetInBandAuth', 'enable in-band authentication', trixie.server.nodeUUIDs);
    await assert.rejects(service.require('nvmetInBandAuth', 'enable in-band authentication'), (err: unknown) => {
      assert.ok(err instanceof StrataError);
      assert.equal(err.code, 'KERNEL_CAPABILITY_MISSING');
      assert.equal(err.httpStatus, 400);
      assert.match(err.message, /^cannot enable in-band authentication: the kernel of nodes bookworm-n \(.*6\.1\.0-56-amd64\), silent-n \(.*not reported\) lacks NVMe target in-band authentication/);
      assert.ok(!err.message.includes('trixie-n'), 'a node that has it is not named');
      assert.deepEqual(err.details, [{ capability: 'nvmetInBandAuth', nodes: [bookworm.server.nodeUUIDs[0], silent.server.nodeUUIDs[0]] }]);
      return true;
    });
  });
});
