// The volume controller against a real etcd: placement, assignments, the moves driven by
// agents' reports (written here as the control plane persists them), deletion, failure,
// snapshots, clones, and resuming after a change of leader. Every case but the deposed leader's
// (leases) runs again on the in-memory etcd, the leader's fenced commit a plain one there.
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import { commitTransaction, type Committer } from '../../lib/etcd/transaction.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { keys } from '../../lib/etcd/keys.js';
import { LeaderStore } from '../../lib/etcd/leader-store.js';
import type { NodeCommandRecord, NodeRecord, ProjectRecord, ReplicaSetRecord, SnapshotRecord, VolumeAssignment, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { joinServer, markAbsent, markPresent, nodePoolRecord, putRecord, reportInventory } from '../../test/helpers/records.js';
import { waitUntil } from '../../test/helpers/wait.js';
import type { EventInput } from '../events/event-recorder.js';
import { LeaderElection } from '../leadership/leader-election.js';
import { failoverDuration, failovers, type FailoverKind } from '../metrics/control-plane-metrics.js';
import { VolumeController } from './volume-controller.js';
import { VolumeControllerStore } from './volume-controller-store.js';
import { WatchCache } from '../watch-cache/watch-cache.js';
import { ReplicaSetStore } from '../../lib/etcd/replica-set-store.js';
import { withReplicaSet } from '../../lib/replication.js';
import type { PolicyRecord } from '../policies/policy-record.js';

const logger = pino({ level: 'silent' });
const GiB = 1024n ** 3n;
const CLUSTER_NQN = 'nqn.2024-01.io.strata:cluster:test';

controllerSuite(true);
controllerSuite(false);

/** The suite on a real etcd (with a leader election), or on the in-memory etcd. */
function controllerSuite(onEtcd: boolean): void {
  describe(onEtcd ? 'volume controller' : 'volume controller on the in-memory etcd', () => {
    let etcd: TestEtcd | undefined;
    let etcdClient: Etcd3 | undefined;
    /** The etcd client, or the in-memory etcd. */
    let client: KvClient;
    let kv: Kv;
    /** The process's watched state, which the election and the controller read. */
    let state: WatchCache;
    let election: LeaderElection | undefined;
    let controller: VolumeController;
    const events: EventInput[] = [];
    const now = { ms: Date.now() };

    async function startController(): Promise<void> {
      let fencedCommit: Committer = async (transaction) => (await commitTransaction(kv, transaction)).succeeded;
      if (etcdClient) {
        const leader = new LeaderElection(new LeaderStore(etcdClient, state.state), `cp-${randomUUID()}`, logger);
        election = leader;
        await leader.start(etcdClient.lease(5));
        assert.ok(leader.isLeader);
        fencedCommit = (transaction) => leader.fencedCommit(transaction);
      }
      controller = new VolumeController({
        store: new VolumeControllerStore(state, fencedCommit), logger,
        events: { prepare: async (e) => { events.push(e as EventInput); return { id: '', wire: {} as never, writes: [] }; } },
        clusterUUID: 'cluster-test', clusterSubsystemNQN: CLUSTER_NQN,
        volumePorts: { min: 20000, max: 20009 }, overcommitRatio: 1, creatingTimeoutMs: 60_000, permanentFailureTimeoutMs: 600_000, now: () => now.ms,
      });
      await controller.start();
    }
    async function stopController(): Promise<void> {
      await controller.stop();
      await election?.stop();
      election = undefined;
    }
    const deletePrefix = (prefix: string) => kv.commit({ guards: [], writes: [{ deletePrefix: prefix }] });

    before(async () => {
      if (onEtcd) {
        etcd = await startEtcd();
        client = etcdClient = createEtcdClient([etcd.endpoint]);
      } else client = new MemoryEtcd();
      kv = kvOf(client);
      state = new WatchCache(client, logger);
      await state.start();
    });
    after(async () => {
      await state.stop();
      etcdClient?.close();
      await etcd?.stop();
    });
    beforeEach(async () => {
      await deletePrefix('/strata/');
      events.length = 0;
      now.ms = Date.now();
    });

    /** A server with one node managing one data device of `size`, present (Active). */
    async function storageNode(size = 100n * GiB, failureDomain = randomUUID().slice(0, 8)) {
      const serial = `SN-${randomUUID().slice(0, 8)}`;
      const { server, nodes } = await joinServer(client, { nodes: [{ managedDeviceSerials: [serial], failureDomains: [failureDomain] }] });
      await reportInventory(client, server.UUID, { devices: [{ serial, sizeBytes: String(size), present: true }] });
      return { server, node: nodes[0]! };
    }
    function volume(overrides: Partial<VolumeRecord> = {}): VolumeRecord {
      return {
        UUID: randomUUID(), name: `v-${randomUUID().slice(0, 6)}`, projectName: 'default', sizeBytes: String(10n * GiB),
        acl: ['ALLOW_ANY'], ipAcl: ['ALLOW_ANY'], compression: false, replicaCount: 1, sectorSize: 4096, labels: [],
        qosPolicyUUID: '', placementRestrictions: [], sourceSnapshotUUID: '', sourceSnapshotName: '', encrypted: false,
        state: 'Creating', generation: 1, placement: null, failureReason: '', rollbackSnapshotUUID: '', creationTime: new Date(now.ms).toISOString(),
        ...overrides,
      };
    }
    const read = async <T>(key: string) => parseRecord<T>(key, (await kv.get(key))?.value.toString() ?? null);
    const readVolume = (uuid: string) => read<VolumeRecord>(keys.volume(uuid));
    async function report(v: VolumeRecord, node: string, state: VolumeStatusRecord['state'], extra: Partial<VolumeStatusRecord> = {}) {
      const fresh = (await readVolume(v.UUID)) ?? v;
      const status: VolumeStatusRecord = {
        volumeUUID: v.UUID, nodeUUID: node, generation: fresh.generation, state, error: '', snapshots: [], connectedHosts: [],
        logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: new Date().toISOString(), ...extra,
      };
      await putRecord(client, keys.volumeStatus(v.UUID, node), status);
    }
    /** strata_volume_failovers_total and the duration histogram's count and sum for one kind (this process's registry). */
    async function failoverMetrics(kind: FailoverKind) {
      const durations = (await failoverDuration.get()).values.filter((v) => v.labels['kind'] === kind);
      return {
        count: (await failovers.get()).values.find((v) => v.labels['kind'] === kind)?.value ?? 0,
        timed: durations.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0,
        seconds: durations.find((v) => v.metricName?.endsWith('_sum'))?.value ?? 0,
      };
    }
    /** What a primary's agent reports once it serves: Served, with the copies it mirrors to. */
    const servedAsPrimary = (nodes: readonly string[]): Partial<VolumeStatusRecord> => ({ replicaLegs: nodes.map((nodeUUID) => ({ nodeUUID, state: 'InSync', syncPercent: 100 })) });
    const until = <T>(what: string, probe: () => Promise<T | undefined | false>) => waitUntil(probe, what, 5000);
    /** Lets the controller see what was just written and finish its pass. */
    const settle = async () => {
      await new Promise((r) => setTimeout(r, 300));
      await controller.idle();
    };

    it('places a volume on distinct servers, allocates nsid and port, writes assignments, and goes Available once served', async () => {
      const nodes = [await storageNode(), await storageNode(), await storageNode(50n * GiB)];
      await startController();
      try {
        const v = volume({ replicaCount: 2, acl: ['nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555'] });
        await putRecord(client, keys.volume(v.UUID), v);
        const placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        assert.equal(placed.nodeList.length, 2);
        assert.equal(new Set(placed.nodeList.map((n) => nodes.find((x) => x.node.UUID === n)!.server.UUID)).size, 2, 'distinct servers');
        assert.ok(!placed.nodeList.includes(nodes[2]!.node.UUID), 'the fullest node is not chosen');
        assert.equal(placed.nsid, 1);
        assert.equal(placed.port, 20000);
        assert.equal(placed.primaryNodeUUID, placed.nodeList[0]);
        assert.equal((await readVolume(v.UUID))?.state, 'Creating');

        const assignments = await Promise.all(placed.nodeList.map((n) => read<VolumeAssignment>(keys.assignment(n, v.UUID))));
        assert.deepEqual(assignments.map((a) => [a?.role, a?.anaState]), [['primary', 'optimized'], ['replica', 'inaccessible']]);
        assert.equal(assignments[0]?.subsystemNQN, `${CLUSTER_NQN}:vol:${v.UUID}`);
        assert.deepEqual(assignments.map((a) => [a?.cntlidMin, a?.cntlidMax]), [[1, 1000], [1001, 2000]]);
        assert.deepEqual(assignments[0]?.acl, v.acl);

        await report(v, placed.nodeList[0]!, 'Served');
        await controller.idle();
        assert.equal((await readVolume(v.UUID))?.state, 'Creating', 'one node is not enough');
        await report(v, placed.nodeList[1]!, 'Served');
        await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');
        assert.ok(events.some((e) => e.eventName === 'VolumeAvailable'));

        // An update bumps the generation: assignments follow, Available again once re-served.
        const updated = { ...(await readVolume(v.UUID))!, state: 'Updating' as const, generation: 2, acl: ['ALLOW_NONE'] };
        await putRecord(client, keys.volume(v.UUID), updated);
        await until('assignments updated', async () => (await read<VolumeAssignment>(keys.assignment(placed.nodeList[1]!, v.UUID)))?.generation === 2);
        assert.deepEqual((await read<VolumeAssignment>(keys.assignment(placed.nodeList[0]!, v.UUID)))?.acl, ['ALLOW_NONE']);
        for (const n of placed.nodeList) await report(v, n, 'Served');
        await until('Available after update', async () => (await readVolume(v.UUID))?.state === 'Available');

        // Deleting: assignments go, and once nodes report Absent, everything goes.
        await putRecord(client, keys.volume(v.UUID), { ...(await readVolume(v.UUID))!, state: 'Deleting', generation: 3 });
        await until('assignments removed', async () => (await kv.keys(keys.assignmentsPrefix())).length === 0);
        assert.ok(await readVolume(v.UUID), 'kept until the nodes report it gone');
        for (const n of placed.nodeList) await report(v, n, 'Absent');
        await until('deleted', async () => (await readVolume(v.UUID)) === null);
        assert.equal((await kv.keys(keys.volumeStatusPrefix(v.UUID))).length, 0);
        assert.equal(await kv.get(keys.nsid(1)), null, 'nsid freed');
        assert.equal(await kv.get(keys.volumePort(20000)), null, 'port freed');
      } finally {
        await stopController();
      }
    });

    it('sees a node registered just before a volume (changes arrive in revision order)', async () => {
      await startController();
      try {
        for (let i = 0; i < 5; i++) {
          await deletePrefix(keys.volumesPrefix());
          await deletePrefix(keys.nodesPrefix());
          await deletePrefix(keys.presencePrefix());
          await storageNode();
          const v = volume();
          await putRecord(client, keys.volume(v.UUID), v);
          const placed = await until('placement', async () => {
            const now = await readVolume(v.UUID);
            return now?.placement ?? (now?.state === 'Failed' ? now.failureReason : undefined);
          });
          assert.equal(typeof placed, 'object', `placed, not failed: ${String(placed)}`);
        }
      } finally {
        await stopController();
      }
    });

    it('places by the storage pool\'s measured capacity and free space once the pool reports', async () => {
      const { node } = await storageNode(100n * GiB);
      // The pool holds less than the raw device (parity, filesystem); snapshots use 3 of its 5 GiB.
      await putRecord(client, keys.nodePool(node.UUID), nodePoolRecord(node, { capacityBytes: String(5n * GiB), freeBytes: String(2n * GiB) }));
      await startController();
      try {
        const overCapacity = volume({ sizeBytes: String(6n * GiB) });
        const overFree = volume({ sizeBytes: String(3n * GiB) });
        await putRecord(client, keys.volume(overCapacity.UUID), overCapacity);
        await putRecord(client, keys.volume(overFree.UUID), overFree);
        await until('both Failed', async () => (await readVolume(overCapacity.UUID))?.state === 'Failed' && (await readVolume(overFree.UUID))?.state === 'Failed');
        assert.match((await readVolume(overFree.UUID))!.failureReason, /free capacity/);
        const fits = volume({ sizeBytes: String(2n * GiB) });
        await putRecord(client, keys.volume(fits.UUID), fits);
        assert.deepEqual((await until('placement', async () => (await readVolume(fits.UUID))?.placement ?? undefined)).nodeList, [node.UUID]);
      } finally {
        await stopController();
      }
    });

    it('fails a volume that cannot be placed, and one a node failed to serve', async () => {
      // The node's pool has reported: its lack of room is known, so waiting cannot help.
      const { node } = await storageNode(5n * GiB);
      await putRecord(client, keys.nodePool(node.UUID), nodePoolRecord(node, { capacityBytes: String(5n * GiB), freeBytes: String(5n * GiB) }));
      await startController();
      try {
        const tooBig = volume({ sizeBytes: String(6n * GiB) });
        const tooMany = volume({ replicaCount: 2, sizeBytes: String(GiB) });
        await putRecord(client, keys.volume(tooBig.UUID), tooBig);
        await putRecord(client, keys.volume(tooMany.UUID), tooMany);
        await until('both Failed', async () => (await readVolume(tooBig.UUID))?.state === 'Failed' && (await readVolume(tooMany.UUID))?.state === 'Failed');
        assert.match((await readVolume(tooBig.UUID))!.failureReason, /free capacity/);
        assert.match((await readVolume(tooMany.UUID))!.failureReason, /2 Active node\(s\) needed/);
        assert.ok(events.filter((e) => e.eventName === 'VolumeFailed').length >= 2);

        const v = volume({ sizeBytes: String(GiB) });
        await putRecord(client, keys.volume(v.UUID), v);
        const placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        await report(v, placed.nodeList[0]!, 'Failed', { error: 'this server has no NVMe target (nvmet) in its kernel' });
        await until('Failed', async () => (await readVolume(v.UUID))?.state === 'Failed');
        assert.match((await readVolume(v.UUID))!.failureReason, /no NVMe target/);
      } finally {
        await stopController();
      }
    });

    it('keeps a volume Creating while its node\'s pool has not reported, and places it once the report arrives', async () => {
      // Active, but the agent's session has delivered neither its inventory nor its pool yet.
      const serial = `SN-${randomUUID().slice(0, 8)}`;
      const { nodes: [node] } = await joinServer(client, { nodes: [{ managedDeviceSerials: [serial] }] });
      await startController();
      try {
        const v = volume();
        await putRecord(client, keys.volume(v.UUID), v);
        await settle();
        const waiting = await readVolume(v.UUID);
        assert.equal(waiting?.state, 'Creating', `waits for the pool report: ${waiting?.failureReason}`);
        assert.equal(waiting?.placement, null);
        assert.ok(!events.some((e) => e.eventName === 'VolumeFailed'));

        await putRecord(client, keys.nodePool(node!.UUID), nodePoolRecord(node!, { capacityBytes: String(100n * GiB), freeBytes: String(100n * GiB) }));
        const placed = await until('placement after the pool report', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        assert.deepEqual(placed.nodeList, [node!.UUID]);
        await report(v, node!.UUID, 'Served');
        await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');
      } finally {
        await stopController();
      }
    });

    it('fails a volume after the creating timeout when the nodes that might hold it never report their pool, naming them', async () => {
      // One node reported and is too small; the other never reports.
      const { node: small } = await storageNode(5n * GiB);
      await putRecord(client, keys.nodePool(small.UUID), nodePoolRecord(small, { capacityBytes: String(5n * GiB), freeBytes: String(5n * GiB) }));
      const { nodes: [silent] } = await joinServer(client, { nodes: [{ managedDeviceSerials: [`SN-${randomUUID().slice(0, 8)}`] }] });
      await startController();
      try {
        const v = volume({ sizeBytes: String(6n * GiB) });
        await putRecord(client, keys.volume(v.UUID), v);
        await settle();
        assert.equal((await readVolume(v.UUID))?.state, 'Creating', 'the silent node may have room');

        now.ms += 61_000;
        await until('timed out', async () => (await readVolume(v.UUID))?.state === 'Failed');
        const reason = (await readVolume(v.UUID))!.failureReason;
        assert.match(reason, /^cannot place volume within 60 s: not enough free capacity/);
        assert.match(reason, new RegExp(`node\\(s\\) ${silent!.UUID} never reported their storage pool`));
        assert.ok(!reason.includes(small.UUID), `only the silent node is named: ${reason}`);
        assert.ok(events.some((e) => e.eventName === 'VolumeFailed' && e.description.includes(silent!.UUID)), 'the VolumeFailed event says why');
      } finally {
        await stopController();
      }
    });

    it('keeps a volume Creating while a node\'s pool reports itself down (a node just rebooted), places it once the pool is up, and names the pool when it never is', async () => {
      // Three Active nodes; one's pool is down (Failed, no capacity) as in an agent's first
      // seconds after a reboot. Its lack of room is not final: a 3-copy volume waits for it.
      const nodes = [await storageNode(), await storageNode(), await storageNode()];
      const [up1, up2, rebooted] = nodes.map((n) => n.node);
      for (const n of [up1!, up2!]) await putRecord(client, keys.nodePool(n.UUID), nodePoolRecord(n, { capacityBytes: String(100n * GiB), freeBytes: String(100n * GiB) }));
      const downReport = (n: NodeRecord) => nodePoolRecord(n, { state: 'Failed', error: 'the storage pool cannot be brought up: md array not running yet' });
      await putRecord(client, keys.nodePool(rebooted!.UUID), downReport(rebooted!));
      await startController();
      try {
        const v = volume({ replicaCount: 3 });
        await putRecord(client, keys.volume(v.UUID), v);
        const waiting = await until('waitingFor recorded', async () => (await readVolume(v.UUID))?.waitingFor);
        assert.match(waiting, new RegExp(`storage pool of node\\(s\\) ${rebooted!.UUID} is down`));
        assert.equal((await readVolume(v.UUID))?.state, 'Creating', 'the down pool may come up');
        assert.ok(!events.some((e) => e.eventName === 'VolumeFailed'));

        await putRecord(client, keys.nodePool(rebooted!.UUID), nodePoolRecord(rebooted!, { capacityBytes: String(100n * GiB), freeBytes: String(100n * GiB) }));
        const placed = await until('placement once the pool is up', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        assert.deepEqual([...placed.nodeList].sort(), [up1!.UUID, up2!.UUID, rebooted!.UUID].sort());

        // A pool that stays down: the timeout names the node and the pool's own reason.
        const w = volume({ replicaCount: 3, sizeBytes: String(GiB) });
        await putRecord(client, keys.nodePool(rebooted!.UUID), downReport(rebooted!));
        await putRecord(client, keys.volume(w.UUID), w);
        await until('waiting', async () => (await readVolume(w.UUID))?.waitingFor);
        now.ms += 61_000;
        await until('timed out', async () => (await readVolume(w.UUID))?.state === 'Failed');
        const reason = (await readVolume(w.UUID))!.failureReason;
        assert.match(reason, /^cannot place volume within 60 s: not enough free capacity/);
        assert.ok(reason.includes(`node ${rebooted!.UUID}: the storage pool cannot be brought up: md array not running yet`), reason);
      } finally {
        await stopController();
      }
    });

    it('waits for nodes while they are inactive, then times out', async () => {
      const { server } = await storageNode();
      await markAbsent(client, server.UUID);
      await startController();
      try {
        const v = volume();
        await putRecord(client, keys.volume(v.UUID), v);
        await controller.idle();
        assert.equal((await readVolume(v.UUID))?.state, 'Creating', 'waits: the node may come back');
        now.ms += 61_000;
        await until('timed out', async () => (await readVolume(v.UUID))?.state === 'Failed');
        assert.match((await readVolume(v.UUID))!.failureReason, /cannot place/);
      } finally {
        await stopController();
      }
    });

    it('records why a volume waits to be placed (cluster health shows it), and forgets it once placed', async () => {
      const { server, node } = await storageNode();
      await markAbsent(client, server.UUID);
      await startController();
      try {
        const v = volume();
        await putRecord(client, keys.volume(v.UUID), v);
        const waiting = await until('waitingFor recorded', async () => (await readVolume(v.UUID))?.waitingFor);
        assert.match(waiting, /Active node/);
        await markPresent(client, server.UUID, [node.UUID]);
        const placed = await until('placed', async () => { const got = await readVolume(v.UUID); return got?.placement ? got : undefined; });
        assert.equal(placed.waitingFor, undefined, 'no longer waiting');
      } finally {
        await stopController();
      }
    });

    it('takes snapshots on every node, places clones where the snapshot is, and resumes under a new leader', async () => {
      await storageNode();
      await storageNode();
      await startController();
      const v = volume({ replicaCount: 2 });
      let placed: NonNullable<VolumeRecord['placement']>;
      try {
        await putRecord(client, keys.volume(v.UUID), v);
        placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        for (const n of placed.nodeList) await report(v, n, 'Served');
        await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');
      } finally {
        await stopController();
      }

      // A new leader picks the work up from etcd alone.
      await startController();
      try {
        const snapshot: SnapshotRecord = {
          UUID: randomUUID(), name: 's1', projectName: 'default', description: '', sourceVolumeUUID: v.UUID, sourceVolumeName: v.name,
          sizeBytes: v.sizeBytes, compression: false, sectorSize: 4096, labels: [], state: 'Creating', failureReason: '', retentionSeconds: 0, creationTime: new Date().toISOString(),
        };
        await putRecord(client, keys.snapshot(snapshot.UUID), snapshot);
        await until('snapshot in assignments', async () => {
          const a = await Promise.all(placed.nodeList.map((n) => read<VolumeAssignment>(keys.assignment(n, v.UUID))));
          return a.every((x) => x?.snapshotUUIDs.includes(snapshot.UUID));
        });
        for (const n of placed.nodeList) await report(v, n, 'Served', { snapshots: [{ snapshotUUID: snapshot.UUID, state: 'Available', error: '' }] });
        await until('snapshot Available', async () => (await read<SnapshotRecord>(keys.snapshot(snapshot.UUID)))?.state === 'Available');

        const clone = volume({ replicaCount: 1, sourceSnapshotUUID: snapshot.UUID, sourceSnapshotName: 's1' });
        await putRecord(client, keys.volume(clone.UUID), clone);
        const clonePlacement = await until('clone placed', async () => (await readVolume(clone.UUID))?.placement ?? undefined);
        assert.ok(placed.nodeList.includes(clonePlacement.nodeList[0]!), 'a clone lives where its snapshot is');
        assert.equal((await read<VolumeAssignment>(keys.assignment(clonePlacement.nodeList[0]!, clone.UUID)))?.cloneFromSnapshotUUID, snapshot.UUID);
        assert.notEqual(clonePlacement.nsid, placed.nsid);
        assert.notEqual(clonePlacement.port, placed.port);

        // Deleting the snapshot drops it from assignments; gone once no node reports it.
        await putRecord(client, keys.snapshot(snapshot.UUID), { ...(await read<SnapshotRecord>(keys.snapshot(snapshot.UUID)))!, state: 'Deleting' });
        await until('snapshot out of assignments', async () => !(await read<VolumeAssignment>(keys.assignment(placed.nodeList[0]!, v.UUID)))?.snapshotUUIDs.length);
        for (const n of placed.nodeList) await report(v, n, 'Served');
        await until('snapshot record gone', async () => (await read<SnapshotRecord>(keys.snapshot(snapshot.UUID))) === null);
      } finally {
        await stopController();
      }
    });

    // Leases and the leader key: etcd only.
    if (onEtcd) it('a deposed leader writes nothing', async () => {
      await storageNode();
      await startController();
      try {
        // Another instance takes the leader key behind this one's back.
        await etcdClient!.delete().key(keys.leader());
        await etcdClient!.put(keys.leader()).value(JSON.stringify({ instanceId: 'other', since: '' }));
        const v = volume();
        await putRecord(client, keys.volume(v.UUID), v);
        await new Promise((r) => setTimeout(r, 300));
        await controller.idle();
        assert.equal((await readVolume(v.UUID))?.placement, null, 'no placement written by a deposed leader');
      } finally {
        await stopController();
      }
    });

    it('a replicated volume: replica set at placement, replication in every assignment, failover only to an in-sync copy', async () => {
      const nodes = [await storageNode(), await storageNode(), await storageNode()];
      await startController();
      try {
        const v = volume({ replicaCount: 3 });
        await putRecord(client, keys.volume(v.UUID), v);
        const placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        const set = await read<ReplicaSetRecord>(keys.replicaSet(v.UUID));
        assert.ok(set, 'the replica set is written with the placement');
        assert.equal(set.epoch, 1);
        assert.equal(set.primaryNodeUUID, placed.primaryNodeUUID);
        assert.deepEqual(set.inSync, placed.nodeList, 'every new copy is in sync');
        const [p, r1, r2] = placed.nodeList as [string, string, string];
        const a = await read<VolumeAssignment>(keys.assignment(r1, v.UUID));
        assert.equal(a?.replication?.epoch, 1);
        assert.equal(a?.replication?.primaryNodeUUID, p);
        assert.equal(a?.replication?.primaryHostNQN, `${CLUSTER_NQN}:node:${p}`);
        assert.deepEqual(a?.replication?.legs.map((l) => [l.nodeUUID, l.inSync]), placed.nodeList.map((n) => [n, true]));
        for (const n of placed.nodeList) await report(v, n, 'Served');
        await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');
        await until('FullyProtected announced', async () => events.some((e) => e.eventName === 'VolumeFullyProtected'));

        // The primary's agent takes r1 out of sync (as after losing it); then the primary's server dies.
        await putRecord(client, keys.replicaSet(v.UUID), { ...(await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!, inSync: [p, r2] });
        const serverOf = (n: string) => nodes.find((x) => x.node.UUID === n)!.server.UUID;
        await markAbsent(client, serverOf(r2));
        await markAbsent(client, serverOf(p));
        await settle();
        let now1 = await read<ReplicaSetRecord>(keys.replicaSet(v.UUID));
        assert.equal(now1?.primaryNodeUUID, p, 'the only live copy (r1) is out of sync: never promoted');
        const metricsBefore = await failoverMetrics('unplanned');
        assert.equal(now1?.epoch, 1);
        await until('NotAvailable announced', async () => events.some((e) => e.eventName === 'VolumeNotAvailable'));

        // The in-sync copy's server returns: it is promoted, in a new epoch, and assignments follow.
        await markPresent(client, serverOf(r2), [r2]);
        now1 = await until('promoted', async () => {
          const got = await read<ReplicaSetRecord>(keys.replicaSet(v.UUID));
          return got?.epoch === 2 && got;
        });
        assert.equal(now1.primaryNodeUUID, r2);
        assert.deepEqual(now1.inSync, [r2], 'the lost primary leaves the in-sync set in the promotion itself');
        assert.ok(events.some((e) => e.eventName === 'VolumePrimaryChanged'));
        const promoted = await until('assignments of epoch 2', async () => {
          const got = await read<VolumeAssignment>(keys.assignment(r2, v.UUID));
          return got?.replication?.epoch === 2 && got;
        });
        assert.deepEqual([promoted.role, promoted.anaState], ['primary', 'optimized']);
        const old = await read<VolumeAssignment>(keys.assignment(p, v.UUID));
        assert.deepEqual([old?.role, old?.anaState, old?.replication?.primaryHostNQN], ['replica', 'inaccessible', `${CLUSTER_NQN}:node:${r2}`]);

        // Counted once, unplanned; timed from the primary's lease gone to the new primary serving.
        assert.equal((await failoverMetrics('unplanned')).count, metricsBefore.count + 1);
        await settle();
        assert.equal((await failoverMetrics('unplanned')).timed, metricsBefore.timed, 'not timed before the new primary serves');
        now.ms += 7000;
        await report(v, r2, 'Served', servedAsPrimary([p, r1, r2]));
        await until('failover timed', async () => (await failoverMetrics('unplanned')).timed === metricsBefore.timed + 1);
        assert.equal((await failoverMetrics('unplanned')).seconds - metricsBefore.seconds, 7);

        // Deleting the volume removes its replica set with it.
        await putRecord(client, keys.volume(v.UUID), { ...(await readVolume(v.UUID))!, state: 'Deleting' });
        for (const n of placed.nodeList) await report(v, n, 'Absent');
        await until('gone', async () => (await readVolume(v.UUID)) === null);
        assert.equal(await read(keys.replicaSet(v.UUID)), null);
      } finally {
        await stopController();
      }
    });

    it('a replicated volume grows: every copy\'s assignment carries the new size at the new generation; the replicas\' fences follow the size the primary records; Available once every copy reports it', async () => {
      await storageNode();
      await storageNode();
      await storageNode();
      await startController();
      try {
        const v = volume({ replicaCount: 3, sizeBytes: String(GiB) });
        await putRecord(client, keys.volume(v.UUID), v);
        const placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        const created = await read<ReplicaSetRecord>(keys.replicaSet(v.UUID));
        assert.equal(created?.hostSizeBytes, String(GiB), 'a new set records the size every path shows');
        for (const n of placed.nodeList) await report(v, n, 'Served');
        await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');

        // What the API's PUT writes (volume-service.ts): the size, Updating, a new generation.
        const grown = { ...(await readVolume(v.UUID))!, sizeBytes: String(2n * GiB), state: 'Updating' as const, generation: 2 };
        await putRecord(client, keys.volume(v.UUID), grown);
        for (const n of placed.nodeList) {
          await until(`the grown assignment of ${n}`, async () => {
            const a = await read<VolumeAssignment>(keys.assignment(n, v.UUID));
            return a?.generation === 2 && a.sizeBytes === String(2n * GiB) && a.replication?.legs.length === 3 && a.replication.hostSizeBytes === String(GiB);
          });
        }
        // The primary's mirror grows first; the replicas keep their fences at the old size and
        // report the previous generation meanwhile (agent/datapath/reconcile/pass-backings.ts).
        const replicas = placed.nodeList.filter((n) => n !== placed.primaryNodeUUID);
        for (const n of replicas) await report(v, n, 'Served', { generation: 1 });
        await report(v, placed.primaryNodeUUID, 'Served');
        await settle();
        assert.equal((await readVolume(v.UUID))?.state, 'Updating', 'not done while the replicas show the old size');
        // The primary records what its path serves (ReplicaSetStore.recordHostSize): every copy's
        // assignment carries it, and the replicas grow to it.
        await putRecord(client, keys.replicaSet(v.UUID), { ...(await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!, hostSizeBytes: String(2n * GiB) });
        for (const n of replicas) {
          await until(`the recorded size in the assignment of ${n}`, async () => (await read<VolumeAssignment>(keys.assignment(n, v.UUID)))?.replication?.hostSizeBytes === String(2n * GiB));
          await report(v, n, 'Served');
        }
        await until('Available again', async () => (await readVolume(v.UUID))?.state === 'Available');
      } finally {
        await stopController();
      }
    });

    /**
     * Two storage nodes and an Unattached spare (a server added with extendCluster false: placement
     * skips it), the controller started, and a 2-copy volume Available on the two.
     */
    async function replaceBed() {
      const nodes = [await storageNode(), await storageNode()];
      const spareSerial = `SN-${randomUUID().slice(0, 8)}`;
      const spare = await joinServer(client, { nodes: [{ managedDeviceSerials: [spareSerial], unattached: true }] });
      await reportInventory(client, spare.server.UUID, { devices: [{ serial: spareSerial, sizeBytes: String(100n * GiB), present: true }] });
      const spareNode = spare.nodes[0]!.UUID;
      await startController();
      const v = volume({ replicaCount: 2 });
      await putRecord(client, keys.volume(v.UUID), v);
      const placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
      assert.ok(!placed.nodeList.includes(spareNode), 'an Unattached node takes no new volume');
      for (const n of placed.nodeList) await report(v, n, 'Served');
      await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');
      const serverOf = (n: string) => nodes.find((x) => x.node.UUID === n)!.server.UUID;
      const replace = (source: string) => {
        const command: NodeCommandRecord = {
          nodeUUID: source, id: randomUUID(), kind: 'replace', desired: 'Stopped', force: false, considerBackend: false, targetNodeUUID: spareNode, requestedAt: new Date().toISOString(),
        };
        return putRecord(client, keys.nodeCommand(source), command);
      };
      return { v, placed, spareNode, serverOf, replace };
    }

    it('node stop and replace: a primary its agent left out of a present server\'s presence fails over; a replace moves the copy to its target at once, then detaches the source', async () => {
      try {
        const { v, placed, spareNode, serverOf, replace } = await replaceBed();
        const [p, r] = placed.nodeList as [string, string];

        // Node stop: the agent handed the volume over and left the node out of its presence key;
        // the server stays present (its agent runs). The in-sync copy is promoted.
        await markPresent(client, serverOf(p), []);
        const promoted = await until('promoted', async () => {
          const got = await read<ReplicaSetRecord>(keys.replicaSet(v.UUID));
          return got?.epoch === 2 && got;
        });
        assert.equal(promoted.primaryNodeUUID, r);

        // The new primary recorded the stopped copy out of sync; the node's server is then lost for
        // good (Inactive) and an administrator replaces the node with the spare.
        await putRecord(client, keys.replicaSet(v.UUID), { ...promoted, inSync: [r] });
        await markAbsent(client, serverOf(p));
        await replace(p);
        const moved = await until('the copy moved to the target', async () => {
          const got = await readVolume(v.UUID);
          return got?.placement?.nodeList.includes(spareNode) && got;
        });
        assert.deepEqual(moved.placement!.nodeList, placed.nodeList.map((n) => (n === p ? spareNode : n)), 'the target takes the source\'s place');
        assert.ok(events.some((e) => e.eventName === 'VolumeReplicaReplaced' && /replaced by an administrator/.test(e.description)));
        const assigned = await until('the target\'s assignment', async () => (await read<VolumeAssignment>(keys.assignment(spareNode, v.UUID))) ?? undefined);
        assert.equal(assigned.role, 'replica');
        await settle();
        assert.equal((await read<NodeCommandRecord>(keys.nodeCommand(p)))?.completedAt, undefined, 'not finished while the target\'s copy resynchronizes');

        // The primary resynchronized the target in full and recorded it in sync: the source is detached.
        await putRecord(client, keys.replicaSet(v.UUID), { ...(await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!, inSync: [r, spareNode] });
        const done = await until('replace completed', async () => {
          const got = await read<NodeCommandRecord>(keys.nodeCommand(p));
          return got?.completedAt ? got : undefined;
        });
        assert.ok(done.completedAt);
        assert.equal((await read<NodeRecord>(keys.node(p)))?.unattached, true, 'the source is detached');
        assert.equal((await read<NodeRecord>(keys.node(spareNode)))?.unattached, undefined, 'the target is attached');
        assert.ok(events.some((e) => e.eventName === 'NodeReplaced'));
      } finally {
        await stopController();
      }
    });

    it('a replace of a node whose copy is still in sync (its agent stopped, its kernel still serves the export): the copy leaves the node list and the in-sync set in one change', async () => {
      try {
        const { v, placed, spareNode, serverOf, replace } = await replaceBed();
        const p = placed.primaryNodeUUID;
        const r = placed.nodeList.find((n) => n !== p)!;
        // The replica's agent stops: its server leaves presence, the primary never lost the copy.
        await markAbsent(client, serverOf(r));
        assert.deepEqual([...(await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!.inSync].sort(), [...placed.nodeList].sort());
        await replace(r);
        const moved = await until('the copy moved to the target', async () => {
          const got = await readVolume(v.UUID);
          return got?.placement?.nodeList.includes(spareNode) && got;
        });
        assert.deepEqual(moved.placement!.nodeList, placed.nodeList.map((n) => (n === r ? spareNode : n)));
        const set = (await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!;
        assert.deepEqual(set.inSync, [p], 'the source is out of the in-sync set (with the node list, in one transaction), the target not in it yet');
        assert.equal(set.epoch, 1, 'the primary stayed');
        const assigned = await until('the primary\'s assignment without the source', async () => {
          const got = await read<VolumeAssignment>(keys.assignment(p, v.UUID));
          return got?.replication?.legs.every((l) => l.nodeUUID !== r) && got;
        });
        assert.deepEqual(assigned.replication!.legs.map((l) => [l.nodeUUID, l.inSync]).sort(), [[p, true], [spareNode, false]].sort());
      } finally {
        await stopController();
      }
    });

    it('a replace never takes the only live in-sync copy: a source whose copy is in sync while the primary\'s node is gone keeps it', async () => {
      try {
        const { v, placed, serverOf, replace } = await replaceBed();
        const p = placed.primaryNodeUUID;
        const r = placed.nodeList.find((n) => n !== p)!;
        // Both servers gone (the primary's promotion needs an Active in-sync copy: none).
        await markAbsent(client, serverOf(r));
        await markAbsent(client, serverOf(p));
        await replace(r);
        await settle();
        assert.deepEqual((await readVolume(v.UUID))!.placement!.nodeList, placed.nodeList, 'the copy stays');
        assert.ok((await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!.inSync.includes(r));
      } finally {
        await stopController();
      }
    });

    it('a hand-over whose new primary records a third copy out of sync before the leader reads the set: still one VolumePrimaryChanged saying handed over', async () => {
      await storageNode();
      await storageNode();
      await storageNode();
      await startController();
      let stopped = false;
      try {
        const v = volume({ replicaCount: 3 });
        await putRecord(client, keys.volume(v.UUID), v);
        const placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        for (const n of placed.nodeList) await report(v, n, 'Served');
        await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');
        const p = placed.primaryNodeUUID;
        const [r1, r2] = placed.nodeList.filter((n) => n !== p) as [string, string];
        const changedBefore = events.filter((e) => e.eventName === 'VolumePrimaryChanged').length;
        // The leader reads nothing meanwhile: the new primary's change lands first.
        await stopController();
        stopped = true;
        const store = new ReplicaSetStore(client);
        assert.deepEqual(await store.handOver(v.UUID, 1, p, [r1]), { outcome: 'moved', primaryNodeUUID: r1, epoch: 2 });
        assert.equal(await store.markOutOfSync(v.UUID, 2, r1, [r2], 'not in the mirror when the volume started on its primary'), 'done');
        const set = (await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!;
        assert.match(set.reason, /^not in the mirror/);
        assert.match(set.epochReason ?? '', /^handed over/, 'how the epoch began is kept');
        await startController();
        stopped = false;
        await until('assignments of epoch 2', async () => (await read<VolumeAssignment>(keys.assignment(r1, v.UUID)))?.replication?.epoch === 2);
        await settle();
        const changed = events.filter((e) => e.eventName === 'VolumePrimaryChanged').slice(changedBefore);
        assert.equal(changed.length, 1, 'one VolumePrimaryChanged for the hand-over');
        assert.match(changed[0]!.description ?? '', /handed over/);
      } finally {
        if (!stopped) await stopController();
      }
    });

    it('a primary\'s hand-over (it moves the replica set itself): assignments follow as the agents served them at once, VolumePrimaryChanged once', async () => {
      await Promise.all([storageNode(), storageNode()]);
      await startController();
      try {
        const v = volume({ replicaCount: 2 });
        await putRecord(client, keys.volume(v.UUID), v);
        const placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        const [p, r] = [placed.primaryNodeUUID, placed.nodeList.find((n) => n !== placed.primaryNodeUUID)!];
        for (const n of placed.nodeList) await report(v, n, 'Served');
        await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');
        const before = await read<VolumeAssignment>(keys.assignment(r, v.UUID));
        const changedBefore = events.filter((e) => e.eventName === 'VolumePrimaryChanged').length;
        const metricsBefore = await failoverMetrics('planned');
        const unplannedBefore = await failoverMetrics('unplanned');

        const moved = await new ReplicaSetStore(client, () => new Date(now.ms)).handOver(v.UUID, 1, p, [r]);
        assert.deepEqual(moved, { outcome: 'moved', primaryNodeUUID: r, epoch: 2 });
        const set = (await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!;
        // What the promoted agent serves on the replica set's change, before the leader writes.
        const servedAtOnce = withReplicaSet(before!, set, CLUSTER_NQN);
        assert.deepEqual([servedAtOnce.role, servedAtOnce.anaState, servedAtOnce.replication?.epoch], ['primary', 'optimized', 2]);
        const written = await until('assignments of epoch 2', async () => {
          const got = await read<VolumeAssignment>(keys.assignment(r, v.UUID));
          return got?.replication?.epoch === 2 && got;
        });
        assert.equal(JSON.stringify(written), JSON.stringify(servedAtOnce), 'the leader\'s assignment is the one served already (nothing prepared again)');
        const old = await read<VolumeAssignment>(keys.assignment(p, v.UUID));
        assert.deepEqual([old?.role, old?.replication?.legs.find((l) => l.nodeUUID === p)?.inSync], ['replica', false]);
        await settle();
        const changed = events.filter((e) => e.eventName === 'VolumePrimaryChanged').slice(changedBefore);
        assert.equal(changed.length, 1, 'one VolumePrimaryChanged for the hand-over');
        assert.match(changed[0]!.description ?? '', /handed over/);
        assert.equal((await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))?.epoch, 2, 'the leader does not promote again');

        // Counted once, planned; timed from the hand-over's commit to the new primary serving.
        assert.equal((await failoverMetrics('planned')).count, metricsBefore.count + 1);
        assert.deepEqual(await failoverMetrics('unplanned'), unplannedBefore);
        now.ms += 2500;
        await report(v, r, 'Served', servedAsPrimary([p, r]));
        await until('hand-over timed', async () => (await failoverMetrics('planned')).timed === metricsBefore.timed + 1);
        assert.equal((await failoverMetrics('planned')).seconds - metricsBefore.seconds, 2.5);
      } finally {
        await stopController();
      }
    });

    it('a copy lost for good is re-created on another server once the permanent-failure timeout passes; not with fail-in-place', async () => {
      const nodes = [await storageNode(), await storageNode(), await storageNode()];
      await startController();
      try {
        const v = volume({ replicaCount: 2 });
        await putRecord(client, keys.volume(v.UUID), v);
        const placed = await until('placement', async () => (await readVolume(v.UUID))?.placement ?? undefined);
        const [p, r] = placed.nodeList as [string, string];
        const spare = nodes.find((n) => !placed.nodeList.includes(n.node.UUID))!.node.UUID;
        for (const n of placed.nodeList) await report(v, n, 'Served');
        await until('Available', async () => (await readVolume(v.UUID))?.state === 'Available');

        // The replica's server dies; its primary records the copy out of sync.
        await markAbsent(client, nodes.find((n) => n.node.UUID === r)!.server.UUID);
        await putRecord(client, keys.replicaSet(v.UUID), { ...(await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!, inSync: [p] });
        await settle();
        now.ms += 300_000;
        await settle();
        assert.deepEqual((await readVolume(v.UUID))?.placement?.nodeList, [p, r], 'not before the timeout');

        // fail-in-place: the volume waits for its node, whatever the time.
        await putRecord(client, keys.featureFlag('fail-in-place'), { name: 'fail-in-place', enabled: true });
        now.ms += 400_000;
        await new Promise((resolve) => setTimeout(resolve, 2500)); // a periodic pass
        await settle();
        assert.deepEqual((await readVolume(v.UUID))?.placement?.nodeList, [p, r], 'fail-in-place keeps the lost node');

        await putRecord(client, keys.featureFlag('fail-in-place'), { name: 'fail-in-place', enabled: false });
        const moved = await until('re-created on the spare node', async () => {
          const got = (await readVolume(v.UUID))?.placement?.nodeList;
          return got && got[1] !== r && got;
        });
        assert.deepEqual(moved, [p, spare], 'in the lost copy\'s place, on the server that holds no copy');
        const a = await until('the new node\'s assignment', async () => read<VolumeAssignment>(keys.assignment(spare, v.UUID)).then((x) => x ?? undefined));
        assert.deepEqual([a.role, a.replication?.legs.map((l) => [l.nodeUUID, l.inSync])], ['replica', [[p, true], [spare, false]]], 'a new copy, out of sync until resynced');
        // Not the lost copy's window (1001-2000): hosts keep that node's controller, and refuse a new one with its ID.
        assert.deepEqual([a.cntlidMin, a.cntlidMax], [2001, 3000], 'a controller-ID window no node of the volume had');
        assert.deepEqual((await readVolume(v.UUID))?.placement?.cntlidWindows, [0, 2]);
        const kept = await read<VolumeAssignment>(keys.assignment(p, v.UUID));
        assert.deepEqual([kept?.cntlidMin, kept?.cntlidMax], [1, 1000], 'the primary keeps its window');
        await until('the lost node\'s assignment removed', async () => (await read(keys.assignment(r, v.UUID))) === null);
        assert.ok(events.some((e) => e.eventName === 'VolumeReplicaReplaced'));

        // The primary reports the new copy resyncing, then records it in sync: announced once each.
        await report(v, p, 'Served', { replicaLegs: [{ nodeUUID: p, state: 'InSync', syncPercent: 100 }, { nodeUUID: spare, state: 'Resyncing', syncPercent: 30 }] });
        await until('VolumeRebuildStarted', async () => events.some((e) => e.eventName === 'VolumeRebuildStarted'));
        await report(v, p, 'Served', { replicaLegs: [{ nodeUUID: p, state: 'InSync', syncPercent: 100 }, { nodeUUID: spare, state: 'Resyncing', syncPercent: 60 }] });
        await putRecord(client, keys.replicaSet(v.UUID), { ...(await read<ReplicaSetRecord>(keys.replicaSet(v.UUID)))!, inSync: [p, spare] });
        await until('VolumeRebuildCompleted', async () => events.some((e) => e.eventName === 'VolumeRebuildCompleted'));
        await settle();
        assert.deepEqual(events.filter((e) => e.eventName.startsWith('VolumeRebuild')).map((e) => e.eventName), ['VolumeRebuildStarted', 'VolumeRebuildCompleted'], 'once each');
      } finally {
        await stopController();
      }
    });
    it('QoS: every assignment carries the volume\'s limits (each kind); a policy PUT, a resize, a project default and detaching rewrite them, a policy change without a new generation', async () => {
      await storageNode();
      await storageNode();
      const policy = (limit: PolicyRecord['limit']): PolicyRecord => ({
        UUID: randomUUID(), name: `p-${randomUUID().slice(0, 6)}`, description: '', state: 'Active', policyVisibility: 'Global', projectsNamesScope: [], limit, createdAt: new Date().toISOString(),
      });
      const iops = policy({ kind: 'limitIOPS', write: 100, read: 200 });
      const bw = policy({ kind: 'limitBw', write: 20, read: 5 });
      const perGb = policy({ kind: 'limitIOPSPerGB', write: 3, read: 7 });
      for (const p of [iops, bw, perGb]) await putRecord(client, keys.policy(p.UUID), p);
      const project = (policyUUID?: string): ProjectRecord => ({
        UUID: 'default-project', name: 'default', description: '', builtIn: true, createdAt: new Date().toISOString(),
        defaultPolicies: policyUUID ? [{ policyType: 'qosRateLimit', policyUUID }] : [],
      });
      await putRecord(client, keys.project('default'), project());
      const limits = (readIops: number, writeIops: number, readBytesPerSecond = 0, writeBytesPerSecond = 0) => ({ readIops, writeIops, readBytesPerSecond, writeBytesPerSecond });
      await startController();
      try {
        const a = volume({ qosPolicyUUID: iops.UUID, replicaCount: 2 });
        const b = volume({ qosPolicyUUID: bw.UUID });
        const c = volume({ qosPolicyUUID: perGb.UUID });
        const d = volume();
        for (const v of [a, b, c, d]) await putRecord(client, keys.volume(v.UUID), v);
        const assignments = async (v: VolumeRecord) => {
          const placed = await until(`placement of ${v.name}`, async () => (await readVolume(v.UUID))?.placement ?? undefined);
          return Promise.all(placed.nodeList.map(async (n) => (await read<VolumeAssignment>(keys.assignment(n, v.UUID)))!));
        };
        /** Waits until every node's assignment of `v` carries `want`. */
        const qosBecomes = (v: VolumeRecord, want: unknown) =>
          until(`${v.name}: qos ${JSON.stringify(want)}`, async () => {
            const all = await assignments(v);
            return all.length > 0 && all.every((x) => JSON.stringify(x.qos) === JSON.stringify(want)) && all;
          });

        const ofA = await qosBecomes(a, limits(200, 100));
        assert.equal(ofA.length, 2, 'the same limits on every node of the volume');
        await qosBecomes(b, limits(0, 0, 5_000_000, 20_000_000));
        // 10 GiB = 10.737… GB: 7 × 10.737 = 75.2 → 75 read IOPS, 3 × 10.737 = 32.2 → 32 write IOPS.
        await qosBecomes(c, limits(75, 32));
        const [plain] = await assignments(d);
        assert.equal(plain!.qos, null, 'no policy: null');

        // A policy PUT: its volumes' assignments follow, at the same generation.
        const generationBefore = (await readVolume(a.UUID))!.generation;
        await putRecord(client, keys.policy(iops.UUID), { ...iops, limit: { kind: 'limitBw', write: 1, read: 2 } });
        const changed = await qosBecomes(a, limits(0, 0, 2_000_000, 1_000_000));
        assert.deepEqual(changed.map((x) => x.generation), [generationBefore, generationBefore], 'no new generation: nothing for the data path but the limits');
        assert.equal((await readVolume(a.UUID))!.generation, generationBefore);

        // A resize (as the API writes it): per-GB limits scale with the new size.
        const sized = (await readVolume(c.UUID))!;
        await putRecord(client, keys.volume(c.UUID), { ...sized, sizeBytes: String(20n * GiB), state: 'Updating', generation: sized.generation + 1 });
        await qosBecomes(c, limits(150, 64));

        // The project's default applies to a volume naming none; removing it detaches (null).
        await putRecord(client, keys.project('default'), project(perGb.UUID));
        await qosBecomes(d, limits(75, 32));
        await qosBecomes(b, limits(0, 0, 5_000_000, 20_000_000));
        await putRecord(client, keys.project('default'), project());
        await qosBecomes(d, null);
        // A volume's own policy detached.
        const named = (await readVolume(b.UUID))!;
        await putRecord(client, keys.volume(b.UUID), { ...named, qosPolicyUUID: '', state: 'Updating', generation: named.generation + 1 });
        await qosBecomes(b, null);
      } finally {
        await stopController();
      }
    });
  });
}
