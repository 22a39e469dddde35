// Issue 3 acceptance: the volume state machine end to end — a real control plane (its own
// process), real etcd, and two real agents whose data path drives an nvmet tree in a temp
// directory (tests only: injected through startAgent, never a setting) with a file pool.
// Volumes go Creating → Available once the agents serve them, pass through Updating, snapshot,
// clone, delete; a control plane killed mid-create and an agent restart lose nothing.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveAgentConfig, agentSettings } from '../../agent/config.js';
import { startAgent, type RunningAgent } from '../../agent/agent.js';
import { loadConfig } from '../../lib/config.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../helpers/processes.js';
import { silentLogger } from '../helpers/silent-logger.js';
import { createFakeSysfs } from '../helpers/sysfs-fixture.js';
import { waitUntil } from '../helpers/wait.js';
import { createEmulatedStorageServer, removeEmulatedStorageServer, startEmulatedAgent, type EmulatedStorageServer } from '../kits/datapath/emulated-storage-server.js';

const GiB = 1024n ** 3n;
const HOST_NQN = 'nqn.2014-08.org.nvmexpress:uuid:2b2b7a7e-8d31-4f4e-9f64-1c2a3b4c5d6e';

type StorageServer = EmulatedStorageServer;

interface Volume {
  UUID: string;
  name: string;
  state: string;
  size: string;
  nodeList: string[];
  nsid: number;
  primaryNodeUUID: string;
  acl: { values: string[] };
  ETag: string;
  protectionState: string;
}

describe('volume lifecycle with agents (nvmet tree in a temp directory)', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  const servers: StorageServer[] = [];

  const startServerAgent = async (server: StorageServer) => {
    await startEmulatedAgent(server, etcd.endpoint, plane.grpcEndpoint);
  };

  async function api<T>(method: string, path: string, body?: unknown, expected = 200): Promise<T> {
    const res = await fetch(`${plane.apiUrl}/api/v2${path}`, {
      method,
      headers: { Authorization: `Bearer ${plane.adminToken()}`, 'Content-Type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    assert.equal(res.status, expected, `${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as T;
  }
  const getVolume = (uuid: string) => api<Volume>('GET', `/volumes/${uuid}`);
  const until = <T>(what: string, probe: () => Promise<T | undefined | false>, ms = 15_000) => waitUntil(probe, what, ms);
  const inState = (uuid: string, state: string) => until(`${uuid} ${state}`, async () => {
    const v = await getVolume(uuid);
    if (v.state === 'Failed' && state !== 'Failed') throw new Error(`volume failed: ${JSON.stringify(v)}`);
    return v.state === state ? v : undefined;
  });
  const serverOfNode = async (nodeUUID: string) => {
    const { nodes } = await api<{ nodes: { UUID: string; hostname: string }[] }>('GET', '/nodes');
    return servers.find((s) => s.hostname === nodes.find((n) => n.UUID === nodeUUID)?.hostname)!;
  };
  const subsystemDir = (server: StorageServer, nqn: string) => join(server.nvmetRoot, 'subsystems', nqn);

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    for (const hostname of ['storage-a', 'storage-b']) servers.push(createEmulatedStorageServer(hostname));
    for (const server of servers) await startServerAgent(server);
    await until('both nodes Active', async () => {
      const { nodes } = await api<{ nodes: { state: string }[] }>('GET', '/nodes');
      return nodes.length === 2 && nodes.every((n) => n.state === 'Active');
    });
  });
  after(async () => {
    for (const server of servers) await removeEmulatedStorageServer(server);
    await plane.stop();
    await etcd.stop();
    removeDir(plane.stateDir);
  });

  // Replicated volumes (md raid1 over NVMe/TCP) need the real kernel: test/e2e/replication.e2e.test.ts.
  it('serves a volume, then updates, snapshots, clones and deletes it', async () => {
    // Two servers with Active nodes: three replicas are more than the cluster can place now.
    const tooMany = await api<{ code: number; error: string }>('POST', '/projects/default/volumes', { name: 'db', size: '10GiB', replicaCount: 3 }, 400);
    assert.match(tooMany.error, /exceeds the cluster's current maximum of 2/);
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'db', size: '10GiB', replicaCount: 1, acl: { values: [HOST_NQN] } });
    assert.equal(created.state, 'Creating');
    const startedAt = Date.now();
    const volume = await inState(created.UUID, 'Available');
    const availableMs = Date.now() - startedAt;
    assert.ok(availableMs < 10_000, `Available after ${availableMs} ms`);
    assert.equal(volume.nodeList.length, 1);
    assert.equal(volume.protectionState, 'FullyProtected');
    assert.ok(volume.nsid > 0);

    // Both nodes export the same subsystem with the volume's namespace; the primary is optimized.
    const { subsystemNQN } = await api<{ subsystemNQN: string }>('GET', '/cluster');
    const nqn = `${subsystemNQN}:vol:${volume.UUID}`;
    for (const node of volume.nodeList) {
      const server = await serverOfNode(node);
      const subsystem = subsystemDir(server, nqn);
      assert.ok(existsSync(subsystem), `${server.hostname} exports ${nqn}`);
      const ns = join(subsystem, 'namespaces', String(volume.nsid));
      assert.equal(readFileSync(join(ns, 'device_uuid'), 'utf8').trim(), volume.UUID);
      assert.equal(readFileSync(join(ns, 'enable'), 'utf8').trim(), '1');
      assert.deepEqual(readdirSync(join(subsystem, 'allowed_hosts')), [HOST_NQN]);
      assert.equal(readFileSync(join(subsystem, 'attr_allow_any_host'), 'utf8').trim(), '0');
      const devicePath = readFileSync(join(ns, 'device_path'), 'utf8').trim();
      assert.equal(statSync(devicePath).size, Number(10n * GiB), 'backing file has the volume size');
      const ports = readdirSync(join(server.nvmetRoot, 'ports')).filter((p) => existsSync(join(server.nvmetRoot, 'ports', p, 'subsystems', nqn)));
      assert.equal(ports.length, 1, 'linked into exactly one port');
      const port = join(server.nvmetRoot, 'ports', ports[0]!);
      const ana = readFileSync(join(port, 'ana_groups', '1', 'ana_state'), 'utf8').trim();
      assert.equal(ana, node === volume.primaryNodeUUID ? 'optimized' : 'inaccessible');
      assert.equal(readlinkSync(join(port, 'subsystems', nqn)).endsWith(nqn), true);
    }

    // Update: ACL and size. Updating, then Available; the tree follows.
    await api('PUT', `/volumes/${volume.UUID}`, { acl: { values: ['ALLOW_ANY'] }, size: '12GiB' });
    const updated = await inState(volume.UUID, 'Available');
    assert.equal(updated.size, String(12n * GiB));
    assert.notEqual(updated.ETag, volume.ETag);
    for (const node of volume.nodeList) {
      const server = await serverOfNode(node);
      await until('ACL applied', async () => readFileSync(join(subsystemDir(server, nqn), 'attr_allow_any_host'), 'utf8').trim() === '1');
      const devicePath = readFileSync(join(subsystemDir(server, nqn), 'namespaces', String(volume.nsid), 'device_path'), 'utf8').trim();
      assert.equal(statSync(devicePath).size, Number(12n * GiB), 'backing file grew');
    }

    // Snapshot, then a clone of it, served where the snapshot is.
    const snapshot = await api<{ UUID: string; state: string }>('POST', '/projects/default/snapshots', { name: 'db-snap', sourceVolumeUUID: volume.UUID });
    await until('snapshot Available', async () => (await api<{ state: string }>('GET', `/projects/default/snapshots/${snapshot.UUID}`)).state === 'Available');
    const clone = await api<Volume>('POST', '/projects/default/volumes', { name: 'db-clone', sourceSnapshotUUID: snapshot.UUID, acl: { values: ['ALLOW_ANY'] } });
    const served = await inState(clone.UUID, 'Available');
    assert.ok(volume.nodeList.includes(served.nodeList[0]!), 'the clone lives where its snapshot is');

    // A volume with snapshots is not deleted (they live in its backing): snapshots first.
    const refused = await fetch(`${plane.apiUrl}/api/v2/volumes/${volume.UUID}`, { method: 'DELETE', headers: { Authorization: `Bearer ${plane.adminToken()}` } });
    assert.equal(refused.status, 400);
    assert.match(((await refused.json()) as { error: string }).error, /snapshot/);

    // Delete the clone, the snapshot and the volume: gone from the API, the tree and the pool.
    await api('DELETE', `/volumes/${clone.UUID}`);
    await until('clone gone', async () => (await fetch(`${plane.apiUrl}/api/v2/volumes/${clone.UUID}`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } })).status === 404);
    await api('DELETE', `/projects/default/snapshots/${snapshot.UUID}`);
    await until('snapshot gone', async () => (await fetch(`${plane.apiUrl}/api/v2/projects/default/snapshots/${snapshot.UUID}`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } })).status === 404);
    await api('DELETE', `/volumes/${volume.UUID}`);
    await until('volume gone', async () => (await fetch(`${plane.apiUrl}/api/v2/volumes/${volume.UUID}`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } })).status === 404);
    for (const server of servers) {
      assert.ok(!existsSync(subsystemDir(server, nqn)), `${server.hostname} no longer exports the volume`);
    }
    // The name is free again at once after delete.
    const again = await api<Volume>('POST', '/projects/default/volumes', { name: 'db', size: '1GiB' });
    await inState(again.UUID, 'Available');
    await api('DELETE', `/volumes/${again.UUID}`);
  });

  it('a control plane killed right after accepting a create, and an agent restarted, lose nothing', async () => {
    const created = await api<Volume>('POST', '/volumes', { name: 'survivor', size: '1GiB', projectName: 'default', acl: { values: ['ALLOW_ANY'] } });
    await plane.kill();
    // Restarted on the same address: the agents reconnect by themselves and report again.
    const [apiPort, grpcPort] = [new URL(plane.apiUrl).port, plane.grpcEndpoint.split(':')[1]].map(Number);
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, stateDir: plane.stateDir, apiPort, grpcPort });
    const volume = await inState(created.UUID, 'Available');
    assert.equal(volume.name, 'survivor');

    // Restarting an agent with a live volume changes nothing in its nvmet tree.
    const server = await serverOfNode(volume.nodeList[0]!);
    const before = JSON.stringify(snapshotTree(server.nvmetRoot));
    await server.agent!.stop();
    await startServerAgent(server);
    await inState(created.UUID, 'Available');
    assert.equal(JSON.stringify(snapshotTree(server.nvmetRoot)), before, 'the restart changed nothing in the nvmet tree');
    await api('DELETE', `/volumes/${created.UUID}`);
  });
});

describe('an agent on a host without the kernel NVMe target', () => {
  it('reports its volume Failed with the reason, never Served', async (t) => {
    if (existsSync('/sys/kernel/config/nvmet')) {
      t.skip('this host has nvmet: the real target would be changed');
      return;
    }
    const etcd = await startEtcd();
    const plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    const sysfs = createFakeSysfs();
    sysfs.addController({ name: 'nvme0', serial: 'PLAIN-SN0', namespaces: [{ name: 'nvme0n1', sectors: (200n * GiB) / 512n }] });
    const dirs = [mkdtempSync(join(tmpdir(), 'strata-plain-')), mkdtempSync(join(tmpdir(), 'strata-plain-pool-'))];
    let agent: RunningAgent | undefined;
    try {
      const config = resolveAgentConfig(
        loadConfig(agentSettings, {
          program: 'strata-agent', summary: 'test', env: {},
          argv: ['--etcd-endpoints', etcd.endpoint, '--control-plane-endpoints', plane.grpcEndpoint, '--state-dir', dirs[0]!, '--pool-dir', dirs[1]!,
            '--sysfs-root', sysfs.root, '--mounts-path', sysfs.mountsPath, '--swaps-path', sysfs.swapsPath, '--hostname', 'plain', '--lease-ttl-seconds', '5',
            '--data-devices', 'PLAIN-SN0', '--discovery-port', '0', '--discovery-listen-address', '127.0.0.1'],
        }),
      );
      agent = await startAgent(config, silentLogger('plain'));
      await agent.ready;
      const headers = { Authorization: `Bearer ${plane.adminToken()}`, 'Content-Type': 'application/json' };
      // The node's NVMe/TCP endpoint is its discovery controller (it answers hosts, with no volume
      // to refer them to), and a volume placed on it fails with the reason.
      const nodes = (await (await fetch(`${plane.apiUrl}/api/v2/nodes`, { headers })).json()) as { nodes: { nvmeEndpoint: string }[] };
      assert.equal(nodes.nodes.length, 1);
      assert.match(nodes.nodes[0]!.nvmeEndpoint, /^127\.0\.0\.1:\d+$/);
      const res = await fetch(`${plane.apiUrl}/api/v2/volumes`, { method: 'POST', headers, body: JSON.stringify({ name: 'nope', size: '1GiB', projectName: 'default' }) });
      const created = (await res.json()) as { UUID: string };
      const failed = await waitUntil(async () => {
        const v = (await (await fetch(`${plane.apiUrl}/api/v2/volumes/${created.UUID}`, { headers })).json()) as { state: string };
        return v.state === 'Failed' ? v : v.state === 'Available' ? assert.fail('a volume was reported Available on a host without nvmet') : undefined;
      }, 'volume Failed', 30_000);
      assert.equal(failed.state, 'Failed');
      const { events } = (await (await fetch(`${plane.apiUrl}/api/v2/events?componentType=Volume`, { headers })).json()) as { events: { EventName: string; Description: string }[] };
      assert.match(events.find((e) => e.EventName === 'VolumeFailed')?.Description ?? '', /no NVMe target \(nvmet\) in its kernel/);
    } finally {
      await agent?.stop();
      await plane.stop();
      await etcd.stop();
      sysfs.cleanup();
      for (const dir of [...dirs, plane.stateDir]) removeDir(dir);
    }
  });
});

/** The nvmet tree as path → content/link, to compare before and after. */
function snapshotTree(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isSymbolicLink()) out[path] = `-> ${readlinkSync(path)}`;
      else if (entry.isDirectory()) walk(path);
      else out[path] = readFileSync(path, 'utf8');
    }
  };
  walk(root);
  return out;
}
