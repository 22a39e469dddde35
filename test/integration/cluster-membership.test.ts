// Issue acceptance: two agents with fixture sysfs trees join one control plane (all real
// processes, real etcd); servers, nodes and devices are listed with the right fields; a killed
// agent's node goes Inactive within TTL + 1 s; restarted, it returns Active with the same UUIDs.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { isIP } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { removeDir, spawnDaemon, startControlPlaneProcess, type ControlPlaneProcess, type DaemonProcess } from '../helpers/processes.js';
import { createFakeSysfs, type FakeSysfs } from '../helpers/sysfs-fixture.js';
import { waitUntil } from '../helpers/wait.js';

const TTL_SECONDS = 2;
const GiB = 1024n ** 3n;

interface Fixture {
  readonly hostname: string;
  readonly sysfs: FakeSysfs;
  readonly stateDir: string;
  readonly serials: { data: string[]; journal: string; spare: string };
}

describe('two agents join one control plane', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  const fixtures: Fixture[] = [];
  const agents = new Map<string, DaemonProcess>();

  function makeFixture(index: number): Fixture {
    const sysfs = createFakeSysfs();
    const serial = (n: number) => `STRATA-${index}-${n}`;
    // Controllers deliberately out of serial order (the kernel does not keep it).
    sysfs.addController({ name: 'nvme1', serial: serial(0), model: 'Strata Test SSD', firmware: 'FW1', pciAddress: `0000:0${index}:00.0`, numa: { value: index, at: 'device' }, namespaces: [{ name: 'nvme1n1', sectors: (100n * GiB) / 512n }] });
    sysfs.addController({ name: 'nvme0', serial: serial(1), model: 'Strata Test SSD', firmware: 'FW1', pciAddress: `0000:0${index}:01.0`, numa: { value: index, at: 'controller' }, namespaces: [{ name: 'nvme0n1', sectors: (200n * GiB) / 512n }] });
    sysfs.addController({ name: 'nvme2', serial: serial(2), model: 'Journal SSD', pciAddress: `0000:0${index}:02.0`, namespaces: [{ name: 'nvme2n1', sectors: (16n * GiB) / 512n }] });
    sysfs.addController({ name: 'nvme3', serial: serial(3), model: 'Spare SSD', pciAddress: `0000:0${index}:03.0`, namespaces: [{ name: 'nvme3n1', sectors: (50n * GiB) / 512n }] });
    sysfs.addController({ name: 'nvme4', serial: `FABRIC-${index}`, transport: 'tcp', namespaces: [{ name: 'nvme4n1', sectors: 1024 }] });
    if (index === 0) sysfs.addTpm('tpm0', 2);
    // Only built with NVME_TARGET_TCP_TLS (Debian 13's 6.12, not 6.1): storage-0 "has" TLS.
    if (index === 0) sysfs.write(join('module', 'nvmet_tcp', 'parameters', 'tls_handshake_timeout'), '10\n');
    return {
      hostname: `storage-${index}`,
      sysfs,
      stateDir: mkdtempSync(join(tmpdir(), `strata-agent-${index}-`)),
      serials: { data: [serial(0), serial(1)], journal: serial(2), spare: serial(3) },
    };
  }

  function startAgent(fixture: Fixture): DaemonProcess {
    const agent = spawnDaemon('agent/main.js', [
      '--etcd-endpoints', etcd.endpoint,
      '--control-plane-endpoints', plane.grpcEndpoint,
      '--state-dir', fixture.stateDir,
      '--sysfs-root', fixture.sysfs.root,
      '--mounts-path', fixture.sysfs.mountsPath,
      '--swaps-path', fixture.sysfs.swapsPath,
      '--hostname', fixture.hostname,
      '--advertise-address', '127.0.0.1',
      // Two agents on one machine: each discovery controller on a free port of its own.
      '--discovery-listen-address', '127.0.0.1',
      '--discovery-port', '0',
      '--data-devices', fixture.serials.data.join(','),
      '--journal-device', fixture.serials.journal,
      '--lease-ttl-seconds', String(TTL_SECONDS),
      '--log-level', 'debug',
    ]);
    agents.set(fixture.hostname, agent);
    return agent;
  }

  async function api<T>(path: string): Promise<T> {
    const res = await fetch(`${plane.apiUrl}${path}`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } });
    assert.equal(res.status, 200, `${path}: ${res.status}`);
    return (await res.json()) as T;
  }
  type Node = { UUID: string; name: string; hostname: string; state: string; serverUUID: string; numManagedDevices: number; journalNvmeDevice: { deviceSerial: string }; statistics: { managedPhysicalStorage: string } };
  type Server = { UUID: string; name: string; NodesUUIDs: string[]; ProductVersion: string; tpm2IsSupported: boolean; health: string; state: string };
  type Device = { serial: string; model: string; size: string; numaNodeID: string; serverUUID: string; nodeUUID: string; deviceUsage: string; state: string };
  const nodeOf = async (hostname: string) => (await api<{ nodes: Node[] }>('/api/v2/nodes')).nodes.find((n) => n.hostname === hostname);

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    fixtures.push(makeFixture(0), makeFixture(1));
    for (const fixture of fixtures) startAgent(fixture);
  });
  after(async () => {
    for (const agent of agents.values()) await agent.stop();
    await plane.stop();
    await etcd.stop();
    for (const f of fixtures) {
      f.sysfs.cleanup();
      removeDir(f.stateDir);
    }
    removeDir(plane.stateDir);
  });

  it('each agent reports its kernel capabilities, measured from its kernel (GET /api/v2/kernelCapabilities)', async () => {
    type Row = { serverUUID: string; name: string; NodesUUIDs: string[]; kernel: string; measured: boolean; capabilities: Record<string, boolean> };
    const rows = await waitUntil(async () => {
      const list = (await api<{ servers: Row[] }>('/api/v2/kernelCapabilities')).servers;
      return list.length === 2 && list.every((r) => r.measured) ? list : undefined;
    }, 'both agents reported their kernel capabilities', 15_000);
    const byName = new Map(rows.map((r) => [r.name, r]));
    assert.deepEqual([...byName.keys()].sort(), ['storage-0', 'storage-1']);
    for (const row of rows) {
      assert.deepEqual(Object.keys(row.capabilities).sort(), ['dmVdo', 'nvmeTcpTls', 'nvmetInBandAuth', 'tlshd', 'ublk']);
      assert.equal(row.NodesUUIDs.length, 1);
      assert.ok(row.kernel.length > 0, 'the kernel release is reported');
      // This machine's kernel has no nvmet (configfs): no in-band authentication to offer.
      assert.equal(row.capabilities['nvmetInBandAuth'], false);
    }
    assert.equal(byName.get('storage-0')?.capabilities['nvmeTcpTls'], true, 'read from the fixture sysfs of storage-0');
    assert.equal(byName.get('storage-1')?.capabilities['nvmeTcpTls'], false);
  });

  it('lists both servers, their nodes and their NVMe devices with the reported facts', async () => {
    const devices = await waitUntil(async () => {
      const list = (await api<{ NvmeDevices: Device[] }>('/api/v2/nvmeDevices')).NvmeDevices;
      const nodes = (await api<{ nodes: Node[] }>('/api/v2/nodes')).nodes;
      return list.length === 8 && nodes.length === 2 && nodes.every((n) => n.state === 'Active') ? list : undefined;
    }, 'both agents reported', 15_000);

    const { servers } = await api<{ servers: Server[] }>('/api/v2/servers');
    assert.deepEqual(servers.map((s) => s.name).sort(), ['storage-0', 'storage-1']);
    for (const server of servers) {
      assert.equal(server.state, 'Enabled');
      assert.equal(server.health, 'OK');
      assert.equal(server.NodesUUIDs.length, 1);
      assert.equal(server.ProductVersion, '0.1.0');
      assert.equal(server.tpm2IsSupported, server.name === 'storage-0');
    }

    const { nodes } = await api<{ nodes: Node[] }>('/api/v2/nodes');
    for (const fixture of fixtures) {
      const node = nodes.find((n) => n.hostname === fixture.hostname)!;
      const server = servers.find((s) => s.name === fixture.hostname)!;
      assert.equal(node.serverUUID, server.UUID);
      assert.deepEqual(server.NodesUUIDs, [node.UUID]);
      assert.equal(node.numManagedDevices, 2);
      assert.equal(node.journalNvmeDevice.deviceSerial, fixture.serials.journal);
      assert.equal(node.statistics.managedPhysicalStorage, String(300n * GiB));

      const mine = devices.filter((d) => d.serverUUID === server.UUID).sort((a, b) => a.serial.localeCompare(b.serial));
      assert.deepEqual(mine.map((d) => [d.serial, d.deviceUsage, d.nodeUUID === node.UUID, d.state]), [
        [fixture.serials.data[0], 'Data', true, 'Healthy'],
        [fixture.serials.data[1], 'Data', true, 'Healthy'],
        [fixture.serials.journal, 'Journal', true, 'Healthy'],
        [fixture.serials.spare, 'UnManaged', false, 'None'],
      ]);
      assert.equal(mine[0]!.size, String(100n * GiB));
      assert.equal(mine[1]!.size, String(200n * GiB));
      assert.equal(mine[0]!.model, 'Strata Test SSD');
      assert.equal(mine[0]!.numaNodeID, String(fixtures.indexOf(fixture)));
    }
    assert.ok(!devices.some((d) => d.serial.startsWith('FABRIC')), 'fabric-attached controllers are not inventoried');

    // Each agent's discovery controller listens, so its endpoint is advertised, and it is each
    // node's NVMe/TCP endpoint too (volumes have their own ports; discovery refers a host to
    // them): every nvmeEndpoint parses as IP:port, as the CSI driver and Cinder require.
    const info = await api<{ discoveryEndpoints: string[]; nvmeEndpoints: string[] }>('/api/v2/clusterinfo');
    assert.equal(info.discoveryEndpoints.length, 2, JSON.stringify(info.discoveryEndpoints));
    assert.ok(info.discoveryEndpoints.every((e) => /^127\.0\.0\.1:\d+$/.test(e)), JSON.stringify(info.discoveryEndpoints));
    assert.deepEqual([...info.nvmeEndpoints].sort(), [...info.discoveryEndpoints].sort());
    const ipPort = (e: string) => {
      const m = /^(.+):(\d+)$/.exec(e);
      return m !== null && isIP(m[1]!.replace(/^\[(.*)\]$/, '$1')) !== 0 && Number(m[2]) > 0 && Number(m[2]) < 65536;
    };
    assert.ok(info.nvmeEndpoints.every(ipPort), JSON.stringify(info.nvmeEndpoints));
    for (const n of nodes as (Node & { nvmeEndpoint: string })[]) assert.ok(ipPort(n.nvmeEndpoint), JSON.stringify(n));
  });

  it('a killed agent\'s node goes Inactive within TTL + 1 s, and returns Active with the same UUIDs', async () => {
    const fixture = fixtures[0]!;
    const before = await waitUntil(async () => ((await nodeOf(fixture.hostname))?.state === 'Active' ? nodeOf(fixture.hostname) : undefined), 'node active', 15_000);

    const killedAt = Date.now();
    await agents.get(fixture.hostname)!.kill();
    await waitUntil(async () => ((await nodeOf(fixture.hostname))?.state === 'Inactive' ? true : undefined), 'node inactive', (TTL_SECONDS + 3) * 1000);
    const elapsed = Date.now() - killedAt;
    assert.ok(elapsed <= (TTL_SECONDS + 1) * 1000, `Inactive after ${elapsed} ms (TTL ${TTL_SECONDS} s)`);

    const { servers } = await api<{ servers: Server[] }>('/api/v2/servers');
    assert.equal(servers.find((s) => s.name === fixture.hostname)!.health, 'Error');
    const cluster = await api<{ health: { state: string; numInactiveNodes: number }; currentMaxReplicas: number }>('/api/v2/cluster');
    assert.equal(cluster.health.state, 'Warning');
    assert.equal(cluster.health.numInactiveNodes, 1);
    assert.equal(cluster.currentMaxReplicas, 1);
    assert.equal((await nodeOf(fixtures[1]!.hostname))?.state, 'Active', 'the other node is unaffected');

    startAgent(fixture);
    const after = await waitUntil(async () => {
      const node = await nodeOf(fixture.hostname);
      return node?.state === 'Active' ? node : undefined;
    }, 'node active again', 15_000);
    assert.equal(after.UUID, before!.UUID);
    assert.equal(after.serverUUID, before!.serverUUID);
    assert.equal((await api<{ nodes: Node[] }>('/api/v2/nodes')).nodes.length, 2, 'no duplicate node after restart');
    const cluster2 = await api<{ health: { state: string }; currentMaxReplicas: number }>('/api/v2/cluster');
    assert.equal(cluster2.health.state, 'OK');
    assert.equal(cluster2.currentMaxReplicas, 2);
  });
});
