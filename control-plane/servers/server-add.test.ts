// POST /api/v2/servers (spec 4.12; issue 15 item 2) against real etcd processes and a real control
// plane and agents: the add makes the new server's etcd a learner member; the test then starts that
// etcd (127.0.0.2, joining with --initial-cluster-state existing), the active cluster manager
// promotes it once it caught up, and the new server's agent (serverUUID set, talking to the new
// member) joins: its node is Unattached (extendCluster false) and the server Enabled, its
// etcdMemberInfo the real member's. Bad input, conflicts, etcd's own refusals, and a control plane
// killed between the record and the member add are covered too; `strata servers add` as well.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { packageRoot } from '../../lib/paths.js';
import { freePort } from '../../lib/ports.js';
import type { ServerRecord } from '../../lib/records.js';
import { startEtcdCluster, type EtcdCluster, type EtcdMemberProcess } from '../../test/helpers/etcd-cluster.js';
import { removeDir, spawnDaemon, startControlPlaneProcess, type ControlPlaneProcess, type DaemonProcess } from '../../test/helpers/processes.js';
import { createFakeSysfs, type FakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { waitUntil } from '../../test/helpers/wait.js';

const CLI = join(packageRoot, 'dist', 'cli', 'main.js');

interface ServerWire {
  UUID: string;
  name: string;
  state: string;
  NodesUUIDs: string[];
  ServerEndpoints: string[];
  etcdMemberInfo: { state: string; role: string };
}
interface NodeWire {
  UUID: string;
  state: string;
  serverUUID: string;
}
type Reply<T> = { status: number; body: T & { code?: number; message?: string } };

describe('adding a server: etcd member add, learner promotion, the agent joining', () => {
  let etcd: EtcdCluster;
  let plane: ControlPlaneProcess;
  let kv: Etcd3;
  const agents: DaemonProcess[] = [];
  const cleanups: Array<() => void> = [];

  async function call<T>(method: string, path: string, body?: unknown, token: string | null = plane.adminToken()): Promise<Reply<T>> {
    const res = await fetch(`${plane.apiUrl}${path}`, {
      method,
      headers: { ...(token ? { Authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as T & { code?: number; message?: string } };
  }
  const add = (body: unknown) => call<ServerWire>('POST', '/api/v2/servers', body);
  const server = async (uuid: string) => (await call<ServerWire>('GET', `/api/v2/servers/${uuid}`)).body;
  const members = async () => (await kv.cluster.memberList({})).members;
  const record = async (uuid: string) => {
    const text = await kv.get(keys.server(uuid)).string();
    return text ? (JSON.parse(text) as ServerRecord) : undefined;
  };

  function startAgent(serverUUID: string, address: string, etcdEndpoint: string, hostname: string): DaemonProcess {
    const sysfs: FakeSysfs = createFakeSysfs();
    sysfs.addController({ name: 'nvme0', serial: `ADD-${hostname}`, pciAddress: '0000:01:00.0', namespaces: [{ name: 'nvme0n1', sectors: 1 << 21 }] });
    const stateDir = mkdtempSync(join(tmpdir(), 'strata-agent-add-'));
    cleanups.push(() => sysfs.cleanup(), () => removeDir(stateDir));
    const agent = spawnDaemon('agent/main.js', [
      '--etcd-endpoints', etcdEndpoint,
      '--control-plane-endpoints', plane.grpcEndpoint,
      '--server-uuid', serverUUID,
      '--state-dir', stateDir,
      '--sysfs-root', sysfs.root,
      '--mounts-path', sysfs.mountsPath,
      '--swaps-path', sysfs.swapsPath,
      '--hostname', hostname,
      '--advertise-address', address,
      '--discovery-listen-address', '127.0.0.1',
      '--discovery-port', '0',
      '--lease-ttl-seconds', '2',
    ]);
    agents.push(agent);
    return agent;
  }

  before(async () => {
    etcd = await startEtcdCluster(1);
    kv = createEtcdClient(etcd.endpoints());
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoints().join(','), leaseTtlSeconds: 5 });
  });
  after(async () => {
    for (const agent of agents) await agent.stop();
    kv?.close();
    await plane?.stop();
    if (plane) removeDir(plane.stateDir);
    await etcd?.stop();
    for (const cleanup of cleanups) cleanup();
  });

  it('bad input is 400 (several or no endpoints, not a URL, no UUID), no token 401; nothing is written', async () => {
    const uuid = randomUUID();
    const cases: Array<[unknown, RegExp]> = [
      [{ serverEndpoints: ['http://127.0.0.9:2380', 'http://127.0.0.10:2380'], serverUUID: uuid }, /exactly one endpoint \(got 2\)/],
      [{ serverEndpoints: [], serverUUID: uuid }, /serverEndpoints is required/],
      [{ serverUUID: uuid }, /serverEndpoints is required/],
      [{ serverEndpoints: ['127.0.0.9:2380'], serverUUID: uuid }, /not an etcd peer URL/],
      [{ serverEndpoints: ['http://127.0.0.9'], serverUUID: uuid }, /not an etcd peer URL/],
      [{ serverEndpoints: ['http://127.0.0.9:2380'] }, /serverUUID is required/],
      [{ serverEndpoints: ['http://127.0.0.9:2380'], serverUUID: 'x' }, /must be a UUID/],
      [{ serverEndpoints: 'http://127.0.0.9:2380', serverUUID: uuid }, /must be an array/],
    ];
    for (const [body, message] of cases) {
      const reply = await add(body);
      assert.equal(reply.status, 400, JSON.stringify(body));
      assert.equal(reply.body.code, 3);
      assert.match(reply.body.message ?? '', message);
    }
    assert.equal((await call('POST', '/api/v2/servers', { serverEndpoints: ['http://127.0.0.9:2380'], serverUUID: uuid }, null)).status, 401);
    assert.equal(await record(uuid), undefined);
    assert.equal((await members()).length, 1);
  });

  it('an endpoint in use is 409 unless reuseIP; a peer URL etcd already has is 409 even with reuseIP (etcd refuses); nothing is left', async () => {
    const existing = etcd.members[0]!;
    const uuid = randomUUID();
    const sameHost = await add({ serverEndpoints: [`http://127.0.0.1:${await freePort()}`], serverUUID: uuid });
    assert.equal(sameHost.status, 409);
    assert.match(sameHost.body.message ?? '', /already used by etcd member m0; give reuseIP/);
    const sameURL = await add({ serverEndpoints: [existing.peerURL], serverUUID: uuid, reuseIP: true });
    assert.equal(sameURL.status, 409);
    assert.equal(sameURL.body.code, 6);
    assert.equal(await record(uuid), undefined, 'no server record');
    assert.equal((await members()).length, 1, 'no member');
  });

  let added: EtcdMemberProcess;
  let addedUUID: string;
  it('adds the new etcd member as a learner and records the server (Creating; etcdMemberInfo: Learner, not started)', async () => {
    addedUUID = randomUUID();
    const m0 = etcd.members[0]!;
    added = await etcd.newMember('m1', '127.0.0.2', '');
    added.initialCluster = `m0=${m0.peerURL},m1=${added.peerURL}`;
    const reply = await add({ serverEndpoints: [added.peerURL], serverUUID: addedUUID.toUpperCase(), extendCluster: 'false' });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.equal(reply.body.UUID, addedUUID);
    assert.equal(reply.body.state, 'Creating');
    assert.deepEqual(reply.body.ServerEndpoints, ['127.0.0.2']);
    assert.deepEqual(reply.body.etcdMemberInfo, { state: 'Unhealthy', role: 'Learner' });
    const member = (await members()).find((m) => (m.peerURLs ?? []).includes(added.peerURL));
    assert.ok(member, 'etcd lists the new member');
    assert.equal(member.isLearner, true, 'added as a learner (etcd 3.4+)');
    assert.equal((await record(addedUUID))?.added?.etcdMemberID, String(member.ID));
    assert.equal((await add({ serverEndpoints: [`http://127.0.0.3:${await freePort()}`], serverUUID: addedUUID })).status, 409, 'the UUID exists');
  });

  it('the new etcd joins, is promoted once caught up; its agent joins through it: node Unattached, server Enabled, etcdMemberInfo the real member', async () => {
    await added.start();
    await waitUntil(async () => ((await members()).find((m) => (m.peerURLs ?? []).includes(added.peerURL))?.isLearner === false ? true : undefined), 'the learner promoted', 30_000, 200);
    startAgent(addedUUID, '127.0.0.2', added.endpoint, 'added-host');
    let seen: unknown;
    const node = await waitUntil(async () => {
      const reply = await call<{ nodes: NodeWire[] }>('GET', '/api/v2/nodes');
      seen = reply;
      const nodes = reply.body.nodes.filter((n) => n.serverUUID === addedUUID);
      return nodes.length === 1 && nodes[0]!.state !== 'Inactive' ? nodes[0] : undefined;
    }, () => `the added server's node (${JSON.stringify(seen)}); agent log: ${JSON.stringify(agents.at(-1)?.logs.slice(-8).map((r) => [r['msg'], r['err'] ?? r['reason'] ?? '']))}`, 20_000);
    assert.equal(node.state, 'Unattached', 'extendCluster false: the node joins Unattached');
    const joined = await waitUntil(async () => {
      const s = await server(addedUUID);
      return s.state === 'Enabled' && s.etcdMemberInfo.state === 'Healthy' ? s : undefined;
    }, 'the server Enabled with a healthy member', 20_000);
    assert.equal(joined.name, 'added-host');
    assert.deepEqual(joined.NodesUUIDs, [node.UUID]);
    assert.deepEqual(joined.etcdMemberInfo, { state: 'Healthy', role: 'Follower' });
  });

  function strata(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'] ?? '', STRATA_ENDPOINT: plane.apiUrl, STRATA_TOKEN: plane.adminToken() }, timeout: 30_000 }, (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }));
    });
  }

  let learnerUUID: string;
  it('strata servers add --extend-cluster: a learner whose server\'s node joins Active; a second learner is refused by etcd (409) and leaves nothing', async () => {
    learnerUUID = randomUUID();
    const peer = `http://127.0.0.3:${await freePort()}`;
    // Right after a promotion etcd refuses reconfigurations for a while ("unhealthy cluster"):
    // 503 with Retry-After, nothing written; the add is simply sent again.
    let refusals = 0;
    const run = await waitUntil(async () => {
      const attempt = await strata(['servers', 'add', peer, '--uuid', learnerUUID, '--extend-cluster', '-o', 'json']);
      if (attempt.code === 0) return attempt;
      assert.match(attempt.stderr, /unhealthy cluster; retry \(HTTP 503/);
      assert.equal(await record(learnerUUID), undefined, 'a 503 leaves no record');
      refusals++;
      return undefined;
    }, 'the add accepted', 30_000, 1000);
    assert.ok(refusals >= 0);
    const created = JSON.parse(run.stdout) as ServerWire;
    assert.equal(created.UUID, learnerUUID);
    assert.deepEqual(created.etcdMemberInfo, { state: 'Unhealthy', role: 'Learner' });
    // Its etcd is never started here: the agent uses the cluster's existing member.
    startAgent(learnerUUID, '127.0.0.3', etcd.members[0]!.endpoint, 'extended-host');
    const node = await waitUntil(async () => (await call<{ nodes: NodeWire[] }>('GET', '/api/v2/nodes')).body.nodes.find((n) => n.serverUUID === learnerUUID && n.state !== 'Inactive'), 'the extended node', 20_000);
    assert.equal(node.state, 'Active', 'extendCluster true: the node joins Active');
    assert.equal((await server(learnerUUID)).state, 'Creating', 'its learner has not been promoted');

    const third = randomUUID();
    const refused = await add({ serverEndpoints: [`http://127.0.0.4:${await freePort()}`], serverUUID: third });
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    assert.match(refused.body.message ?? '', /too many learner members/);
    assert.equal(await record(third), undefined, 'the refused add left no record');
    const usage = await strata(['servers', 'add', 'not-a-url', '--uuid', third]);
    assert.equal(usage.code, 1);
    assert.match(usage.stderr, /not an etcd peer URL/);
  });

  it('a server recorded without its member (a control plane killed in between) gets its member from the active cluster manager', async () => {
    // Free the learner slot (etcd 3.4 allows one learner) by removing the never-started learner.
    const learner = (await members()).find((m) => m.isLearner)!;
    await kv.cluster.memberRemove({ ID: learner.ID });
    const uuid = randomUUID();
    const peer = `http://127.0.0.5:${await freePort()}`;
    // Written a minute ago: the add that wrote it is long dead (a live one finishes in seconds).
    const orphan: ServerRecord = {
      UUID: uuid, name: '', hostname: '', nodeUUIDs: [], endpoints: ['127.0.0.5'], createdAt: new Date(Date.now() - 60_000).toISOString(),
      added: { etcdPeerURL: peer, etcdMemberID: '', extendCluster: false, promotedAt: '' },
    };
    await kv.put(keys.server(uuid)).value(JSON.stringify(orphan));
    const member = await waitUntil(async () => (await members()).find((m) => (m.peerURLs ?? []).includes(peer)), 'the member added by the leader', 15_000);
    assert.equal(member.isLearner, true);
    await waitUntil(async () => ((await record(uuid))?.added?.etcdMemberID === String(member.ID) ? true : undefined), 'the record carries the member ID');
    // etcdMemberInfo is measured at most every 2 s.
    await waitUntil(async () => ((await server(uuid)).etcdMemberInfo.role === 'Learner' ? true : undefined), 'the learner shown', 5000);
    assert.deepEqual((await server(uuid)).etcdMemberInfo, { state: 'Unhealthy', role: 'Learner' });
  });
});
