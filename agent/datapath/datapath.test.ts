// The data path end to end on the host: a real etcd holding assignments as the active cluster
// manager writes them, the real agent (startAgent) with its data path on a plain directory
// standing in for configfs and a FilePool in a temp dir, and a fake control plane receiving the
// VolumeReports over gRPC.
import assert from 'node:assert/strict';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { ClusterRecord, VolumeAssignment } from '../../lib/records.js';
import { testAssignment } from '../../test/kits/datapath/test-assignment.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { startAgent, type RunningAgent } from '../agent.js';
import type { ConnectedHostsProbe } from './reconcile/connected-hosts.js';
import { NO_NVMET } from './datapath.js';
import { NvmetConfigfs } from './kernel/nvmet-configfs.js';
import { emulatedDataPath } from '../../test/kits/datapath/emulated-datapath.js';
import type { FakeControlPlane } from '../../test/kits/datapath/fake-control-plane.js';
import { startHostAgentHarness, type HostAgentHarness } from '../../test/kits/datapath/host-agent.js';

const CLUSTER: ClusterRecord = {
  UUID: 'c0ffee00-0000-4000-8000-000000000001',
  clusterName: 'test',
  subsystemNQN: 'nqn.2016-01.io.strata:cluster:c0ffee00',
  supportedMaxReplicas: 3,
  createdAt: new Date().toISOString(),
  bootstrappedBy: 'test',
};
const PREFIX = `${CLUSTER.subsystemNQN}:vol:`;
const V1 = '11111111-1111-4111-8111-111111111111';
const V2 = '22222222-2222-4222-8222-222222222222';
const V3 = '33333333-3333-4333-8333-333333333333';
const S1 = 'aaaaaaaa-1111-4111-8111-111111111111';
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000002';

function assignment(nodeUUID: string, volumeUUID: string, index: number, overrides: Partial<VolumeAssignment> = {}): VolumeAssignment {
  return testAssignment({ volumeUUID, nodeUUID, subsystemNQN: `${PREFIX}${volumeUUID}`, nsid: index, port: 20000 + index, acl: [H1], ...overrides });
}

const latest = (plane: FakeControlPlane, volumeUUID: string) => plane.latest(volumeUUID);

describe('data path end to end (etcd → agent → plain-directory configfs + FilePool → VolumeReport)', () => {
  let h: HostAgentHarness;
  let client: Etcd3;
  let plane: FakeControlPlane;
  let work: string;
  let agent: RunningAgent | undefined;
  const connections = new Map<number, string[]>();
  const probe: ConnectedHostsProbe = { connectionsByPort: async () => connections };

  before(async () => {
    h = await startHostAgentHarness(CLUSTER, 'datapath');
    ({ client, plane, work } = h);
  });
  after(async () => {
    await agent?.stop();
    await h.close();
  });

  const start = async () => {
    agent = await startAgent(h.config(['--heartbeat-seconds', '1']), silentLogger(), { dataPath: emulatedDataPath({ nvmetRoot: h.nvmetRoot, connectedHosts: probe }) });
    await agent.ready;
    return agent;
  };
  const nvmet = () => new NvmetConfigfs(join(work, 'nvmet')).read();
  const put = (a: VolumeAssignment) => client.put(keys.assignment(a.nodeUUID, a.volumeUUID)).value(JSON.stringify(a));

  it('serves assigned volumes, applies changes, tears down, and restarts with zero operations', async () => {
    const running = await start();
    const node = running.identity.nodeUUIDs[0] as string;

    // Two volumes as the leader writes them.
    await put(assignment(node, V1, 1));
    await put(assignment(node, V2, 2, { acl: ['ALLOW_ANY'], compression: true }));
    connections.set(20001, ['192.0.2.7']);
    await waitUntil(
      () => latest(plane, V1)?.state === 'VOLUME_SERVED' && latest(plane, V2)?.state === 'VOLUME_SERVED',
      'both volumes reported Served',
    );
    const report = plane.reports.at(-1)!;
    assert.equal(report.complete, true);
    assert.equal(latest(plane, V1)?.generation, '1');
    assert.equal(latest(plane, V1)?.node_uuid, node);
    // V1's ACL admits only H1, so the kernel let no other host hold that connection (docs/connected-hosts.md).
    assert.deepEqual(latest(plane, V1)?.connected_hosts, [{ host_nqn: H1, address: '192.0.2.7', host_nqn_source: 'acl' }]);
    let tree = await nvmet();
    const s1 = tree.subsystems.get(`${PREFIX}${V1}`);
    assert.ok(s1);
    assert.deepEqual(s1.allowedHosts, [H1]);
    assert.equal(s1.attrs.attr_model, 'Strata Volume');
    assert.equal(s1.namespaces.get(1)?.attrs.device_path, join(work, 'pool', node, 'volumes', `${V1}.raw`));
    assert.equal(s1.namespaces.get(1)?.attrs.enable, '1');
    assert.equal(tree.subsystems.get(`${PREFIX}${V2}`)?.attrs.attr_allow_any_host, '1');
    assert.equal(tree.subsystems.get(`${PREFIX}${V2}`)?.namespaces.get(2)?.attrs.buffered_io, '1');
    assert.deepEqual(tree.ports.get(20001)?.subsystems, [`${PREFIX}${V1}`]);
    assert.equal(tree.ports.get(20002)?.anaGroups.get(1), 'optimized');
    assert.equal((await fs.stat(join(work, 'pool', node, 'volumes', `${V1}.raw`))).size, 64 * 1024 * 1024);

    // Grow V1, change its ACL, take a snapshot: generation 2.
    await put(assignment(node, V1, 1, { generation: 2, sizeBytes: String(128 * 1024 * 1024), acl: [H2], snapshotUUIDs: [S1] }));
    await waitUntil(() => latest(plane, V1)?.generation === '2' && latest(plane, V1)?.state === 'VOLUME_SERVED', 'V1 Served at generation 2');
    assert.deepEqual(latest(plane, V1)?.snapshots, [{ snapshot_uuid: S1, available: true, error: '' }]);
    assert.equal((await fs.stat(join(work, 'pool', node, 'volumes', `${V1}.raw`))).size, 128 * 1024 * 1024);
    tree = await nvmet();
    assert.deepEqual(tree.subsystems.get(`${PREFIX}${V1}`)?.allowedHosts, [H2]);
    assert.ok(!tree.hosts.has(H1), 'the host entry Strata created and nothing links is gone');

    // An assignment that cannot be served is reported Failed, and touches nothing.
    await put(assignment(node, V3, 3, { port: 4420 }));
    await waitUntil(() => latest(plane, V3)?.state === 'VOLUME_FAILED', 'V3 reported Failed');
    assert.match(latest(plane, V3)?.error ?? '', /outside this agent's volume port range/);
    assert.ok(!(await nvmet()).subsystems.has(`${PREFIX}${V3}`));
    await client.delete().key(keys.assignment(node, V3));

    // V2 is unassigned (deleted): its export and backing go, and it is reported Absent.
    const reportsBeforeV2 = plane.reports.length;
    await client.delete().key(keys.assignment(node, V2));
    await plane.waitAbsent(V2, reportsBeforeV2);
    tree = await nvmet();
    assert.ok(!tree.subsystems.has(`${PREFIX}${V2}`));
    assert.ok(!tree.ports.has(20002));
    await assert.rejects(fs.stat(join(work, 'pool', node, 'volumes', `${V2}.zst`)));
    // Once acknowledged, the Absent entry leaves the (complete) report.
    await waitUntil(() => plane.reports.at(-1) && !latest(plane, V2) && !latest(plane, V3), 'a report without V2 and V3');

    // Restart: the same kernel state and pool give zero operations, and V1 stays Served.
    await running.stop();
    agent = undefined;
    const reportsBefore = plane.reports.length;
    const restarted = await start();
    const summary = await waitUntil(async () => (await restarted.dataPath.reconcileNow()) ?? false, 'a pass after restart');
    assert.equal(summary.operations, 0);
    assert.equal(summary.served, 1);
    await waitUntil(() => plane.reports.length > reportsBefore && latest(plane, V1)?.state === 'VOLUME_SERVED', 'V1 Served after restart');

    // Something deleted behind the agent's back is repaired at the next pass.
    await fs.unlink(join(work, 'nvmet', 'ports', '20001', 'subsystems', `${PREFIX}${V1}`));
    const repaired = await restarted.dataPath.reconcileNow();
    assert.equal(repaired?.operations, 1);
    assert.deepEqual((await nvmet()).ports.get(20001)?.subsystems, [`${PREFIX}${V1}`]);
  });

  it('keeps serving from the last known assignments while etcd is unreachable', async () => {
    const running = agent ?? (await start());
    const node = running.identity.nodeUUIDs[0] as string;
    await put(assignment(node, V1, 1, { generation: 5, sizeBytes: String(128 * 1024 * 1024) }));
    await waitUntil(() => latest(plane, V1)?.generation === '5', 'V1 at generation 5');
    await h.etcd.stop();
    const summary = await running.dataPath.reconcileNow();
    assert.equal(summary?.operations, 0);
    assert.ok((await nvmet()).subsystems.has(`${PREFIX}${V1}`), 'nothing torn down');
    assert.equal(latest(plane, V1)?.state, 'VOLUME_SERVED', latest(plane, V1)?.error);
    await running.stop();
    agent = undefined;
  });
});

describe('data path on a server without nvmet', () => {
  let h: HostAgentHarness;
  let agent: RunningAgent | undefined;

  before(async () => {
    h = await startHostAgentHarness(CLUSTER, 'datapath-none');
  });
  after(async () => {
    await agent?.stop();
    await h.close();
  });

  it('reports every assigned volume Failed with a clear reason and creates nothing', async () => {
    const { client, plane, work } = h;
    const config = h.config();
    // The real detection (default root /sys/kernel/config/nvmet), with modprobe failing as it
    // does on a kernel without the modules.
    const run = async (command: string) => {
      throw Object.assign(new Error(`${command} failed`), { stderr: 'modprobe: FATAL: Module nvmet not found' });
    };
    agent = await startAgent(config, silentLogger(), { dataPath: { run } });
    await agent.ready;
    const node = agent.identity.nodeUUIDs[0] as string;
    await client.put(keys.assignment(node, V1)).value(JSON.stringify(assignment(node, V1, 1)));
    await waitUntil(() => latest(plane, V1)?.state === 'VOLUME_FAILED', 'V1 reported Failed');
    assert.ok((latest(plane, V1)?.error ?? '').startsWith(NO_NVMET), latest(plane, V1)?.error);
    await assert.rejects(fs.stat(join(work, 'pool')), 'no pool is created');
  });
});
