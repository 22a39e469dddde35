// The control plane's side of the agent channel, over a real gRPC connection and a real etcd:
// inventory persisted then acked, stale reports ignored, commands round-trip, bad sessions refused,
// and the agent tokens every call must carry (docs/agent-auth.md). The stores behind the reports
// have their own cases, on etcd and on the in-memory fake: report-stores.test.ts.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { newAgentSecret, signAgentToken } from '../../lib/agent-token.js';
import { AgentSecretStore } from '../../lib/etcd/agent-secret-store.js';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { NodeStore } from '../../lib/etcd/node-store.js';
import { keys } from '../../lib/etcd/keys.js';
import { loadStrataProto } from '../../lib/grpc/proto.js';
import { packageRoot } from '../../lib/paths.js';
import type { AgentSecret, DeviceRecord, NodePoolRecord, ServerFactsRecord, VolumeStatusRecord } from '../../lib/records.js';
import type { AgentMessage } from '../../proto/gen/strata/v1/AgentMessage.js';
import type { ControlMessage__Output } from '../../proto/gen/strata/v1/ControlMessage.js';
import type { NvmeDevice } from '../../proto/gen/strata/v1/NvmeDevice.js';
import { SignJWT } from 'jose';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { joinServer } from '../../test/helpers/records.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { AgentAuthenticator } from './agent-authenticator.js';
import { AgentSessions } from './agent-sessions.js';
import { bindGrpcServer, createAgentGrpcServer } from './agent-grpc-server.js';
import { InventoryService } from './inventory-service.js';
import { InventoryStore } from './inventory-store.js';
import { NodePoolStore } from './node-pool-store.js';
import { PoolReportService } from './pool-report-service.js';
import { VolumeReportService } from './volume-report-service.js';
import { VolumeStatusStore } from './volume-status-store.js';

const CLUSTER = randomUUID();

describe('agent gRPC service', () => {
  let etcd: TestEtcd;
  let client: ReturnType<typeof createEtcdClient>;
  let server: grpc.Server;
  let port: number;
  const sessions = new AgentSessions();
  /** The authenticator's log lines (JSON). */
  const authLog: string[] = [];

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    const authenticator = new AgentAuthenticator({
      secrets: new AgentSecretStore(client),
      nodes: new NodeStore(client),
      clusterUUID: CLUSTER,
      logger: pino({ level: 'debug' }, { write: (line: string) => authLog.push(line) }),
      // 1 s instead of 5 keeps the expiry tests short.
      clockToleranceSeconds: 1,
    });
    await authenticator.start();
    server = createAgentGrpcServer({
      logger: pino({ level: 'silent' }),
      sessions,
      authenticator,
      inventory: new InventoryService(new InventoryStore(client), 'cp-test'),
      volumeReports: new VolumeReportService(new VolumeStatusStore(client)),
      poolReports: new PoolReportService(new NodePoolStore(client)),
      instanceId: 'cp-test',
      clusterUUID: CLUSTER,
    });
    port = await bindGrpcServer(server, '127.0.0.1', 0);
  });
  after(async () => {
    sessions.closeAll('test done');
    server.forceShutdown();
    client.close();
    await etcd.stop();
  });

  /** A token signed with the cluster's current secret unless told otherwise. */
  async function tokenFor(
    serverUUID: string,
    nodeUUIDs: string[] = [],
    options: { secret?: AgentSecret; clusterUUID?: string; lifetimeSeconds?: number; now?: Date } = {},
  ): Promise<string> {
    const secret = options.secret ?? (await new AgentSecretStore(client).ensure()).current;
    const signed = await signAgentToken(secret, {
      clusterUUID: options.clusterUUID ?? CLUSTER,
      serverUUID,
      nodeUUIDs,
      ...(options.lifetimeSeconds === undefined ? {} : { lifetimeSeconds: options.lifetimeSeconds }),
      ...(options.now === undefined ? {} : { now: options.now }),
    });
    return signed.token;
  }

  /** A raw Session call; `token` goes in its metadata (null: none; a string starting "raw:" as is). */
  function openSession(token: string | null) {
    const proto = loadStrataProto();
    const stub = new proto.strata.v1.AgentReporting(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const metadata = new grpc.Metadata();
    if (token?.startsWith('raw:')) metadata.set('authorization', token.slice(4));
    else if (token !== null) metadata.set('authorization', `Bearer ${token}`);
    const call = stub.Session(metadata);
    const received: ControlMessage__Output[] = [];
    let status: grpc.StatusObject | undefined;
    call.on('data', (m: ControlMessage__Output) => received.push(m));
    call.on('error', () => undefined);
    call.on('status', (s: grpc.StatusObject) => (status = s));
    return {
      send: (m: AgentMessage) => call.write(m),
      received,
      status: () => status,
      close: () => {
        call.end();
        stub.close();
      },
    };
  }
  const device = (serial: string, size = '1000'): NvmeDevice => ({
    serial, model: 'QEMU NVMe Ctrl', size_bytes: size, numa_node: -1, firmware: '1.0', pci_address: '0000:00:04.0', controller: 'nvme0', holds_os: false, led: 'LED_OFF',
  });
  const devicesOf = async (serverUUID: string) =>
    Object.values(await client.getAll().prefix(keys.devicesPrefix()).strings())
      .map((v) => JSON.parse(v) as DeviceRecord)
      .filter((d) => d.serverUUID === serverUUID)
      .sort((a, b) => a.serial.localeCompare(b.serial));

  it('persists inventory, then acks it; a later report marks vanished devices not present; stale ones are ignored', async () => {
    const [serverUUID, node] = [randomUUID(), randomUUID()];
    const s = openSession(await tokenFor(serverUUID, [node]));
    try {
      s.send({ hello: { server_uuid: serverUUID, node_uuids: [node], agent_version: '0.1.0', agent_instance: 'i1', cluster_uuid: CLUSTER } });
      await waitUntil(async () => s.received.find((m) => m.welcome), 'welcome', 3000);
      s.send({ inventory: { sequence: '1', facts: { hostname: 'h1', product_version: '0.1.0', tpm2_supported: true }, devices: [device('SN1'), device('SN2')], journal_device_serial: 'SN2' } });
      await waitUntil(async () => s.received.find((m) => m.inventory_ack?.sequence === '1'), 'ack 1', 3000);
      // Acked means persisted.
      const facts = parseRecord<ServerFactsRecord>('', await client.get(keys.serverFacts(serverUUID)).string());
      assert.equal(facts?.hostname, 'h1');
      assert.equal(facts?.tpm2IsSupported, true);
      assert.equal(facts?.journalDeviceSerial, 'SN2');
      assert.deepEqual((await devicesOf(serverUUID)).map((d) => [d.serial, d.present]), [['SN1', true], ['SN2', true]]);

      s.send({ inventory: { sequence: '3', facts: { hostname: 'h1' }, devices: [device('SN1', '2000')] } });
      await waitUntil(async () => s.received.find((m) => m.inventory_ack?.sequence === '3'), 'ack 3', 3000);
      s.send({ inventory: { sequence: '2', facts: { hostname: 'stale' }, devices: [] } });
      await waitUntil(async () => s.received.find((m) => m.inventory_ack?.sequence === '2'), 'ack 2', 3000);
      const devices = await devicesOf(serverUUID);
      assert.deepEqual(devices.map((d) => [d.serial, d.present, d.sizeBytes]), [['SN1', true, '2000'], ['SN2', false, '1000']]);
      assert.equal(parseRecord<ServerFactsRecord>('', await client.get(keys.serverFacts(serverUUID)).string())?.hostname, 'h1', 'stale report ignored');

      // An identical report does not rewrite the device: its ETag (mod_revision) is stable.
      const revision = async () => (await client.get(keys.device('SN1')).exec()).kvs[0]?.mod_revision;
      const before = await revision();
      s.send({ inventory: { sequence: '4', facts: { hostname: 'h1' }, devices: [device('SN1', '2000')] } });
      await waitUntil(async () => s.received.find((m) => m.inventory_ack?.sequence === '4'), 'ack 4', 3000);
      assert.equal(await revision(), before);
    } finally {
      s.close();
    }
  });

  it('sends commands down the session and returns the agent result; a newer session replaces the old', async () => {
    const serverUUID = randomUUID();
    const first = openSession(await tokenFor(serverUUID));
    const second = openSession(await tokenFor(serverUUID));
    try {
      first.send({ hello: { server_uuid: serverUUID, agent_instance: 'a', cluster_uuid: CLUSTER } });
      await waitUntil(async () => first.received.find((m) => m.welcome), 'welcome', 3000);
      second.send({ hello: { server_uuid: serverUUID, agent_instance: 'b', cluster_uuid: CLUSTER } });
      await waitUntil(async () => second.received.find((m) => m.welcome), 'welcome 2', 3000);
      await waitUntil(async () => first.status(), 'old session closed', 3000);
      assert.equal(first.status()?.code, grpc.status.ABORTED);

      const sent = sessions.send(serverUUID, { set_led: { serial: 'SN1', pattern: 'LED_LOCATE' } });
      const command = await waitUntil(async () => second.received.find((m) => m.command)?.command ?? undefined, 'command', 3000);
      assert.equal(command.set_led?.pattern, 'LED_LOCATE');
      second.send({ command_result: { command_id: command.command_id, ok: true } });
      await sent;

      const failing = sessions.send(serverUUID, { set_led: { serial: 'SN9', pattern: 'LED_LOCATE' } });
      const command2 = await waitUntil(async () => second.received.filter((m) => m.command)[1]?.command ?? undefined, 'command 2', 3000);
      second.send({ command_result: { command_id: command2.command_id, ok: false, error: 'no PCIe slot for SN9' } });
      await assert.rejects(failing, /no PCIe slot for SN9/);
      await assert.rejects(sessions.send(randomUUID(), { set_led: { serial: 'x', pattern: 'LED_OFF' } }), /not connected/);
    } finally {
      first.close();
      second.close();
    }
  });

  it('persists volume reports of the agent\'s own nodes, marks unlisted ones Absent when complete, and refuses other nodes', async () => {
    const [serverUUID, node, volumeA, volumeB] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    const s = openSession(await tokenFor(serverUUID, [node]));
    const statusOf = async (volume: string) => parseRecord<VolumeStatusRecord>('', await client.get(keys.volumeStatus(volume, node)).string());
    try {
      s.send({ hello: { server_uuid: serverUUID, node_uuids: [node], agent_instance: 'i', cluster_uuid: CLUSTER } });
      await waitUntil(async () => s.received.find((m) => m.welcome), 'welcome', 3000);
      const served = (volume: string) => ({ volume_uuid: volume, node_uuid: node, generation: '2', state: 'VOLUME_SERVED' as const, logical_used_bytes: '4096', physical_used_bytes: '2048', connected_hosts: [{ host_nqn: 'nqn.2014-08.org.example:host1', address: '10.0.0.9' }] });
      s.send({ volume_report: { sequence: '1', volumes: [served(volumeA), served(volumeB)], complete: true } });
      await waitUntil(async () => s.received.find((m) => m.volume_report_ack?.sequence === '1'), 'ack', 3000);
      const a = await statusOf(volumeA);
      assert.deepEqual([a?.state, a?.generation, a?.logicalUsedBytes, a?.connectedHosts[0]?.hostNQN], ['Served', 2, '4096', 'nqn.2014-08.org.example:host1']);

      s.send({ volume_report: { sequence: '2', volumes: [served(volumeA)], complete: true } });
      await waitUntil(async () => s.received.find((m) => m.volume_report_ack?.sequence === '2'), 'ack 2', 3000);
      assert.equal((await statusOf(volumeB))?.state, 'Absent', 'not listed in a complete report: absent');
      assert.equal((await statusOf(volumeA))?.state, 'Served');

      s.send({ volume_report: { sequence: '3', volumes: [{ ...served(volumeA), node_uuid: randomUUID() }] } });
      await waitUntil(async () => s.status(), 'session refused', 3000);
      assert.equal(s.status()?.code, grpc.status.PERMISSION_DENIED);
    } finally {
      s.close();
    }
  });

  it('keeps a replicated volume\'s bytes written across device restarts: accumulated, never backwards, kept when not reported', async () => {
    const [serverUUID, node, volume] = [randomUUID(), randomUUID(), randomUUID()];
    const s = openSession(await tokenFor(serverUUID, [node]));
    const stored = async () => parseRecord<VolumeStatusRecord>('', await client.get(keys.volumeStatus(volume, node)).string());
    const total = async () => {
      const c = (await stored())?.userWritten;
      return c ? BigInt(c.base) + BigInt(c.last) : undefined;
    };
    let sequence = 0;
    const report = async (written?: { bytes: string; device: string }, volumes = 1) => {
      sequence += 1;
      const status = {
        volume_uuid: volume, node_uuid: node, generation: '1', state: 'VOLUME_SERVED' as const,
        ...(written ? { user_written_bytes: written.bytes, user_written_device: written.device } : {}),
      };
      s.send({ volume_report: { sequence: String(sequence), volumes: volumes ? [status] : [], complete: true } });
      const seq = String(sequence);
      await waitUntil(async () => s.received.find((m) => m.volume_report_ack?.sequence === seq), `ack ${seq}`, 3000);
    };
    try {
      s.send({ hello: { server_uuid: serverUUID, node_uuids: [node], agent_instance: 'i', cluster_uuid: CLUSTER } });
      await waitUntil(async () => s.received.find((m) => m.welcome), 'welcome', 3000);
      await report();
      assert.equal((await stored())?.userWritten, undefined, 'nothing measured: nothing stored');
      await report({ bytes: '8388608', device: 'boot-1/253:3/17' });
      assert.equal(await total(), 8388608n);
      await report({ bytes: '9437184', device: 'boot-1/253:3/17' });
      assert.equal(await total(), 9437184n);
      // The node rebooted (or the device was made again): its counter starts at 0.
      await report({ bytes: '4096', device: 'boot-2/253:0/5' });
      assert.equal(await total(), 9437184n + 4096n, 'what the old device counted is kept');
      assert.deepEqual((await stored())?.userWritten, { device: 'boot-2/253:0/5', base: '9437184', last: '4096', retired: ['boot-1/253:3/17'] });
      await report({ bytes: '1024', device: 'boot-2/253:0/5' });
      assert.equal(await total(), 9437184n + 4096n, 'an older count of the same device: not backwards');
      await report({ bytes: '8388608', device: 'boot-1/253:3/17' });
      assert.equal(await total(), 9437184n + 4096n, 'a late report of the old device: not counted twice');
      await report();
      assert.equal(await total(), 9437184n + 4096n, 'not the primary any more: the count stays');
      await report(undefined, 0);
      assert.equal((await stored())?.state, 'Absent');
      assert.equal(await total(), 9437184n + 4096n, 'absent from this node: its writes were still the volume\'s');
    } finally {
      s.close();
    }
  });

  it('persists pool reports of the agent\'s own nodes with each device\'s history, drops stale ones, deletes pools no longer reported', async () => {
    const [serverUUID, node, otherNode] = [randomUUID(), randomUUID(), randomUUID()];
    const s = openSession(await tokenFor(serverUUID, [node, otherNode]));
    const poolOf = async (n: string) => parseRecord<NodePoolRecord>('', await client.get(keys.nodePool(n)).string());
    const pool = (devices: { serial: string; state: 'POOL_DEVICE_HEALTHY' | 'POOL_DEVICE_ADDING' }[], state: 'POOL_READY' | 'POOL_GROWING' = 'POOL_READY', nodeUUID = node) => ({
      node_uuid: nodeUUID, state, level: 'raid0', raw_bytes: '2000', array_bytes: '1990', capacity_bytes: '1800', free_bytes: '1500',
      provisioned_bytes: '4096', logical_used_bytes: '600', physical_used_bytes: '300', physical_used_including_parity_bytes: '300',
      rebuild_progress_percent: state === 'POOL_GROWING' ? 40 : 0, measured_at: new Date().toISOString(),
      devices: devices.map((d) => ({ serial: d.serial, role: 'data', state: d.state, size_bytes: '1000', error: '' })),
    });
    try {
      s.send({ hello: { server_uuid: serverUUID, node_uuids: [node, otherNode], agent_instance: 'i', cluster_uuid: CLUSTER } });
      await waitUntil(async () => s.received.find((m) => m.welcome), 'welcome', 3000);
      s.send({ pool_report: { sequence: '1', pools: [pool([{ serial: 'P1', state: 'POOL_DEVICE_HEALTHY' }, { serial: 'P2', state: 'POOL_DEVICE_ADDING' }], 'POOL_GROWING'), pool([], 'POOL_READY', otherNode)] } });
      await waitUntil(async () => s.received.find((m) => m.pool_report_ack?.sequence === '1'), 'ack 1', 3000);
      const growing = await poolOf(node);
      assert.deepEqual([growing?.state, growing?.serverUUID, growing?.capacityBytes, growing?.rebuildProgressPercent], ['Growing', serverUUID, '1800', 40]);
      assert.deepEqual(growing?.devices.map((d) => [d.serial, d.state, d.rebuildCompletedAt]), [['P1', 'Healthy', ''], ['P2', 'Adding', '']]);
      assert.deepEqual([growing?.recoverableIntegrityErrors, growing?.unrecoverableIntegrityErrors], [undefined, undefined], 'not reported: not measured');
      assert.ok(await poolOf(otherNode));

      s.send({ pool_report: { sequence: '3', pools: [pool([{ serial: 'P1', state: 'POOL_DEVICE_HEALTHY' }, { serial: 'P2', state: 'POOL_DEVICE_HEALTHY' }])] } });
      await waitUntil(async () => s.received.find((m) => m.pool_report_ack?.sequence === '3'), 'ack 3', 3000);
      const ready = await poolOf(node);
      const p2 = ready?.devices.find((d) => d.serial === 'P2');
      assert.equal(p2?.state, 'Healthy');
      assert.equal(p2?.rebuildCompletedAt, ready?.reportedAt, 'Adding → Healthy: the time it finished');
      assert.equal(ready?.devices.find((d) => d.serial === 'P1')?.stateSince, growing?.reportedAt, 'unchanged state keeps its time');
      assert.equal(await poolOf(otherNode), null, 'a pool the agent no longer reports is gone');

      const revision = async () => (await client.get(keys.nodePool(node)).exec()).kvs[0]?.mod_revision;
      const before = await revision();
      s.send({ pool_report: { sequence: '2', pools: [] } });
      await waitUntil(async () => s.received.find((m) => m.pool_report_ack?.sequence === '2'), 'ack 2', 3000);
      assert.equal(await revision(), before, 'a stale report is acked and ignored');
      s.send({ pool_report: { sequence: '4', pools: [{ ...pool([{ serial: 'P1', state: 'POOL_DEVICE_HEALTHY' }, { serial: 'P2', state: 'POOL_DEVICE_HEALTHY' }]), measured_at: 'later' }] } });
      await waitUntil(async () => s.received.find((m) => m.pool_report_ack?.sequence === '4'), 'ack 4', 3000);
      assert.equal(await revision(), before, 'only the measurement time changed: not rewritten');

      // Data-integrity counts, when the agent measured them, are stored as decimal strings.
      const counted = pool([{ serial: 'P1', state: 'POOL_DEVICE_HEALTHY' }, { serial: 'P2', state: 'POOL_DEVICE_HEALTHY' }]);
      counted.devices[0] = { ...counted.devices[0]!, recoverable_integrity_errors: { count: '7' } } as (typeof counted.devices)[number];
      s.send({ pool_report: { sequence: '6', pools: [{ ...counted, recoverable_integrity_errors: { count: '7' }, unrecoverable_integrity_errors: { count: '2' } }] } });
      await waitUntil(async () => s.received.find((m) => m.pool_report_ack?.sequence === '6'), 'ack 6', 3000);
      const measured = await poolOf(node);
      assert.deepEqual([measured?.recoverableIntegrityErrors, measured?.unrecoverableIntegrityErrors], ['7', '2']);
      assert.deepEqual(measured?.devices.map((d) => [d.serial, d.recoverableIntegrityErrors]), [['P1', '7'], ['P2', undefined]]);

      s.send({ pool_report: { sequence: '7', pools: [pool([], 'POOL_READY', randomUUID())] } });
      await waitUntil(async () => s.status(), 'session refused', 3000);
      assert.equal(s.status()?.code, grpc.status.PERMISSION_DENIED);
    } finally {
      s.close();
    }
  });

  it('refuses a session that does not start with Hello, or belongs to another cluster', async () => {
    const otherServer = randomUUID();
    const noHello = openSession(await tokenFor(randomUUID()));
    const otherCluster = openSession(await tokenFor(otherServer));
    try {
      noHello.send({ heartbeat: { sent_at: new Date().toISOString() } });
      await waitUntil(async () => noHello.status(), 'status', 3000);
      assert.equal(noHello.status()?.code, grpc.status.FAILED_PRECONDITION);
      otherCluster.send({ hello: { server_uuid: otherServer, cluster_uuid: randomUUID() } });
      await waitUntil(async () => otherCluster.status(), 'status', 3000);
      assert.equal(otherCluster.status()?.code, grpc.status.FAILED_PRECONDITION);
    } finally {
      noHello.close();
      otherCluster.close();
    }
  });

  // ---- authentication (docs/agent-auth.md) ----

  const everything = async () => new Map((await client.getAll().prefix('/strata/').exec()).kvs.map((kv) => [kv.key.toString(), kv.mod_revision]));

  /**
   * Opens a session with `token`, says Hello and, pipelined as the agent does, reports an
   * inventory and a volume "Served" on the Hello's nodes; asserts the session is refused with
   * nothing answered and nothing stored, and returns the final status.
   */
  async function refused(token: string | null, hello: { serverUUID: string; nodeUUIDs?: string[] }): Promise<grpc.StatusObject> {
    const before = await everything();
    const s = openSession(token);
    try {
      const nodes = hello.nodeUUIDs ?? [];
      s.send({ hello: { server_uuid: hello.serverUUID, node_uuids: nodes, agent_instance: 'forger', cluster_uuid: CLUSTER } });
      s.send({ inventory: { sequence: '1', facts: { hostname: 'forged' }, devices: [device('FORGED-1')] } });
      s.send({ volume_report: { sequence: '1', complete: true, volumes: nodes.map((n) => ({ volume_uuid: randomUUID(), node_uuid: n, generation: '1', state: 'VOLUME_SERVED' as const })) } });
      const status = await waitUntil(async () => s.status(), 'refusal', 3000);
      assert.deepEqual(s.received, [], 'no Welcome, no ack');
      assert.deepEqual(await everything(), before, 'a refused session stores nothing');
      return status;
    } finally {
      s.close();
    }
  }

  /** Opens a session with `token` and waits for Welcome. */
  async function welcomed(token: string, serverUUID: string, nodeUUIDs: string[] = []) {
    const s = openSession(token);
    s.send({ hello: { server_uuid: serverUUID, node_uuids: nodeUUIDs, agent_instance: 'i', cluster_uuid: CLUSTER } });
    await waitUntil(async () => s.received.find((m) => m.welcome) ?? s.status(), 'welcome', 3000);
    assert.ok(s.received.find((m) => m.welcome), `welcomed (status ${JSON.stringify(s.status())})`);
    return s;
  }

  it('refuses UNAUTHENTICATED a call without a token, with a malformed one, or with one that is not an agent token', async () => {
    const serverUUID = randomUUID();
    const nodes = [randomUUID()];
    const missing = await refused(null, { serverUUID, nodeUUIDs: nodes });
    assert.equal(missing.code, grpc.status.UNAUTHENTICATED);
    assert.match(missing.details, /agent token required/);
    assert.equal((await refused('raw:Basic dXNlcjpwYXNz', { serverUUID, nodeUUIDs: nodes })).code, grpc.status.UNAUTHENTICATED);
    assert.equal((await refused('not-a-jwt', { serverUUID, nodeUUIDs: nodes })).code, grpc.status.UNAUTHENTICATED);
    // Signed with the right secret, but typed as a plain JWT (as an API token is): not an agent token.
    const secret = (await new AgentSecretStore(client).ensure()).current;
    const plain = await new SignJWT({ nodes })
      .setProtectedHeader({ alg: 'HS256', kid: secret.id })
      .setSubject(serverUUID).setAudience(CLUSTER).setIssuer('strata-agent').setIssuedAt().setExpirationTime('5m')
      .sign(Buffer.from(secret.key, 'base64url'));
    const untyped = await refused(plain, { serverUUID, nodeUUIDs: nodes });
    assert.equal(untyped.code, grpc.status.UNAUTHENTICATED);
    assert.match(untyped.details, /not an agent token/);
  });

  it('refuses UNAUTHENTICATED a token signed with another secret, for another cluster, expired, too old or from the future', async () => {
    const serverUUID = randomUUID();
    const nodes = [randomUUID()];
    const current = (await new AgentSecretStore(client).ensure()).current;
    const cases: [string, string, RegExp][] = [
      ['another key under the current id', await tokenFor(serverUUID, nodes, { secret: { ...newAgentSecret(), id: current.id } }), /signature does not verify/],
      ['another secret', await tokenFor(serverUUID, nodes, { secret: newAgentSecret() }), /unknown or retired agent secret/],
      ['another cluster', await tokenFor(serverUUID, nodes, { clusterUUID: randomUUID() }), /"aud" claim/],
      ['expired (beyond the clock tolerance)', await tokenFor(serverUUID, nodes, { now: new Date(Date.now() - 60_000), lifetimeSeconds: 30 }), /expired/],
      ['issued 20 min ago, valid for an hour', await tokenFor(serverUUID, nodes, { now: new Date(Date.now() - 20 * 60_000), lifetimeSeconds: 3600 }), /expired/],
      ['issued a minute from now', await tokenFor(serverUUID, nodes, { now: new Date(Date.now() + 60_000) }), /"iat" claim/],
    ];
    for (const [what, token, reason] of cases) {
      const status = await refused(token, { serverUUID, nodeUUIDs: nodes });
      assert.equal(status.code, grpc.status.UNAUTHENTICATED, what);
      assert.match(status.details, reason, what);
      assert.ok(!status.details.includes(token) && !status.details.includes(current.key), `${what}: the refusal quotes neither token nor secret`);
    }
    // Within the tolerance (1 s here): a clock a little behind or ahead is fine.
    (await welcomed(await tokenFor(serverUUID, nodes, { now: new Date(Date.now() + 500) }), serverUUID, nodes)).close();
  });

  it('refuses PERMISSION_DENIED a valid token used for another server or node, and stores nothing', async () => {
    const a = await joinServer(client);
    const b = await joinServer(client);
    const [nodeA, nodeB] = [a.nodes[0]!.UUID, b.nodes[0]!.UUID];
    const otherServer = await refused(await tokenFor(a.server.UUID, [nodeA]), { serverUUID: b.server.UUID, nodeUUIDs: [nodeB] });
    assert.equal(otherServer.code, grpc.status.PERMISSION_DENIED);
    assert.match(otherServer.details, new RegExp(`for server ${a.server.UUID}, not ${b.server.UUID}`));
    // Server A's token, Hello for server A, but with B's node.
    const unnamedNode = await refused(await tokenFor(a.server.UUID, [nodeA]), { serverUUID: a.server.UUID, nodeUUIDs: [nodeA, nodeB] });
    assert.equal(unnamedNode.code, grpc.status.PERMISSION_DENIED);
    assert.match(unnamedNode.details, new RegExp(`does not name node ${nodeB}`));
    // A token that itself names B's node: etcd says whose node it is.
    const foreignNode = await refused(await tokenFor(a.server.UUID, [nodeA, nodeB]), { serverUUID: a.server.UUID, nodeUUIDs: [nodeA, nodeB] });
    assert.equal(foreignNode.code, grpc.status.PERMISSION_DENIED);
    assert.match(foreignNode.details, new RegExp(`node ${nodeB} belongs to server ${b.server.UUID}`));
    // Server A's own token and nodes: welcome, and its report is stored.
    const s = await welcomed(await tokenFor(a.server.UUID, [nodeA]), a.server.UUID, [nodeA]);
    try {
      s.send({ inventory: { sequence: '1', facts: { hostname: 'a' }, devices: [device('A-1')] } });
      await waitUntil(async () => s.received.find((m) => m.inventory_ack?.sequence === '1'), 'ack', 3000);
      assert.equal(parseRecord<ServerFactsRecord>('', await client.get(keys.serverFacts(a.server.UUID)).string())?.hostname, 'a');
    } finally {
      s.close();
    }
  });

  it('ends a session whose token expires unrenewed; renewals keep it open; a bad renewal is refused', async () => {
    const serverUUID = randomUUID();
    const unrenewed = await welcomed(await tokenFor(serverUUID, [], { lifetimeSeconds: 1 }), serverUUID);
    try {
      const status = await waitUntil(async () => unrenewed.status(), 'expiry', 4000);
      assert.equal(status.code, grpc.status.UNAUTHENTICATED);
      assert.match(status.details, /expired and was not renewed/);
    } finally {
      unrenewed.close();
    }

    const renewed = await welcomed(await tokenFor(serverUUID, [], { lifetimeSeconds: 2 }), serverUUID);
    try {
      for (let i = 0; i < 3; i++) {
        await new Promise((r) => setTimeout(r, 1000));
        renewed.send({ token_renewal: { token: await tokenFor(serverUUID, [], { lifetimeSeconds: 2 }) } });
      }
      await new Promise((r) => setTimeout(r, 700));
      assert.equal(renewed.status(), undefined, 'open past the first token and its tolerance');
      renewed.send({ token_renewal: { token: await tokenFor(randomUUID()) } });
      const status = await waitUntil(async () => renewed.status(), 'refused renewal', 3000);
      assert.equal(status.code, grpc.status.PERMISSION_DENIED);
    } finally {
      renewed.close();
    }

    const garbage = await welcomed(await tokenFor(serverUUID), serverUUID);
    try {
      garbage.send({ token_renewal: { token: await tokenFor(serverUUID, [], { secret: newAgentSecret() }) } });
      const status = await waitUntil(async () => garbage.status(), 'refused renewal', 3000);
      assert.equal(status.code, grpc.status.UNAUTHENTICATED);
    } finally {
      garbage.close();
    }
  });

  it('logs a refusal once per peer and reason, never the token or the secret', async () => {
    const serverUUID = randomUUID();
    (await welcomed(await tokenFor(serverUUID), serverUUID)).close(); // the peer is forgotten
    authLog.splice(0);
    const expired = await tokenFor(serverUUID, [], { now: new Date(Date.now() - 60_000), lifetimeSeconds: 10 });
    for (let i = 0; i < 3; i++) assert.equal((await refused(expired, { serverUUID })).code, grpc.status.UNAUTHENTICATED);
    assert.equal((await refused(null, { serverUUID })).code, grpc.status.UNAUTHENTICATED);
    const lines = authLog.map((l) => JSON.parse(l) as { level: number; msg: string; peer: string; code: string; reason: string });
    const warnings = lines.filter((l) => l.msg === 'agent session refused');
    assert.deepEqual(warnings.map((l) => [l.level, l.peer, l.code]), [[40, '127.0.0.1', 'UNAUTHENTICATED'], [40, '127.0.0.1', 'UNAUTHENTICATED']]);
    assert.match(warnings[0]!.reason, /expired/);
    assert.match(warnings[1]!.reason, /token required/);
    assert.equal(lines.filter((l) => l.msg === 'agent session refused again').length, 2);
    const secret = (await new AgentSecretStore(client).ensure()).current.key;
    assert.ok(authLog.every((l) => !l.includes(expired) && !l.includes(secret)));
  });

  it('accepts the current and the previous secret after a rotation, and no secret older than that', async () => {
    const serverUUID = randomUUID();
    const first = (await new AgentSecretStore(client).ensure()).current;
    const second = (await new AgentSecretStore(client).rotate()).current;
    assert.deepEqual((await new AgentSecretStore(client).ensure()).previous, first);
    // The new id is unknown to the cached secrets: read again at once.
    (await welcomed(await tokenFor(serverUUID, [], { secret: second }), serverUUID)).close();
    (await welcomed(await tokenFor(serverUUID, [], { secret: first }), serverUUID)).close();
    // The operator's command (docs/agent-auth.md) for the second rotation.
    const printed = execFileSync(process.execPath, [join(packageRoot, 'dist/control-plane/agents/rotate-agent-secret.js'), '--etcd-endpoints', etcd.endpoint], { encoding: 'utf8' });
    const third = (await new AgentSecretStore(client).ensure()).current;
    assert.deepEqual(JSON.parse(printed), { current: third.id, previous: second.id });
    assert.ok(!printed.includes(third.key), 'prints ids, never keys');
    (await welcomed(await tokenFor(serverUUID, [], { secret: third }), serverUUID)).close();
    (await welcomed(await tokenFor(serverUUID, [], { secret: second }), serverUUID)).close();
    const retired = await refused(await tokenFor(serverUUID, [], { secret: first }), { serverUUID });
    assert.equal(retired.code, grpc.status.UNAUTHENTICATED);
    assert.match(retired.details, /unknown or retired/);
  });
});
