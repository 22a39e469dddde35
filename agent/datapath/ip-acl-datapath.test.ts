// IP ACLs through the whole agent on the host: a real etcd holding assignments, the agent
// (startAgent) with its data path on a plain directory standing in for configfs, a FilePool in
// a temp dir, the real nft in a private network namespace, and a fake control plane receiving
// the VolumeReports. The real kernel's part (nvme connect refused, dropped) is in ip-acl.e2e.ts.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { VolumeAssignment } from '../../lib/records.js';
import { createNetns, type TestNetns } from '../../test/helpers/netns.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { startAgent, type RunningAgent } from '../agent.js';
import { NftablesDriver } from './kernel/nftables.js';
import { NvmetConfigfs } from './kernel/nvmet-configfs.js';
import { emulatedDataPath, NFT_NOT_IN_TESTS } from '../../test/kits/datapath/emulated-datapath.js';
import type { FakeControlPlane } from '../../test/kits/datapath/fake-control-plane.js';
import { startHostAgentHarness, type HostAgentHarness } from '../../test/kits/datapath/host-agent.js';
import { testAssignment } from '../../test/kits/datapath/test-assignment.js';
import { testCluster } from '../../test/kits/datapath/test-cluster.js';

const CLUSTER = testCluster('a1');
const PREFIX = `${CLUSTER.subsystemNQN}:vol:`;
const V1 = '11111111-1111-4111-8111-111111111111';
const V2 = '22222222-2222-4222-8222-222222222222';
const V3 = '33333333-3333-4333-8333-333333333333';

const netns = await createNetns();

describe('IP ACLs through the agent (etcd → agent → nftables in a network namespace)', { skip: typeof netns === 'string' ? netns : false }, () => {
  const ns = netns as TestNetns;
  const nft = new NftablesDriver({ command: ns.nft });
  let h: HostAgentHarness;
  let client: Etcd3;
  let plane: FakeControlPlane;
  let agent: RunningAgent | undefined;

  before(async () => {
    h = await startHostAgentHarness(CLUSTER, 'ipacl');
    ({ client, plane } = h);
  });
  after(async () => {
    await agent?.stop();
    await h.close();
    await ns.remove();
  });

  const start = async (withNft = true) => {
    const config = h.config(['--heartbeat-seconds', '1', '--reconcile-interval-seconds', '3600']);
    const connectedHosts = { connectionsByPort: async () => new Map() };
    agent = await startAgent(config, silentLogger(), { dataPath: emulatedDataPath({ nvmetRoot: h.nvmetRoot, connectedHosts, ...(withNft ? { nft: ns.nft } : {}) }) });
    await agent.ready;
    return agent;
  };
  const stop = async () => {
    await agent?.stop();
    agent = undefined;
  };
  const put = (a: VolumeAssignment) => client.put(keys.assignment(a.nodeUUID, a.volumeUUID)).value(JSON.stringify(a));
  const assignment = (node: string, volumeUUID: string, index: number, overrides: Partial<VolumeAssignment> = {}) =>
    testAssignment({ volumeUUID, nodeUUID: node, subsystemNQN: `${PREFIX}${volumeUUID}`, nsid: index, port: 20000 + index, acl: ['ALLOW_ANY'], ...overrides });
  const served = (volumeUUID: string, generation: number) =>
    waitUntil(
      () => plane.latest(volumeUUID)?.state === 'VOLUME_SERVED' && plane.latest(volumeUUID)?.generation === String(generation),
      `${volumeUUID} Served at generation ${generation} (last: ${JSON.stringify(plane.latest(volumeUUID))})`,
    );
  const ports = async () => (await nft.read()).ports;

  it('enforces, changes, repairs and removes IP ACLs; a restart changes nothing', async () => {
    const running = await start();
    const node = running.identity.nodeUUIDs[0] as string;
    await put(assignment(node, V1, 1, { ipAcl: ['10.0.0.1', '2001:DB8::1'] }));
    await put(assignment(node, V2, 2, { ipAcl: ['ALLOW_ANY'] }));
    await served(V1, 1);
    await served(V2, 1);
    assert.deepEqual(await ports(), new Map([[20001, { restricted: true, v4: ['10.0.0.1'], v6: ['2001:db8::1'] }]]), 'only V1 is restricted');

    // An IP ACL change is a new assignment generation.
    await put(assignment(node, V1, 1, { generation: 2, ipAcl: ['10.0.0.2'] }));
    await put(assignment(node, V2, 2, { generation: 2, ipAcl: ['ALLOW_NONE'] }));
    await served(V1, 2);
    await served(V2, 2);
    assert.deepEqual(await ports(), new Map([[20001, { restricted: true, v4: ['10.0.0.2'], v6: [] }], [20002, { restricted: true, v4: [], v6: [] }]]));

    // Restart with everything in place: zero configfs operations, zero nftables changes.
    await stop();
    const restarted = await start();
    const summary = await waitUntil(async () => (await restarted.dataPath.reconcileNow()) ?? false, 'a pass after restart');
    assert.deepEqual([summary.operations, summary.ipAclChanges, summary.served], [0, 0, 2]);

    // Deleted behind the agent's back: repaired at the next pass.
    await ns.run('nft', ['delete', 'table', 'inet', 'strata']);
    const repaired = await restarted.dataPath.reconcileNow();
    assert.deepEqual([repaired?.operations, repaired?.ipAclChanges], [0, 1]);
    assert.equal((await ports()).get(20001)?.v4[0], '10.0.0.2');

    // An IP ACL the agent cannot read is Failed, and nothing is created for the volume.
    await put(assignment(node, V3, 3, { ipAcl: ['10.0.0.0/8'] }));
    await waitUntil(() => plane.latest(V3)?.state === 'VOLUME_FAILED', 'V3 Failed');
    assert.match(plane.latest(V3)?.error ?? '', /invalid address in the IP ACL: "10\.0\.0\.0\/8"/);
    assert.ok(!(await new NvmetConfigfs(h.nvmetRoot).read()).subsystems.has(`${PREFIX}${V3}`));
    await client.delete().key(keys.assignment(node, V3));

    // A volume going away takes its entries along; the last one takes the table.
    const reportsBeforeV2 = plane.reports.length;
    await client.delete().key(keys.assignment(node, V2));
    await plane.waitAbsent(V2, reportsBeforeV2);
    assert.deepEqual([...(await ports()).keys()], [20001]);
    await put(assignment(node, V1, 1, { generation: 3, ipAcl: ['ALLOW_ANY'] }));
    await served(V1, 3);
    assert.equal((await nft.read()).present, false, 'no restriction left: no table');
    const reportsBeforeV1 = plane.reports.length;
    await client.delete().key(keys.assignment(node, V1));
    await plane.waitAbsent(V1, reportsBeforeV1);
    await stop();
  });

  it('without nftables, fails volumes that have an IP ACL (no export) and serves the others', async () => {
    const running = await start(false);
    const node = running.identity.nodeUUIDs[0] as string;
    await put(assignment(node, V1, 1, { generation: 4, ipAcl: ['10.0.0.1'] }));
    await put(assignment(node, V2, 2, { generation: 4, ipAcl: [] }));
    await served(V2, 4);
    await waitUntil(() => plane.latest(V1)?.state === 'VOLUME_FAILED', 'V1 Failed');
    assert.equal(plane.latest(V1)?.error, `the IP ACL cannot be enforced: ${NFT_NOT_IN_TESTS}`);
    const tree = await new NvmetConfigfs(h.nvmetRoot).read();
    assert.ok(!tree.subsystems.has(`${PREFIX}${V1}`) && !tree.ports.has(20001), 'V1 is not exported without its IP ACL');
    assert.ok(tree.subsystems.has(`${PREFIX}${V2}`));
    await stop();
  });
});
