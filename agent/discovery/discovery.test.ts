// The discovery controller as hosts meet it: the real listener on loopback, fed by a real etcd,
// spoken to by a small NVMe/TCP host (testing/nvme-tcp-client.ts) the way Linux and nvme-cli do.
import assert from 'node:assert/strict';
import { connect as tcpConnect, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { ClusterRecord, NodeRecord, PresenceRecord, ServerRecord, VolumeAssignment, VolumeStatusRecord } from '../../lib/records.js';
import { freePort } from '../../lib/ports.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { WatchedStates } from '../../test/helpers/watched-state.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { testAssignment } from '../../test/kits/datapath/test-assignment.js';
import type { VolumeReportSnapshot, VolumeReportSource, VolumeStatusEntry } from '../datapath/reconcile/volume-report.js';
import { ClusterPathsStore } from './cluster-paths-store.js';
import { openDiscoveryService, type DiscoveryService } from './discovery-service.js';
import { PresentedHosts } from './presented-hosts.js';
import { decodeDiscoveryLog } from './log-page.js';
import { AdminOpcode, AEC_DISCOVERY_LOG_CHANGE, encodeSqe, AEN_DISCOVERY_LOG_CHANGE, FeatureId, NVME_VERSION, Property, readCString, Status, type Completion, type NvmeStatus } from './nvme.js';
import { assertOk, NvmeTcpTestClient } from '../../test/kits/discovery/nvme-tcp-client.js';

const DISCOVERY_NQN = 'nqn.2014-08.org.nvmexpress.discovery';
const CLUSTER: ClusterRecord = { UUID: 'c0ffee00-0000-4000-8000-0000000000d1', clusterName: 'disc', subsystemNQN: 'nqn.2016-01.io.strata:cluster:d1', supportedMaxReplicas: 3, createdAt: '', bootstrappedBy: 'test' };
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:d1000000-0000-4000-8000-000000000001';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:d1000000-0000-4000-8000-000000000002';
const H3 = 'nqn.2014-08.org.nvmexpress:uuid:d1000000-0000-4000-8000-000000000003';
const LOCAL = { server: 'a0000000-0000-4000-8000-000000000001', node: 'a1000000-0000-4000-8000-000000000001' };
const REMOTE = { server: 'b0000000-0000-4000-8000-000000000002', node: 'b1000000-0000-4000-8000-000000000002' };
const V1 = '11111111-1111-4111-8111-111111111111';
const V2 = '22222222-2222-4222-8222-222222222222';
const V3 = '33333333-3333-4333-8333-333333333333';
const nqn = (v: string) => `${CLUSTER.subsystemNQN}:vol:${v}`;

/** Stands in for the agent's data path: the served state of this node's volumes. */
class LocalReports implements VolumeReportSource {
  private snapshot: VolumeReportSnapshot = { sequence: 0, complete: true, volumes: [], takenAt: '' };
  private readonly listeners = new Set<(r: VolumeReportSnapshot) => void>();
  current() {
    return this.snapshot;
  }
  onChange(listener: (r: VolumeReportSnapshot) => void) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  acknowledged() {}
  serve(volumeUUID: string, generation = 1, state: VolumeStatusEntry['state'] = 'Served') {
    const volumes = this.snapshot.volumes.filter((v) => v.volumeUUID !== volumeUUID);
    volumes.push({ volumeUUID, nodeUUID: LOCAL.node, generation, state, error: '', snapshots: [], connectedHosts: [], logicalUsedBytes: '0', physicalUsedBytes: '0' });
    this.snapshot = { ...this.snapshot, sequence: this.snapshot.sequence + 1, volumes };
    for (const l of this.listeners) l(this.snapshot);
  }
}

const isStatus = (c: Completion, s: NvmeStatus) => c.status.sct === s.sct && c.status.sc === s.sc;

describe('NVMe/TCP discovery controller (loopback, real etcd)', () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  const states = new WatchedStates();
  let service: DiscoveryService;
  let port = 0;
  const presented = new PresentedHosts();
  const local = new LocalReports();
  const clients: NvmeTcpTestClient[] = [];
  const open = async () => {
    const c = await NvmeTcpTestClient.open('127.0.0.1', port);
    clients.push(c);
    return c;
  };
  const put = (key: string, value: unknown) => client.put(key).value(JSON.stringify(value));
  const assign = (volumeUUID: string, nodeUUID: string, port: number, overrides: Partial<VolumeAssignment> = {}) =>
    put(keys.assignment(nodeUUID, volumeUUID), testAssignment({ volumeUUID, nodeUUID, subsystemNQN: nqn(volumeUUID), nsid: port - 20000, port, acl: [H1], ...overrides }));
  const remoteServed = (volumeUUID: string, generation = 1) =>
    put(keys.volumeStatus(volumeUUID, REMOTE.node), { volumeUUID, nodeUUID: REMOTE.node, generation, state: 'Served', error: '', snapshots: [], connectedHosts: [], logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: '' } satisfies VolumeStatusRecord);
  const summary = (log: ReturnType<typeof decodeDiscoveryLog>) => log.entries.map((e) => `${e.subtype} ${e.subnqn.replace(`${CLUSTER.subsystemNQN}:vol:`, '')} ${e.traddr}:${e.trsvcid}`);

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    const server = (UUID: string, address: string): ServerRecord => ({ UUID, name: UUID, hostname: UUID, nodeUUIDs: [], endpoints: [address], createdAt: '' });
    const node = (UUID: string, serverUUID: string, discoveryEndpoint: string): NodeRecord => ({
      UUID, serverUUID, name: UUID, hostname: UUID, nvmeEndpoint: '', discoveryEndpoint, failureDomains: [], maxNvmeDevices: 1, managedDeviceSerials: [], journalDeviceSerial: '', ec: false, createdAt: '',
    });
    await put(keys.cluster(), CLUSTER);
    await put(keys.server(LOCAL.server), server(LOCAL.server, '127.0.0.1'));
    await put(keys.server(REMOTE.server), server(REMOTE.server, '127.0.0.2'));
    await put(keys.node(LOCAL.node), node(LOCAL.node, LOCAL.server, '127.0.0.1:8009'));
    await put(keys.node(REMOTE.node), node(REMOTE.node, REMOTE.server, '127.0.0.2:8009'));
    await put(keys.presence(REMOTE.server), { serverUUID: REMOTE.server, nodeUUIDs: [REMOTE.node], hostname: 'r', agentVersion: '', agentInstance: '', since: '' } satisfies PresenceRecord);
    // V1: H1, on both nodes. V2: anyone, this node only.
    await assign(V1, LOCAL.node, 20001);
    await assign(V1, REMOTE.node, 20001, { anaState: 'inaccessible', role: 'replica' });
    await assign(V2, LOCAL.node, 20002, { acl: ['ALLOW_ANY'] });
    await remoteServed(V1);
    local.serve(V1);
    local.serve(V2);
    service = await openDiscoveryService(
      { discoveryListenAddress: '127.0.0.1', discoveryPort: 0, discoveryMaxConnections: 64 },
      { store: new ClusterPathsStore(states.of(client)), serverUUID: LOCAL.server, nodeUUIDs: [LOCAL.node], firmware: '0.1.0', logger: silentLogger(), limits: { setupTimeoutMs: 1500 }, presented },
    );
    assert.ok(service.port);
    port = service.port;
    service.start(local);
    await waitUntil(() => service.paths.view()?.openPaths.length === 1, 'the first view from etcd');
  });

  after(async () => {
    for (const c of clients) c.close();
    await service?.stop();
    await states.stop();
    client?.close();
    await etcd?.stop();
  });

  it('records the host NQN a host presented in Connect, by the address it came from (names connected hosts)', async () => {
    const nqnOfThisHost = 'nqn.2014-08.org.nvmexpress:uuid:presented-from-loopback';
    assert.deepEqual(presented.presentedFrom('127.0.0.1').filter((n) => n === nqnOfThisHost), []);
    const host = await open();
    await host.icreq();
    assertOk((await host.connectAdmin({ subnqn: DISCOVERY_NQN, hostnqn: nqnOfThisHost, katoMs: 0 })).completion, 'Connect');
    assert.equal(presented.presentedFrom('127.0.0.1')[0], nqnOfThisHost);
    assert.deepEqual(presented.presentedFrom('127.0.0.2'), []);
  });

  it('sets up a connection as Linux does: ICReq, Connect, properties, Identify', async () => {
    const host = await open();
    const icresp = await host.icreq();
    assert.deepEqual(icresp, { pfv: 0, cpda: 0, digest: 0, maxh2cdata: 4096 });
    const { completion: connected } = await host.connectAdmin({ subnqn: DISCOVERY_NQN, hostnqn: H1, katoMs: 0 });
    assertOk(connected, 'Connect');
    const cntlid = connected.dw0 & 0xffff;
    assert.ok(cntlid >= 1 && cntlid <= 0xffef);

    const cap = await host.propertyGet(Property.CAP, 8);
    assert.equal(Number(cap.value & 0xffffn), 127, 'MQES');
    assert.equal(Number((cap.value >> 37n) & 1n), 1, 'NVM command set');
    assert.equal((await host.propertyGet(Property.VS)).value, BigInt(NVME_VERSION));
    assert.equal((await host.propertyGet(Property.CSTS)).value, 0n);
    assert.ok(isStatus((await host.identify()).completion, Status.CommandSequenceError), 'no Identify before CC.EN');
    assertOk(await host.propertySet(Property.CC, 0x460001), 'CC.EN');
    assert.equal((await host.propertyGet(Property.CC)).value, 0x460001n);
    assert.equal((await host.propertyGet(Property.CSTS)).value, 1n, 'CSTS.RDY');
    assert.ok(isStatus((await host.propertyGet(Property.CAP, 4)).completion, Status.InvalidField), 'CAP is 8 bytes');
    assert.ok(isStatus(await host.propertySet(Property.VS, 1), Status.InvalidField), 'VS is read-only');

    const id = await host.identify();
    assertOk(id.completion, 'Identify');
    assert.equal(id.data.length, 4096);
    assert.equal(id.data.readUInt16LE(78), cntlid, 'Identify cntlid = Connect cntlid (Linux checks)');
    assert.equal(id.data[111], 2, 'CNTRLTYPE discovery');
    assert.equal(readCString(id.data, 768, 256), DISCOVERY_NQN);
    assert.ok(isStatus((await host.identify(0)).completion, Status.InvalidField), 'CNS 0 (no namespaces)');
    assert.ok(isStatus((await host.identify(1, 512)).completion, Status.DataSglLengthInvalid));
    assertOk(await host.keepAlive(), 'Keep Alive');
    assertOk(await host.propertySet(Property.CC, 0x464001), 'CC.SHN');
    assert.equal((await host.propertyGet(Property.CSTS)).value & 0xcn, 0x8n, 'CSTS.SHST complete');
  });

  it('accepts the cluster’s subsystemNQN as a unique discovery NQN, and refuses other NQNs', async () => {
    const unique = await open();
    await unique.attach(H1, { subnqn: CLUSTER.subsystemNQN });
    assert.equal(readCString((await unique.identify()).data, 768, 256), CLUSTER.subsystemNQN);

    const refused = async (options: Parameters<NvmeTcpTestClient['connectAdmin']>[0]) => {
      const host = await open();
      await host.icreq();
      return (await host.connectAdmin(options)).completion;
    };
    const wrongNqn = await refused({ subnqn: nqn(V1), hostnqn: H1 });
    assert.ok(isStatus(wrongNqn, Status.ConnectInvalidParameters), 'a volume NQN is no discovery NQN');
    assert.equal(wrongNqn.dw0, (1 << 16) | 256, 'IATTR data, IPO subnqn');
    assert.equal((await refused({ subnqn: DISCOVERY_NQN, hostnqn: 'not-an-nqn' })).dw0, (1 << 16) | 512);
    const ioQueue = await refused({ subnqn: DISCOVERY_NQN, hostnqn: H1, qid: 1 });
    assert.ok(isStatus(ioQueue, Status.ConnectInvalidParameters));
    assert.equal(ioQueue.dw0, 42, 'IPO qid');
  });

  it('answers commands out of sequence and unknown opcodes with NVMe errors, and lives on', async () => {
    const host = await open();
    await host.icreq();
    const early = await host.submit(7, encodeSqe({ opcode: AdminOpcode.Identify, cid: 7 }));
    assert.ok(isStatus(early.completion, Status.CommandSequenceError), 'Identify before Connect');
    await host.connectAdmin({ subnqn: DISCOVERY_NQN, hostnqn: H2 });
    await host.enable();
    const cid = host.cid();
    assert.ok(isStatus((await host.submit(cid, encodeSqe({ opcode: 0x80, cid }))).completion, Status.InvalidOpcode));
    assert.ok(isStatus((await host.connectAdmin({ subnqn: DISCOVERY_NQN, hostnqn: H2 })).completion, Status.CommandSequenceError), 'a second Connect');
    assert.ok(isStatus(await host.setFeatures(0x07, 1), Status.InvalidField), 'number of queues: not here');
    assert.ok(isStatus(await host.setFeatures(FeatureId.KeepAliveTimer, 5000, true), Status.FeatureNotSaveable));
    assert.ok(isStatus(await host.setFeatures(FeatureId.AsyncEventConfig, 0x100), Status.InvalidField), 'only discovery log change events');
    assertOk(await host.setFeatures(FeatureId.KeepAliveTimer, 60_000), 'KATO');
    assert.equal((await host.getFeatures(FeatureId.KeepAliveTimer)).dw0, 60_000);
    assert.equal((await host.getFeatures(FeatureId.AsyncEventConfig, 3)).dw0, 0x4, 'changeable');
    assert.ok(isStatus((await host.getLogPage({ lid: 0x02, length: 512 })).completion, Status.InvalidLogPage));
    assertOk((await host.getLogPage({ length: 1024 })).completion, 'still serving');
  });

  it('serves each host exactly its log page, with offsets and partial reads', async () => {
    const h1 = await open();
    await h1.attach(H1);
    const log = await h1.readDiscoveryLog();
    assert.deepEqual(summary(log), [
      `2 ${V1} 127.0.0.1:20001`,
      `2 ${V1} 127.0.0.2:20001`,
      `2 ${V2} 127.0.0.1:20002`,
      `1 ${DISCOVERY_NQN} 127.0.0.2:8009`,
    ]);
    assert.ok(log.entries.every((e) => e.trtype === 3 && e.adrfam === 1 && e.cntlid === 0xffff && e.treq === 0));

    // Partial reads: the third entry alone; a header read in two halves.
    const third = await h1.getLogPage({ offset: 1024 + 2 * 1024, length: 1024 });
    assertOk(third.completion, 'third entry');
    assert.equal(readCString(third.data, 256, 256), nqn(V2));
    const low = await h1.getLogPage({ length: 8 });
    const high = await h1.getLogPage({ offset: 8, length: 8 });
    assert.equal(low.data.readBigUInt64LE(0), log.genctr);
    assert.equal(high.data.readBigUInt64LE(0), 4n, 'NUMREC');
    const pastEnd = await h1.getLogPage({ offset: 1024 + 4 * 1024 - 512, length: 1024 });
    assertOk(pastEnd.completion, 'a read running past the end');
    assert.ok(pastEnd.data.subarray(512).every((b) => b === 0), 'zeros past the end');
    assert.ok(isStatus((await h1.getLogPage({ offset: 2, length: 8 })).completion, Status.InvalidField), 'offset not dword aligned');
    assert.ok(isStatus((await h1.getLogPage({ offset: 1024 * 100, length: 8 })).completion, Status.InvalidField), 'offset past the log');
    assert.ok(isStatus((await h1.getLogPage({ length: 1024, transferBytes: 4096 })).completion, Status.DataSglLengthInvalid));

    const h3 = await open();
    await h3.attach(H3);
    assert.deepEqual(summary(await h3.readDiscoveryLog()), [`2 ${V2} 127.0.0.1:20002`, `1 ${DISCOVERY_NQN} 127.0.0.2:8009`], 'ALLOW_ANY only');
  });

  it('changes genctr and completes an Asynchronous Event Request when a host’s set changes', async () => {
    const h1 = await open();
    await h1.attach(H1, { katoMs: 30_000 });
    const h2 = await open();
    await h2.attach(H2, { katoMs: 30_000 });
    for (const h of [h1, h2]) assertOk(await h.setFeatures(FeatureId.AsyncEventConfig, AEC_DISCOVERY_LOG_CHANGE), 'AEC');
    const before1 = await h1.readDiscoveryLog();
    const before2 = await h2.readDiscoveryLog();
    const events = { h1: 0, h2: 0 };
    const aer = (h: NvmeTcpTestClient, name: 'h1' | 'h2') =>
      h.asyncEvent().then((c) => {
        events[name] += 1;
        return c;
      });
    let h1Event = aer(h1, 'h1');
    const h2Event = aer(h2, 'h2');

    // A volume for H1 is created: assignment, then this node serves it.
    await assign(V3, LOCAL.node, 20003);
    await sleep(300);
    assert.equal(events.h1, 0, 'not listed before it is served');
    local.serve(V3);
    const completion = await h1Event;
    assertOk(completion, 'AER');
    assert.equal(completion.dw0, AEN_DISCOVERY_LOG_CHANGE);
    const after1 = await h1.readDiscoveryLog();
    assert.ok(after1.genctr > before1.genctr);
    assert.ok(summary(after1).includes(`2 ${V3} 127.0.0.1:20003`));
    await sleep(300);
    assert.equal(events.h2, 0, 'H2’s set did not change');
    assert.equal((await h2.readDiscoveryLog()).genctr, before2.genctr);

    // The ACL changes to H2 (the node serves the new generation): both sets change.
    h1Event = aer(h1, 'h1');
    await assign(V3, LOCAL.node, 20003, { generation: 2, acl: [H2] });
    local.serve(V3, 2);
    assertOk(await h1Event, 'AER after the ACL change');
    assertOk(await h2Event, 'H2’s AER');
    assert.ok(!summary(await h1.readDiscoveryLog()).some((e) => e.includes(V3)));
    assert.ok(summary(await h2.readDiscoveryLog()).includes(`2 ${V3} 127.0.0.1:20003`));

    // Deleted: gone from H2's page.
    const h2Again = h2.asyncEvent();
    await client.delete().key(keys.assignment(LOCAL.node, V3));
    assertOk(await h2Again, 'AER after the delete');
    assert.ok(!summary(await h2.readDiscoveryLog()).some((e) => e.includes(V3)));

    // A change while no AER is posted is reported by the next one (watched through another
    // connection of the same host, whose reads do not touch h1's pending event).
    const watcher = await open();
    await watcher.attach(H1);
    await assign(V3, LOCAL.node, 20003, { generation: 3, acl: [H1] });
    local.serve(V3, 3);
    await waitUntil(async () => summary(await watcher.readDiscoveryLog()).some((e) => e.includes(V3)) || undefined, 'V3 back for H1');
    const late = await h1.asyncEvent();
    assert.equal(late.dw0, AEN_DISCOVERY_LOG_CHANGE, 'completed at once');
  });

  it('limits outstanding Asynchronous Event Requests', async () => {
    const host = await open();
    await host.attach(H3);
    const posted = [host.asyncEvent(), host.asyncEvent(), host.asyncEvent(), host.asyncEvent()];
    const fifth = await host.asyncEvent();
    assert.ok(isStatus(fifth, Status.AsyncEventLimitExceeded));
    void Promise.allSettled(posted);
  });

  it('enforces the keep-alive timeout from Connect', async () => {
    const quiet = await open();
    await quiet.attach(H2, { katoMs: 1000 });
    const alive = await open();
    await alive.attach(H2, { katoMs: 1000 });
    const started = Date.now();
    const keeping = setInterval(() => void alive.keepAlive().catch(() => undefined), 250);
    try {
      await quiet.closed;
      assert.ok(Date.now() - started >= 900, 'not before KATO');
      await sleep(1500);
      assert.equal(alive.socket.destroyed, false, 'keep-alives keep the other connection');
      assertOk(await alive.keepAlive(), 'still answering');
    } finally {
      clearInterval(keeping);
    }
  });

  it('closes connections that do not set up in time, and answers digests with none', async () => {
    const silent = await open();
    await silent.closed;
    const noConnect = await open();
    await noConnect.icreq();
    await noConnect.closed;
    const digests = await open();
    assert.equal((await digests.icreq({ digest: 3 })).digest, 0, 'digests are not negotiated');
  });

  it('ends the connection with a C2HTermReq on a malformed PDU', async () => {
    const host = await open();
    await host.icreq();
    const bad = Buffer.alloc(72);
    bad[0] = 0x04;
    bad[2] = 70; // wrong hlen for a command capsule
    bad.writeUInt32LE(72, 4);
    host.sendRaw(bad);
    await host.closed;
    assert.deepEqual([host.termReq?.fes, host.termReq?.fei], [1, 2]);
    const huge = await open();
    await huge.icreq();
    const header = Buffer.alloc(8);
    header[0] = 0x04;
    header[2] = 72;
    header[3] = 72;
    header.writeUInt32LE(1 << 30, 4);
    huge.sendRaw(header);
    await huge.closed;
    assert.equal(huge.termReq?.fes, 5, 'data transfer limit exceeded');
  });

  it('holds at most discoveryMaxConnections connections', async () => {
    const small = await openDiscoveryService(
      { discoveryListenAddress: '127.0.0.1', discoveryPort: 0, discoveryMaxConnections: 4 },
      { store: new ClusterPathsStore(states.of(client)), serverUUID: LOCAL.server, nodeUUIDs: [LOCAL.node], firmware: '0.1.0', logger: silentLogger() },
    );
    small.start(local);
    try {
      await waitUntil(() => small.paths.view(), 'the small controller’s view');
      const openSmall = async () => {
        const c = await NvmeTcpTestClient.open('127.0.0.1', small.port!);
        clients.push(c);
        return c;
      };
      const held = await Promise.all(
        Array.from({ length: 4 }, async () => {
          const c = await openSmall();
          await c.attach(H3);
          return c;
        }),
      );
      assert.equal(small.server?.connectionCount, 4);
      const refused = await openSmall();
      await refused.closed;
      assert.equal(small.server?.connectionCount, 4);
      held[0]!.close();
      await waitUntil(() => small.server?.connectionCount === 3, 'one freed');
      const admitted = await openSmall();
      await admitted.attach(H1);
      assert.ok(summary(await admitted.readDiscoveryLog()).includes(`2 ${V1} 127.0.0.2:20001`));
    } finally {
      await small.stop();
    }
    assert.equal(small.server?.connectionCount, 0, 'stop closes every connection');
  });

  it('does not listen on a port in use (and then says so by having no port)', async () => {
    const blocker = createServer();
    const taken = await freePort();
    await new Promise<void>((resolve) => blocker.listen(taken, '127.0.0.1', resolve));
    try {
      const other = await openDiscoveryService(
        { discoveryListenAddress: '127.0.0.1', discoveryPort: taken, discoveryMaxConnections: 1 },
        { store: new ClusterPathsStore(states.of(client)), serverUUID: LOCAL.server, nodeUUIDs: [LOCAL.node], firmware: '0.1.0', logger: silentLogger() },
      );
      assert.equal(other.port, undefined);
      await other.stop();
    } finally {
      blocker.close();
    }
  });

  it('refuses Connect (Controller Busy) until etcd was read once', async () => {
    const deadEtcd = createEtcdClient([`127.0.0.1:${await freePort()}`]);
    const waiting = await openDiscoveryService(
      { discoveryListenAddress: '127.0.0.1', discoveryPort: 0, discoveryMaxConnections: 4 },
      { store: new ClusterPathsStore(states.of(deadEtcd)), serverUUID: LOCAL.server, nodeUUIDs: [LOCAL.node], firmware: '0.1.0', logger: silentLogger() },
    );
    waiting.start(new LocalReports());
    try {
      const host = await NvmeTcpTestClient.open('127.0.0.1', waiting.port!);
      await host.icreq();
      const { completion } = await host.connectAdmin({ subnqn: DISCOVERY_NQN, hostnqn: H1 });
      assert.ok(isStatus(completion, Status.ConnectControllerBusy));
      assert.equal(completion.status.dnr, false, 'the host may retry');
      host.close();
    } finally {
      await waiting.stop();
      await states.stop();
      deadEtcd.close();
    }
  });

  it('refuses Connect (Controller Busy) until this node’s data path made its first report, for a bounded time', async () => {
    let report: VolumeReportSnapshot | undefined;
    let notify: (r: VolumeReportSnapshot) => void = () => undefined;
    const silentDataPath: VolumeReportSource = {
      current: () => report,
      onChange: (listener) => ((notify = listener), () => undefined),
      acknowledged: () => undefined,
    };
    const waiting = await openDiscoveryService(
      { discoveryListenAddress: '127.0.0.1', discoveryPort: 0, discoveryMaxConnections: 4 },
      { store: new ClusterPathsStore(states.of(client)), serverUUID: LOCAL.server, nodeUUIDs: [LOCAL.node], firmware: '0.1.0', logger: silentLogger() },
    );
    waiting.start(silentDataPath);
    try {
      const attempt = async () => {
        const host = await NvmeTcpTestClient.open('127.0.0.1', waiting.port!);
        clients.push(host);
        await host.icreq();
        return (await host.connectAdmin({ subnqn: DISCOVERY_NQN, hostnqn: H1 })).completion;
      };
      await sleep(300);
      assert.ok(isStatus(await attempt(), Status.ConnectControllerBusy));
      report = local.current();
      notify(report);
      await waitUntil(async () => isStatus(await attempt(), Status.Success) || undefined, 'Connect to succeed after the first report');
    } finally {
      await waiting.stop();
    }
    // A data path that never reports: after the grace period the other nodes' paths are served.
    const stuck = await openDiscoveryService(
      { discoveryListenAddress: '127.0.0.1', discoveryPort: 0, discoveryMaxConnections: 4 },
      { store: new ClusterPathsStore(states.of(client)), serverUUID: LOCAL.server, nodeUUIDs: [LOCAL.node], firmware: '0.1.0', logger: silentLogger(), localReportGraceMs: 1000 },
    );
    stuck.start({ current: () => undefined, onChange: () => () => undefined, acknowledged: () => undefined });
    try {
      await waitUntil(() => stuck.paths.view(), 'the view after the grace period', 10_000);
      const host = await NvmeTcpTestClient.open('127.0.0.1', stuck.port!);
      clients.push(host);
      await host.attach(H1);
      assert.deepEqual(summary(await host.readDiscoveryLog()), [`2 ${V1} 127.0.0.2:20001`, `1 ${DISCOVERY_NQN} 127.0.0.2:8009`], 'only the other node’s path');
    } finally {
      await stuck.stop();
    }
  });

  it('keeps serving the last known paths while etcd is down', async () => {
    await etcd.stop();
    const host = await open();
    await host.attach(H1);
    assert.ok(summary(await host.readDiscoveryLog()).includes(`2 ${V1} 127.0.0.2:20001`));
    // A raw TCP client that connects and leaves at once does no harm either.
    const drive = tcpConnect({ host: '127.0.0.1', port });
    await new Promise((resolve) => drive.once('connect', resolve));
    drive.destroy();
  });
});
