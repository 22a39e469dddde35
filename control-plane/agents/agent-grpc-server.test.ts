// The control plane's side of the agent channel, over a real gRPC connection and a real etcd:
// inventory persisted then acked, stale reports ignored, commands round-trip, bad sessions refused.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { loadStrataProto } from '../../lib/grpc/proto.js';
import type { DeviceRecord, NodePoolRecord, ServerFactsRecord, VolumeStatusRecord } from '../../lib/records.js';
import type { AgentMessage } from '../../proto/gen/strata/v1/AgentMessage.js';
import type { ControlMessage__Output } from '../../proto/gen/strata/v1/ControlMessage.js';
import type { NvmeDevice } from '../../proto/gen/strata/v1/NvmeDevice.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { waitUntil } from '../../test/helpers/wait.js';
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

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    server = createAgentGrpcServer({
      logger: pino({ level: 'silent' }),
      sessions,
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

  function openSession() {
    const proto = loadStrataProto();
    const stub = new proto.strata.v1.AgentReporting(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const call = stub.Session();
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
    const serverUUID = randomUUID();
    const s = openSession();
    try {
      s.send({ hello: { server_uuid: serverUUID, node_uuids: [randomUUID()], agent_version: '0.1.0', agent_instance: 'i1', cluster_uuid: CLUSTER } });
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
    const first = openSession();
    const second = openSession();
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
    const s = openSession();
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
      assert.equal(s.status()?.code, grpc.status.INVALID_ARGUMENT);
    } finally {
      s.close();
    }
  });

  it('persists pool reports of the agent\'s own nodes with each device\'s history, drops stale ones, deletes pools no longer reported', async () => {
    const [serverUUID, node, otherNode] = [randomUUID(), randomUUID(), randomUUID()];
    const s = openSession();
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

      s.send({ pool_report: { sequence: '5', pools: [pool([], 'POOL_READY', randomUUID())] } });
      await waitUntil(async () => s.status(), 'session refused', 3000);
      assert.equal(s.status()?.code, grpc.status.INVALID_ARGUMENT);
    } finally {
      s.close();
    }
  });

  it('refuses a session that does not start with Hello, or belongs to another cluster', async () => {
    const noHello = openSession();
    const otherCluster = openSession();
    try {
      noHello.send({ heartbeat: { sent_at: new Date().toISOString() } });
      await waitUntil(async () => noHello.status(), 'status', 3000);
      assert.equal(noHello.status()?.code, grpc.status.FAILED_PRECONDITION);
      otherCluster.send({ hello: { server_uuid: randomUUID(), cluster_uuid: randomUUID() } });
      await waitUntil(async () => otherCluster.status(), 'status', 3000);
      assert.equal(otherCluster.status()?.code, grpc.status.FAILED_PRECONDITION);
    } finally {
      noHello.close();
      otherCluster.close();
    }
  });
});
