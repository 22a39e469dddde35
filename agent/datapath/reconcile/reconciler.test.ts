// The reconciler alone (no agent around it): crash safety. A process that dies in the middle of
// applying a plan (simulated by an apply that never returns, then a fresh reconciler with a
// fresh state loaded from disk, as after kill -9) must finish the job, including what the
// kernel tree cannot show: a revocation whose port relink had not happened yet.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { ClusterRecord, VolumeAssignment } from '../../../lib/records.js';
import { EmulatedNvmetConfigfs } from '../../../test/kits/datapath/emulated-nvmet-configfs.js';
import { testAssignment } from '../../../test/kits/datapath/test-assignment.js';
import { startEtcd, type TestEtcd } from '../../../test/helpers/etcd.js';
import { WatchedStates } from '../../../test/helpers/watched-state.js';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { waitUntil } from '../../../test/helpers/wait.js';
import type { ConnectedHostsProbe } from './connected-hosts.js';
import { DataPathState } from './datapath-state.js';
import { IpAclEnforcer } from '../kernel/ip-acl-enforcer.js';
import { describeOp, type NvmetObjects, type NvmetOp, type NvmetTree } from '../kernel/nvmet-model.js';
import { AssignmentStore } from './assignment-store.js';
import { DataPathReconciler, type PassSummary } from './reconciler.js';
import { FilePool } from '../pool/storage-pool.js';
import type { ReplicaManager, ServeInput, ServeResult } from '../replication/replica-manager.js';
import type { BlockStack } from '../replication/block-stack.js';
import { SingleCopyPaths } from '../replication/single-copy.js';
import { nodeHostNQN, replicationSubsystemNQN } from '../../../lib/replication.js';

const CLUSTER: ClusterRecord = {
  UUID: 'c0ffee00-0000-4000-8000-000000000002',
  clusterName: 'test',
  subsystemNQN: 'nqn.2016-01.io.strata:cluster:c0ffee02',
  supportedMaxReplicas: 3,
  createdAt: new Date().toISOString(),
  bootstrappedBy: 'test',
};
const NODE = '99999999-9999-4999-8999-999999999999';
const V1 = '11111111-1111-4111-8111-111111111111';
const NQN = `${CLUSTER.subsystemNQN}:vol:${V1}`;
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000002';

/** A configfs driver that records what it applies and can "die" (hang forever) after n operations. */
class RecordingConfigfs extends EmulatedNvmetConfigfs {
  readonly applied: NvmetOp[] = [];
  /** Whole-tree reads, and the subsystems each partial read asked for. */
  fullReads = 0;
  readonly partialReads: string[][] = [];
  dieAfter = Infinity;
  died = false;
  /** While set, whole-tree reads wait for it. */
  readGate: Promise<void> | undefined;
  override async read(signal?: AbortSignal): Promise<NvmetTree> {
    this.fullReads += 1;
    await this.readGate;
    return super.read(signal);
  }
  override async readObjects(scope: { subsystems: Iterable<string>; ports: Iterable<number> }): Promise<NvmetObjects> {
    const subsystems = [...scope.subsystems];
    this.partialReads.push(subsystems);
    return super.readObjects({ subsystems, ports: scope.ports });
  }
  override async apply(op: NvmetOp): Promise<void> {
    if (this.applied.length >= this.dieAfter) {
      this.died = true;
      return new Promise(() => undefined);
    }
    await super.apply(op);
    this.applied.push(op);
  }
}

function assignment(overrides: Partial<VolumeAssignment> = {}): VolumeAssignment {
  return testAssignment({ volumeUUID: V1, nodeUUID: NODE, subsystemNQN: NQN, nsid: 1, port: 20001, sizeBytes: String(8 * 1024 * 1024), acl: [H1, H2], ...overrides });
}

describe('DataPathReconciler crash safety', () => {
  let etcd: TestEtcd;
  let writer: Etcd3;
  let work: string;
  const clients: Etcd3[] = [];
  const states = new WatchedStates();

  before(async () => {
    etcd = await startEtcd();
    writer = createEtcdClient([etcd.endpoint]);
    await writer.put(keys.cluster()).value(JSON.stringify(CLUSTER));
    work = mkdtempSync(join(tmpdir(), 'strata-reconciler-'));
  });
  after(async () => {
    await states.stop();
    for (const c of clients) c.close();
    writer.close();
    await etcd.stop();
    rmSync(work, { recursive: true, force: true });
  });

  /** A reconciler as a fresh agent process would build it (state read from disk). */
  async function reconciler(configfs: EmulatedNvmetConfigfs, resyncIntervalMs = 3_600_000, connectedHosts?: ConnectedHostsProbe, replicas?: ReplicaManager, singles?: SingleCopyPaths): Promise<DataPathReconciler> {
    const client = createEtcdClient([etcd.endpoint]);
    clients.push(client);
    await configfs.prepareRoot();
    return new DataPathReconciler({
      store: new AssignmentStore(states.of(client)),
      nodeUUIDs: [NODE],
      backend: async () => ({ kind: 'nvmet', configfs }),
      openPool: (nodeUUID, cluster) => FilePool.open({ dir: join(work, 'pool', nodeUUID), clusterUUID: cluster.clusterUUID, logger: silentLogger() }),
      state: await DataPathState.load(join(work, 'state')),
      settings: { listenAddress: '127.0.0.1', portIdMin: 20000, portIdMax: 39999 },
      ipAcls: new IpAclEnforcer('no nftables in this test', silentLogger()),
      resyncIntervalMs,
      debounceMs: 20,
      ...(connectedHosts ? { connectedHosts } : {}),
      ...(replicas ? { replicas } : {}),
      ...(singles ? { singles } : {}),
      logger: silentLogger(),
    });
  }
  const configfsAt = () => new RecordingConfigfs(join(work, 'nvmet'));
  const put = (a: VolumeAssignment) => writer.put(keys.assignment(a.nodeUUID, a.volumeUUID)).value(JSON.stringify(a));

  it('finishes a revocation interrupted between the port cut and the ACL change', async () => {
    await put(assignment());
    const first = await reconciler(configfsAt());
    assert.equal((await first.reconcileNow())?.served, 1);
    await first.stop();

    // H2 loses access. The process dies right after cutting the subsystem's port link (which
    // drops H2's connections), before the ACL changes: nobody can connect meanwhile.
    await put(assignment({ generation: 2, acl: [H1] }));
    const dying = configfsAt();
    dying.dieAfter = 1;
    const doomed = await reconciler(dying);
    void doomed.reconcileNow();
    await waitUntil(() => dying.died, 'the apply to die');
    void doomed.stop(); // its pass never ends; this only cancels its watch
    assert.deepEqual(dying.applied.map(describeOp), [`unlink ports/20001/subsystems/${NQN}`]);

    // The next process plans from the tree (link down) plus the written-ahead intent: the ACL
    // first, then the link, so H2 never gets back in.
    const survivor = configfsAt();
    const next = await reconciler(survivor);
    const summary = await next.reconcileNow();
    assert.equal(summary?.served, 1);
    assert.deepEqual(survivor.applied.map(describeOp), [
      `unlink subsystems/${NQN}/allowed_hosts/${H2}`,
      `link ports/20001/subsystems/${NQN} -> subsystems/${NQN}`,
      `rmdir hosts/${H2}`,
    ]);
    assert.equal(next.current()?.volumes.find((v) => v.volumeUUID === V1)?.generation, 2);
    // And once done, it is done: the intent is cleared, a further pass does nothing.
    survivor.applied.length = 0;
    assert.equal((await next.reconcileNow())?.operations, 0);
    await next.stop();
    const state = await DataPathState.load(join(work, 'state'));
    assert.deepEqual([...state.pendingRelink], []);
  });

  it('tells the kernel about a grown backing even when it died right after growing it', async () => {
    await put(assignment({ generation: 3, acl: [H1], sizeBytes: String(16 * 1024 * 1024) }));
    const dying = configfsAt();
    dying.dieAfter = 0;
    const doomed = await reconciler(dying);
    void doomed.reconcileNow();
    await waitUntil(() => dying.died, 'the apply to die');
    void doomed.stop();
    const survivor = configfsAt();
    const next = await reconciler(survivor);
    await next.reconcileNow();
    assert.deepEqual(survivor.applied.map(describeOp), [`write "1" to subsystems/${NQN}/namespaces/1/revalidate_size`]);
    survivor.applied.length = 0;
    assert.equal((await next.reconcileNow())?.operations, 0);
    await next.stop();
  });

  /**
   * The replica manager as the passes see it: the host path's device (a file here) serves the
   * size last served; growing it runs the write-ahead first, as the block stack does; a primary
   * reports its mirror still growing while `growing` is set.
   */
  function fakeReplicas() {
    const devicePath = join(work, `dm-${V2}`);
    writeFileSync(devicePath, '');
    const bed = { servedBytes: 0n, growing: undefined as string | undefined, calls: [] as string[] };
    const replicas = {
      start: () => undefined,
      stop: async () => undefined,
      onChange: () => () => undefined,
      isFenced: () => false,
      legStatus: () => undefined,
      writtenBytes: async () => undefined,
      qosStatus: async () => undefined,
      primaryVolumes: () => [],
      rejoinSoon: () => undefined,
      release: async () => undefined,
      serve: async (input: ServeInput): Promise<ServeResult> => {
        const primary = input.replication.primaryNodeUUID === input.nodeUUID;
        const target = primary && bed.growing ? bed.servedBytes : input.sizeBytes;
        if (bed.servedBytes !== 0n && target > bed.servedBytes) {
          input.beforeGrowing?.();
          bed.calls.push(`grow ${target}`);
        }
        bed.servedBytes = target;
        return {
          hostDevicePath: devicePath,
          ...(primary ? {} : { replicationExport: { nqn: replicationSubsystemNQN(CLUSTER.subsystemNQN, input.volumeUUID, input.nodeUUID), primaryHostNQN: input.replication.primaryHostNQN } }),
          ...(primary && bed.growing ? { growing: bed.growing } : {}),
        };
      },
    };
    return { replicas: replicas as unknown as ReplicaManager, bed };
  }
  const OTHER = '88888888-8888-4888-8888-888888888888';
  // A volume of their own: the tests above leave V1's backing larger than these start.
  const V2 = '22222222-2222-4222-8222-222222222222';
  const NQN2 = `${CLUSTER.subsystemNQN}:vol:${V2}`;
  function replicated(primary: string, overrides: Partial<VolumeAssignment> = {}): VolumeAssignment {
    const role = primary === NODE ? 'primary' : 'replica';
    return assignment({
      volumeUUID: V2,
      subsystemNQN: NQN2,
      port: 20002,
      acl: [H1],
      role,
      anaState: role === 'primary' ? 'optimized' : 'inaccessible',
      replication: {
        epoch: 1,
        primaryNodeUUID: primary,
        primaryHostNQN: nodeHostNQN(CLUSTER.subsystemNQN, primary),
        legs: [NODE, OTHER].map((nodeUUID) => ({ nodeUUID, endpoint: '127.0.0.2:4421', inSync: true })),
      },
      ...overrides,
    });
  }
  /** The volume unassigned and torn down, as the next test expects to find the node. */
  async function removeV2(replicas: ReplicaManager): Promise<void> {
    await writer.delete().key(keys.assignment(NODE, V2));
    const cleanup = await reconciler(configfsAt(), undefined, undefined, replicas);
    await cleanup.reconcileNow();
    await cleanup.stop();
  }
  /** A process with the replica manager given that dies (kill -9) at its pass's first configfs operation. */
  async function dieBeforeApplying(replicas: ReplicaManager): Promise<void> {
    const dying = configfsAt();
    dying.dieAfter = 0;
    const doomed = await reconciler(dying, undefined, undefined, replicas);
    void doomed.reconcileNow();
    await waitUntil(() => dying.died, 'the apply to die');
    void doomed.stop(); // its pass never ends; this only cancels its watch
  }
  const revalidates = (ops: NvmetOp[]) => ops.map(describeOp).filter((op) => op.endsWith('revalidate_size'));

  it('a replica grown: its replication export re-reads the grown backing and its host namespace the grown fence, even when it died right after', async () => {
    const { replicas, bed } = fakeReplicas();
    await put(replicated(OTHER, { generation: 1 }));
    const first = await reconciler(configfsAt(), undefined, undefined, replicas);
    await first.reconcileNow();
    assert.deepEqual(first.current()?.volumes.filter((v) => v.volumeUUID === V2).map((v) => [v.state, v.error, v.generation]), [['Served', '', 1]]);
    await first.stop();

    await put(replicated(OTHER, { generation: 2, sizeBytes: String(16 * 1024 * 1024) }));
    await dieBeforeApplying(replicas);
    assert.deepEqual(bed.calls, [`grow ${16 * 1024 * 1024}`], 'the fence grew before the apply died');
    const survivor = configfsAt();
    const next = await reconciler(survivor, undefined, undefined, replicas);
    await next.reconcileNow();
    const REP = replicationSubsystemNQN(CLUSTER.subsystemNQN, V2, NODE);
    assert.deepEqual(revalidates(survivor.applied), [`write "1" to subsystems/${NQN2}/namespaces/1/revalidate_size`, `write "1" to subsystems/${REP}/namespaces/1/revalidate_size`]);
    assert.equal(next.current()?.volumes.find((v) => v.volumeUUID === V2)?.generation, 2);
    await next.stop();
    await removeV2(replicas);
  });

  it('a copy that stays a copy while the primary moves admits the new primary before the pass\'s pool and block work, the port link cut first; the pass then has nothing left to do there', async () => {
    const THIRD = '77777777-7777-4777-8777-777777777777';
    const { replicas } = fakeReplicas();
    const configfs = configfsAt();
    const threeCopies = (primary: string, epoch: number, inSyncOther: boolean) =>
      replicated(primary, {
        // A promotion changes the replica set only (the leader's assignment keeps the generation).
        generation: 1,
        replication: {
          epoch,
          primaryNodeUUID: primary,
          primaryHostNQN: nodeHostNQN(CLUSTER.subsystemNQN, primary),
          legs: [NODE, OTHER, THIRD].map((nodeUUID) => ({ nodeUUID, endpoint: '127.0.0.2:4421', inSync: nodeUUID !== OTHER || inSyncOther })),
        },
      });
    await put(threeCopies(OTHER, 1, true));
    let servedAfterOps: number[] = [];
    const recording = { ...(replicas as unknown as Record<string, unknown>) } as unknown as ReplicaManager;
    (recording as unknown as { serve: ReplicaManager['serve'] }).serve = (input) => {
      servedAfterOps.push(configfs.applied.length);
      return replicas.serve(input);
    };
    const agent = await reconciler(configfs, undefined, undefined, recording);
    await agent.reconcileNow();
    const REP = replicationSubsystemNQN(CLUSTER.subsystemNQN, V2, NODE);
    const oldHost = nodeHostNQN(CLUSTER.subsystemNQN, OTHER);
    const newHost = nodeHostNQN(CLUSTER.subsystemNQN, THIRD);
    assert.ok(configfs.applied.some((op) => op.path === `subsystems/${REP}/allowed_hosts/${oldHost}`), 'the export admits the first primary');
    const before = configfs.applied.length;
    servedAfterOps = [];

    // The watch delivers the promotion: an incremental pass.
    await put(threeCopies(THIRD, 2, false));
    await waitUntil(() => configfs.applied.slice(before).some((op) => op.path === `ports/4421/subsystems/${REP}` && op.op === 'symlink') && servedAfterOps.length > 0, 'the promotion to be served');
    const ops = configfs.applied.slice(before).map(describeOp);
    assert.deepEqual(ops.slice(0, 5), [
      `mkdir hosts/${newHost}`,
      `unlink ports/4421/subsystems/${REP}`,
      `unlink subsystems/${REP}/allowed_hosts/${oldHost}`,
      `link subsystems/${REP}/allowed_hosts/${newHost} -> hosts/${newHost}`,
      `link ports/4421/subsystems/${REP} -> subsystems/${REP}`,
    ]);
    assert.equal(servedAfterOps[0], before + 5, 'the block work came after the export admitted the new primary');
    assert.deepEqual(ops.slice(5).filter((op) => op.includes(REP)), [], 'nothing left for the pass to do on the export');
    await agent.stop();
    await removeV2(replicas);
  });

  it('a primary whose mirror still grows: served at the old size, the previous generation reported, no host revalidate until the device grew', async () => {
    const { replicas, bed } = fakeReplicas();
    await put(replicated(NODE, { generation: 1 }));
    const agent = await reconciler(configfsAt(), undefined, undefined, replicas);
    await agent.reconcileNow();
    const v1 = () => agent.current()?.volumes.find((v) => v.volumeUUID === V2);
    assert.equal(v1()?.generation, 1);

    bed.growing = 'waiting for a copy';
    const watching = configfsAt();
    await agent.stop();
    const growing = await reconciler(watching, undefined, undefined, replicas);
    await put(replicated(NODE, { generation: 2, sizeBytes: String(16 * 1024 * 1024) }));
    await growing.reconcileNow();
    const status = () => growing.current()?.volumes.find((v) => v.volumeUUID === V2);
    assert.equal(status()?.state, 'Served');
    assert.equal(status()?.generation, 1, 'the new generation is not done here yet');
    assert.equal(status()?.error, 'waiting for a copy');
    assert.deepEqual(revalidates(watching.applied), [], 'the primary reads its file through a loop device: no namespace over it to revalidate');

    // The retry a second later is an incremental pass: it serves the volume again all the same.
    bed.growing = undefined;
    await waitUntil(() => status()?.generation === 2, 'the retry to serve the grown volume', 5000);
    assert.deepEqual(revalidates(watching.applied), [`write "1" to subsystems/${NQN2}/namespaces/1/revalidate_size`]);
    assert.equal(status()?.generation, 2);
    await growing.stop();
    await removeV2(replicas);
  });

  it('lists a replicated volume\'s port for the exit fence before the first configfs operation that serves it, never a single copy\'s, and drops it once a single copy has the port', async () => {
    const { replicas } = fakeReplicas();
    const listed = () => DataPathState.readReplicatedPorts(join(work, 'state'));
    // V1, a single copy on port 20001, is still assigned from the tests above.
    await put(replicated(OTHER, { generation: 1 }));
    await dieBeforeApplying(replicas);
    assert.deepEqual(await listed(), [20002], 'on disk before the plan applied anything');

    // Promoted here: the port turns optimized, and stays listed.
    await put(replicated(NODE, { generation: 2, replication: { ...replicated(NODE).replication!, epoch: 2 } }));
    const primary = configfsAt();
    const serving = await reconciler(primary, undefined, undefined, replicas);
    await serving.reconcileNow();
    const tree = await configfsAt().read();
    assert.deepEqual([tree.ports.get(20002)?.anaGroups.get(1), tree.ports.get(20001)?.anaGroups.get(1)], ['optimized', 'optimized']);
    assert.deepEqual(await listed(), [20002]);
    await serving.stop();

    // The volume goes and its port goes to a new single copy in the same pass: no longer listed.
    const V3 = '33333333-3333-4333-8333-333333333333';
    await writer.delete().key(keys.assignment(NODE, V2));
    await put(assignment({ volumeUUID: V3, subsystemNQN: `${CLUSTER.subsystemNQN}:vol:${V3}`, port: 20002 }));
    const reused = await reconciler(configfsAt(), undefined, undefined, replicas);
    await reused.reconcileNow();
    assert.deepEqual((await configfsAt().read()).ports.get(20002)?.subsystems, [`${CLUSTER.subsystemNQN}:vol:${V3}`]);
    assert.deepEqual(await listed(), []);
    await writer.delete().key(keys.assignment(NODE, V3));
    await reused.reconcileNow();
    await reused.stop();
  });

  it('converges after dying at any point of a first export and of a teardown', async () => {
    const die = async (k: number) => {
      const dying = configfsAt();
      dying.dieAfter = k;
      const doomed = await reconciler(dying);
      void doomed.reconcileNow();
      await waitUntil(() => dying.died, `the apply to die after ${k}`);
      void doomed.stop();
    };
    for (let k = 0; k < 20; k += 4) {
      // Export, dying after k operations.
      await put(assignment({ generation: 4, acl: [H1, H2], sizeBytes: String(16 * 1024 * 1024) }));
      await die(k);
      let next = await reconciler(configfsAt());
      assert.equal((await next.reconcileNow())?.served, 1, `served after dying at ${k}`);
      assert.equal((await next.reconcileNow())?.operations, 0);
      await next.stop();
      // Teardown, dying after k/4 operations.
      await writer.delete().key(keys.assignment(NODE, V1));
      await die(k / 4);
      next = await reconciler(configfsAt());
      await next.reconcileNow();
      const tree = await configfsAt().read();
      assert.deepEqual([tree.hosts.size, tree.subsystems.size, tree.ports.size], [0, 0, 0], `torn down after dying at ${k / 4}`);
      assert.equal((await next.reconcileNow())?.operations, 0);
      await next.stop();
    }
  });

  it('changes one volume among many in a pass that touches only that volume', async () => {
    const uuid = (i: number) => `22222222-2222-4222-8222-${String(i).padStart(12, '0')}`;
    const many = (i: number, overrides: Partial<VolumeAssignment> = {}) =>
      testAssignment({ volumeUUID: uuid(i), nodeUUID: NODE, subsystemNQN: `${CLUSTER.subsystemNQN}:vol:${uuid(i)}`, nsid: 1, port: 21000 + i, sizeBytes: String(1024 * 1024), acl: [H1], ...overrides });
    for (let i = 0; i < 30; i++) await put(many(i));
    const configfs = configfsAt();
    const agent = await reconciler(configfs);
    const passes: PassSummary[] = [];
    agent.onPass((p) => passes.push(p));
    agent.start();
    await waitUntil(() => passes.some((p) => p.served === 30), '30 volumes served');
    const full = passes.at(-1)!;
    assert.equal(full.full, true);
    assert.equal(full.prepared, 30);
    assert.equal(configfs.fullReads, 1, 'a first pass reads the whole tree once (and only the touched objects after applying)');

    // One more volume: the watch triggers a pass that prepares, reads and changes only it.
    const before = { passes: passes.length, ops: configfs.applied.length, fullReads: configfs.fullReads, partial: configfs.partialReads.length };
    await put(many(30));
    await waitUntil(() => passes.slice(before.passes).some((p) => p.served === 31), '31 volumes served');
    const added = passes.slice(before.passes);
    assert.ok(added.every((p) => !p.full && p.prepared <= 1), JSON.stringify(added));
    assert.equal(configfs.fullReads, before.fullReads, 'no whole-tree read');
    const newNqn = `${CLUSTER.subsystemNQN}:vol:${uuid(30)}`;
    assert.deepEqual([...new Set(configfs.partialReads.slice(before.partial).flat())], [newNqn]);
    const ops = configfs.applied.slice(before.ops);
    assert.ok(ops.length > 0 && ops.every((op) => op.volume === uuid(30)), ops.map(describeOp).join('\n'));

    // A revoked host on one volume: only that volume's port link is cycled.
    const mark = configfs.applied.length;
    await put(many(7, { generation: 2, acl: [] }));
    await waitUntil(() => agent.current()?.volumes.find((v) => v.volumeUUID === uuid(7))?.generation === 2, 'generation 2 reported');
    const nqn7 = `${CLUSTER.subsystemNQN}:vol:${uuid(7)}`;
    assert.deepEqual(configfs.applied.slice(mark).map(describeOp), [
      `unlink ports/21007/subsystems/${nqn7}`,
      `unlink subsystems/${nqn7}/allowed_hosts/${H1}`,
      `link ports/21007/subsystems/${nqn7} -> subsystems/${nqn7}`,
    ]);

    // A deleted volume: its objects and backing go, and nothing else is touched.
    const beforeDelete = configfs.applied.length;
    await writer.delete().key(keys.assignment(NODE, uuid(3)));
    await waitUntil(async () => !(await configfsAt().read()).subsystems.has(`${CLUSTER.subsystemNQN}:vol:${uuid(3)}`), 'volume 3 torn down');
    await waitUntil(() => agent.current()?.volumes.find((v) => v.volumeUUID === uuid(3))?.state === 'Absent', 'volume 3 reported Absent');
    const teardown = configfs.applied.slice(beforeDelete);
    assert.ok(teardown.every((op) => op.volume === uuid(3) || op.path.startsWith('ports/21003')), teardown.map(describeOp).join('\n'));
    assert.equal(configfs.fullReads, before.fullReads);

    // An object deleted behind the agent's back is repaired by the next full pass.
    const port9 = configfsAt();
    await port9.apply({ op: 'unlink', path: `ports/21009/subsystems/${CLUSTER.subsystemNQN}:vol:${uuid(9)}` });
    const repaired = await agent.reconcileNow();
    assert.equal(repaired?.full, true);
    assert.equal(repaired?.operations, 1);
    assert.equal(repaired?.served, 30);
    assert.equal((await agent.reconcileNow())?.operations, 0);

    await agent.stop();
    for (let i = 0; i <= 30; i++) await writer.delete().key(keys.assignment(NODE, uuid(i)));
    const cleanup = await reconciler(configfsAt());
    await cleanup.reconcileNow();
    await cleanup.stop();
  });

  it('a periodic full pass gives way to a change that arrives while it reads the tree', async () => {
    const uuid = (i: number) => `33333333-3333-4333-8333-${String(i).padStart(12, '0')}`;
    const many = (i: number) =>
      testAssignment({ volumeUUID: uuid(i), nodeUUID: NODE, subsystemNQN: `${CLUSTER.subsystemNQN}:vol:${uuid(i)}`, nsid: 1, port: 22000 + i, sizeBytes: String(1024 * 1024), acl: [H1] });
    for (let i = 0; i < 20; i++) await put(many(i));
    const configfs = configfsAt();
    const agent = await reconciler(configfs, 300);
    const passes: PassSummary[] = [];
    agent.onPass((p) => passes.push(p));
    agent.start();
    await waitUntil(() => passes.some((p) => p.served === 20), '20 volumes served');

    // Hold the next periodic full pass in its tree read, then change an assignment.
    let release!: () => void;
    configfs.readGate = new Promise((resolve) => (release = resolve));
    const reads = configfs.fullReads;
    // Due 10 times the last full pass's duration after it began: seconds on a loaded CI machine.
    await waitUntil(() => configfs.fullReads > reads, 'a periodic full pass reading the tree', 60_000);
    const mark = passes.length;
    await put(many(20));
    await new Promise((resolve) => setTimeout(resolve, 300)); // the watch event reaches the agent
    release();
    configfs.readGate = undefined;
    await waitUntil(() => passes.slice(mark).some((p) => p.full), 'the full pass, run to the end');
    const after = passes.slice(mark);
    const firstFull = after.findIndex((p) => p.full);
    assert.ok(firstFull >= 1, JSON.stringify(after));
    assert.deepEqual(
      { full: after[0]!.full, prepared: after[0]!.prepared, served: after[0]!.served },
      { full: false, prepared: 1, served: 21 },
      'the change got its own pass before the full one finished',
    );
    assert.equal(after[firstFull]!.served, 21);

    await agent.stop();
    for (let i = 0; i <= 20; i++) await writer.delete().key(keys.assignment(NODE, uuid(i)));
    const cleanup = await reconciler(configfsAt());
    await cleanup.reconcileNow();
    await cleanup.stop();
  });

  it('without the device-mapper stage (a target the caller brings), a single-copy volume with QoS limits is served and reported NotEnforced, naming the node; invalid limits fail it', async () => {
    const limits = { readIops: 300, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 0 };
    await put(assignment({ generation: 3, qos: limits }));
    const agent = await reconciler(configfsAt());
    await agent.reconcileNow();
    const v1 = () => agent.current()?.volumes.find((v) => v.volumeUUID === V1);
    assert.equal(v1()?.state, 'Served');
    assert.deepEqual(v1()?.qos, { state: 'NotEnforced', reason: `node ${NODE}: this agent serves volumes without the device-mapper stage QoS needs`, limits });
    await put(assignment({ generation: 4, qos: null }));
    await agent.reconcileNow();
    assert.equal(v1()?.qos, undefined, 'no policy: no word on it');
    await put(assignment({ generation: 5, qos: { ...limits, readIops: -1 } }));
    await agent.reconcileNow();
    assert.equal(v1()?.state, 'Failed');
    assert.match(v1()?.error ?? '', /invalid QoS limit readIops -1/);
    await agent.stop();
    await writer.delete().key(keys.assignment(NODE, V1));
    const cleanup = await reconciler(configfsAt());
    await cleanup.reconcileNow();
    await cleanup.stop();
  });

  it('with the device-mapper stage: a namespace already enabled on its file keeps it (its policy NotEnforced, saying why); a new one is made on the dm device; a removed volume\'s devices go before its file', async () => {
    const limits = { readIops: 300, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 0 };
    const V2 = '22222222-2222-4222-8222-222222222222';
    const nqn2 = `${CLUSTER.subsystemNQN}:vol:${V2}`;
    // An agent of before the stage served V1 straight from its file.
    await put(assignment({ generation: 3 }));
    const old = await reconciler(configfsAt());
    await old.reconcileNow();
    await old.stop();
    const file = (await configfsAt().read()).subsystems.get(NQN)?.namespaces.get(1)?.attrs['device_path'] ?? '';
    assert.match(file, new RegExp(`${V1}\\.`));

    const events: string[] = [];
    const stack = {
      ensureLoop: async (f: string) => (events.push(`loop ${f.includes(V2) ? 'V2' : f}`), 'loop7'),
      blockBytes: async () => 1n << 30n,
      linearTable: async (bytes: bigint, block: string) => `0 ${bytes / 512n} linear ${block} 0`,
      ensureDm: async (v: string, t: string) => void events.push(`dm ${v === V2 ? 'V2' : v} ${t.split(' ')[3]}`),
      hostDevicePath: (v: string) => `/dev/mapper/strata-${v}`,
      removeDm: async (v: string) => void events.push(`remove dm ${v === V2 ? 'V2' : v === V1 ? 'V1' : v}`),
      loopsOfVolume: async () => [],
    };
    const singles = new SingleCopyPaths({ stack: stack as unknown as BlockStack, logger: silentLogger() });
    await put(assignment({ generation: 4, qos: limits }));
    await put(assignment({ volumeUUID: V2, subsystemNQN: nqn2, port: 20002, generation: 1 }));
    const agent = await reconciler(configfsAt(), undefined, undefined, undefined, singles);
    await agent.reconcileNow();
    const tree = await configfsAt().read();
    assert.equal(tree.subsystems.get(NQN)?.namespaces.get(1)?.attrs['device_path'], file, 'V1 keeps its file');
    assert.equal(tree.subsystems.get(nqn2)?.namespaces.get(1)?.attrs['device_path'], `/dev/mapper/strata-${V2}`, 'V2 is made on its dm device');
    assert.deepEqual(events, ['loop V2', 'dm V2 loop7']);
    const v1 = agent.current()?.volumes.find((v) => v.volumeUUID === V1);
    assert.equal(v1?.state, 'Served');
    assert.equal(v1?.qos?.state, 'NotEnforced');
    assert.match(v1?.qos?.reason ?? '', new RegExp(`^node ${NODE}: the volume's namespace points straight at its file`));
    assert.equal(agent.current()?.volumes.find((v) => v.volumeUUID === V2)?.state, 'Served');

    events.length = 0;
    await writer.delete().key(keys.assignment(NODE, V2));
    await agent.reconcileNow();
    assert.equal((await configfsAt().read()).subsystems.has(nqn2), false);
    assert.deepEqual(events, ['remove dm V2'], 'the devices go once the subsystem is gone');
    await agent.stop();
    await writer.delete().key(keys.assignment(NODE, V1));
    const cleanup = await reconciler(configfsAt());
    await cleanup.reconcileNow();
    await cleanup.stop();
  });

  it('reports hosts that connect or go, every interval, with no assignment changing', async () => {
    await put(assignment({ generation: 7 }));
    const connections = new Map<number, string[]>();
    const agent = await reconciler(configfsAt(), 200, { connectionsByPort: async () => connections });
    agent.start();
    const hostsOfV1 = () => agent.current()?.volumes.find((v) => v.volumeUUID === V1)?.connectedHosts.map((h) => h.address);
    await waitUntil(() => agent.current()?.volumes.find((v) => v.volumeUUID === V1)?.state === 'Served', 'V1 served');
    connections.set(20001, ['192.0.2.9']);
    await waitUntil(() => hostsOfV1()?.includes('192.0.2.9'), 'the connected host reported', 15_000);
    connections.clear();
    await waitUntil(() => hostsOfV1()?.length === 0, 'the host reported gone', 15_000);
    await agent.stop();
    await writer.delete().key(keys.assignment(NODE, V1));
    const cleanup = await reconciler(configfsAt());
    await cleanup.reconcileNow();
    await cleanup.stop();
  });
});
