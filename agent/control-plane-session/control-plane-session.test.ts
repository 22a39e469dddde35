import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { loadStrataProto } from '../../lib/grpc/proto.js';
import type { LedState } from '../../lib/records.js';
import type { AgentMessage__Output } from '../../proto/gen/strata/v1/AgentMessage.js';
import type { AgentReportingHandlers } from '../../proto/gen/strata/v1/AgentReporting.js';
import type { ControlMessage } from '../../proto/gen/strata/v1/ControlMessage.js';
import { InventoryService, type InventorySnapshot, type InventorySource } from '../inventory/inventory-service.js';
import { createFakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import type { VolumeReportSnapshot, VolumeReportSource } from '../datapath/reconcile/volume-report.js';
import type { PoolReportSnapshot, PoolReportSource } from '../datapath/pool/pool-report.js';
import type { AgentTokenSource } from './agent-token-issuer.js';
import { ControlPlaneSession } from './control-plane-session.js';

interface FakeSession {
  /** The call's `authorization` metadata. */
  readonly authorization: string;
  readonly messages: AgentMessage__Output[];
  send(message: ControlMessage): void;
  end(): void;
}

interface FakeControlPlane {
  readonly name: string;
  readonly endpoint: string;
  readonly sessions: FakeSession[];
  /** Whether inventories are acknowledged. */
  ack: boolean;
  kill(): void;
}

/** A tiny AgentReporting server: answers Hello with Welcome and (optionally) acks inventories. */
async function startFakeControlPlane(name: string, ack: boolean, port = 0): Promise<FakeControlPlane> {
  const proto = loadStrataProto();
  const server = new grpc.Server();
  const plane: FakeControlPlane = {
    name,
    endpoint: '',
    sessions: [],
    ack,
    kill: () => server.forceShutdown(),
  };
  const handlers: AgentReportingHandlers = {
    Session: (call) => {
      const session: FakeSession = {
        authorization: String(call.metadata.get('authorization')[0] ?? ''),
        messages: [],
        send: (m) => call.write(m),
        end: () => call.end(),
      };
      plane.sessions.push(session);
      call.on('data', (message: AgentMessage__Output) => {
        session.messages.push(message);
        if (message.body === 'hello') call.write({ welcome: { control_plane_instance: name, cluster_uuid: '' } });
        if (message.body === 'inventory' && plane.ack) call.write({ inventory_ack: { sequence: message.inventory?.sequence ?? '0' } });
        if (message.body === 'volume_report' && plane.ack) call.write({ volume_report_ack: { sequence: message.volume_report?.sequence ?? '0' } });
        if (message.body === 'pool_report' && plane.ack) call.write({ pool_report_ack: { sequence: message.pool_report?.sequence ?? '0' } });
      });
      call.on('error', () => undefined);
      call.on('end', () => call.end());
    },
  };
  server.addService(proto.strata.v1.AgentReporting.service, handlers);
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return Object.assign(plane, { endpoint: `127.0.0.1:${bound}` });
}

/** An inventory source the test publishes snapshots to. */
class ScriptedInventory implements InventorySource {
  private snapshot: InventorySnapshot | undefined;
  private readonly listeners = new Set<(s: InventorySnapshot) => void>();
  current() {
    return this.snapshot;
  }
  onChange(listener: (s: InventorySnapshot) => void) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  publish(serials: string[]): InventorySnapshot {
    this.snapshot = {
      sequence: (this.snapshot?.sequence ?? 0) + 1,
      facts: { hostname: 'h', productVersion: '0.1.0', tpm2Supported: true, cpuCores: 8, memoryBytes: '17179869184', os: 'Debian GNU/Linux 12', kernel: '6.1.0' },
      devices: serials.map((serial, i) => ({
        serial,
        model: 'M',
        firmware: 'F',
        pciAddress: `0000:0${i}:00.0`,
        numaNode: -1,
        controller: `nvme${i}`,
        sizeBytes: '1000204886016',
        namespaces: [`nvme${i}n1`],
        holdsOS: false,
        led: 'unknown',
      })),
      journalDeviceSerial: '',
      takenAt: new Date().toISOString(),
    };
    for (const l of this.listeners) l(this.snapshot);
    return this.snapshot;
  }
}

/** A volume-report source the test publishes reports to; records acknowledgements. */
class ScriptedVolumeReports implements VolumeReportSource {
  private report: VolumeReportSnapshot | undefined;
  private readonly listeners = new Set<(r: VolumeReportSnapshot) => void>();
  readonly acks: number[] = [];
  current() {
    return this.report;
  }
  onChange(listener: (r: VolumeReportSnapshot) => void) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  acknowledged(sequence: number) {
    this.acks.push(sequence);
  }
  publish(volumeUUIDs: string[]): VolumeReportSnapshot {
    this.report = {
      sequence: (this.report?.sequence ?? 0) + 1,
      complete: true,
      volumes: volumeUUIDs.map((volumeUUID) => ({
        volumeUUID,
        nodeUUID: identity.nodeUUIDs[0] as string,
        generation: 2,
        state: 'Served',
        error: '',
        snapshots: [{ snapshotUUID: 's1', state: 'Available', error: '' }],
        connectedHosts: [{ hostNQN: '', address: '192.0.2.1' }],
        logicalUsedBytes: '4096',
        physicalUsedBytes: '1024',
      })),
      takenAt: new Date().toISOString(),
    };
    for (const l of this.listeners) l(this.report);
    return this.report;
  }
}

const identity = { serverUUID: randomUUID(), nodeUUIDs: [randomUUID()] };

/** Tokens "token-1", "token-2", ... valid for `lifetimeMs` (these fake control planes check nothing). */
function stubTokens(lifetimeMs = 60_000): AgentTokenSource & { issued: number } {
  const source = {
    issued: 0,
    issue: async () => ({ token: `token-${++source.issued}`, expiresAtMs: Date.now() + lifetimeMs }),
  };
  return source;
}
const ofBody = (session: FakeSession | undefined, body: string) => (session?.messages ?? []).filter((m) => m.body === body);

function newSession(
  endpoints: string[],
  inventory: InventorySource,
  setLed: (serial: string, state: LedState) => Promise<void> = async () => undefined,
  welcomeTimeoutMs = 2000,
  volumeReports?: VolumeReportSource,
  poolReports?: PoolReportSource,
  tokens: AgentTokenSource = stubTokens(),
) {
  return new ControlPlaneSession({
    endpoints,
    identity,
    agentVersion: '0.1.0-test',
    agentInstance: randomUUID(),
    clusterUUID: () => 'cluster-1',
    inventory,
    ...(volumeReports ? { volumeReports } : {}),
    ...(poolReports ? { poolReports } : {}),
    commands: { setLed },
    tokens,
    heartbeatMs: 100,
    reconnectBackoff: { initialMs: 50, maxMs: 400 },
    welcomeTimeoutMs,
    logger: silentLogger(),
  });
}

describe('ControlPlaneSession', () => {
  it('sends Hello, the inventory and heartbeats; fails over when its control plane dies and re-sends the unacked inventory', async (t) => {
    const a = await startFakeControlPlane('cp-a', false);
    const b = await startFakeControlPlane('cp-b', true);
    const inventory = new ScriptedInventory();
    inventory.publish(['S1', 'S2']);
    const session = newSession([a.endpoint, b.endpoint], inventory);
    t.after(async () => {
      await session.stop();
      a.kill();
      b.kill();
    });
    session.start();

    // Connected to the first endpoint; the inventory is sent but cp-a never acks.
    await waitUntil(() => session.state().connected && session.state().endpoint === a.endpoint, 'connection to cp-a');
    await waitUntil(() => ofBody(a.sessions[0], 'heartbeat').length >= 2, 'heartbeats on cp-a');
    const aMessages = a.sessions[0]?.messages ?? [];
    assert.equal(aMessages[0]?.body, 'hello', 'Hello first');
    assert.equal(aMessages[0]?.hello?.server_uuid, identity.serverUUID);
    assert.deepEqual(aMessages[0]?.hello?.node_uuids, identity.nodeUUIDs);
    assert.equal(aMessages[0]?.hello?.cluster_uuid, 'cluster-1');
    assert.equal(aMessages[1]?.body, 'inventory');
    assert.equal(aMessages[1]?.inventory?.sequence, '1');
    assert.deepEqual(aMessages[1]?.inventory?.devices.map((d) => d.serial), ['S1', 'S2']);
    assert.equal(aMessages[1]?.inventory?.devices[0]?.size_bytes, '1000204886016');
    assert.equal(aMessages[1]?.inventory?.facts?.memory_bytes, '17179869184');
    assert.equal(session.state().controlPlaneInstance, 'cp-a');
    assert.equal(session.state().lastAckedSequence, 0);

    // cp-a dies: the agent moves to cp-b and re-sends sequence 1, which cp-b acks.
    a.kill();
    await waitUntil(() => session.state().connected && session.state().endpoint === b.endpoint, 'failover to cp-b');
    await waitUntil(() => session.state().lastAckedSequence === 1, 'ack of sequence 1 by cp-b');
    assert.equal(b.sessions[0]?.messages[0]?.body, 'hello');
    assert.deepEqual(ofBody(b.sessions[0], 'inventory').map((m) => m.inventory?.sequence), ['1']);
    assert.equal(session.state().controlPlaneInstance, 'cp-b');

    // A changed inventory goes out on the live session at once.
    inventory.publish(['S1', 'S2', 'S3']);
    await waitUntil(() => session.state().lastAckedSequence === 2, 'ack of sequence 2');

    // cp-b ends the stream; cp-a is down, so the agent comes back to cp-b and, everything
    // being acked, sends Hello but no inventory.
    b.sessions[0]?.end();
    await waitUntil(() => b.sessions.length === 2 && session.state().connected, 'second session on cp-b', 10_000);
    await waitUntil(() => ofBody(b.sessions[1], 'heartbeat').length >= 1, 'heartbeat on the second session');
    assert.equal(b.sessions[1]?.messages[0]?.body, 'hello');
    assert.equal(ofBody(b.sessions[1], 'inventory').length, 0, 'acked inventory not re-sent');
    assert.ok(session.state().sessions >= 3);
  });

  it('keeps a welcomed session open past the Welcome timeout; gives up on a silent endpoint', async (t) => {
    const inventory = new ScriptedInventory();
    inventory.publish(['S1']);
    const silent = new grpc.Server();
    // Accepts the stream but never answers: the agent must move on after welcomeTimeoutMs.
    silent.addService(loadStrataProto().strata.v1.AgentReporting.service, { Session: () => undefined } as AgentReportingHandlers);
    const silentPort = await new Promise<number>((resolve, reject) =>
      silent.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    const cp = await startFakeControlPlane('cp', true);
    const session = newSession([`127.0.0.1:${silentPort}`, cp.endpoint], inventory, undefined, 300);
    t.after(async () => {
      await session.stop();
      silent.forceShutdown();
      cp.kill();
    });
    session.start();
    await waitUntil(() => session.state().connected && session.state().endpoint === cp.endpoint, 'moving past the silent endpoint', 5000);
    await new Promise((r) => setTimeout(r, 900));
    assert.equal(cp.sessions.length, 1, 'the welcomed session was not torn down');
    assert.equal(session.state().connected, true);
  });

  it('keeps dialing while no control plane is up, then connects', async (t) => {
    const inventory = new ScriptedInventory();
    inventory.publish(['S1']);
    const { freePort } = await import('../../test/helpers/ports.js');
    const port = await freePort();
    const session = newSession([`127.0.0.1:${port}`], inventory);
    let cp: FakeControlPlane | undefined;
    t.after(async () => {
      await session.stop();
      cp?.kill();
    });
    const states: boolean[] = [];
    session.on('state', (s) => states.push(s.connected));
    session.start();
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(session.state().connected, false);
    assert.ok(states.length >= 4, 'several dial attempts');
    cp = await startFakeControlPlane('late', true, port);
    await waitUntil(() => session.state().lastAckedSequence === 1, 'connection and ack once the control plane is up', 5000);
    await session.stop();
    assert.deepEqual(
      { connected: session.state().connected, endpoint: session.state().endpoint },
      { connected: false, endpoint: undefined },
    );
  });

  it('runs set_led commands through the inventory service and answers CommandResult', async (t) => {
    const sysfs = createFakeSysfs();
    sysfs.addController({ name: 'nvme0', serial: 'LED-1', pciAddress: '0000:01:00.0', namespaces: [{ name: 'nvme0n1', sectors: 8 }] });
    sysfs.addController({ name: 'nvme1', serial: 'NOSLOT-1', pciAddress: '0000:02:00.0', namespaces: [{ name: 'nvme1n1', sectors: 8 }] });
    const attention = sysfs.addSlot('4', '0000:01:00', 0);
    const inventory = new InventoryService({
      sysfsRoot: sysfs.root,
      mountsPath: sysfs.mountsPath,
      hostname: 'h',
      journalDeviceSerial: '',
      rescanIntervalMs: 60_000,
      logger: silentLogger(),
      collectFacts: async () => ({ hostname: 'h', productVersion: '0', tpm2Supported: false, cpuCores: 1, memoryBytes: '1', os: 'x', kernel: 'y' }),
    });
    await inventory.start();
    const cp = await startFakeControlPlane('cp', true);
    const session = newSession([cp.endpoint], inventory, (serial, state) => inventory.setLed(serial, state));
    t.after(async () => {
      await session.stop();
      inventory.stop();
      cp.kill();
      sysfs.cleanup();
    });
    session.start();
    await waitUntil(() => session.state().lastAckedSequence === 1, 'first inventory acked');

    cp.sessions[0]?.send({ command: { command_id: 'c1', set_led: { serial: 'LED-1', pattern: 'LED_LOCATE' } } });
    const result = await waitUntil(() => ofBody(cp.sessions[0], 'command_result')[0], 'CommandResult c1');
    assert.deepEqual(result.command_result, { command_id: 'c1', ok: true, error: '' });
    assert.equal(readFileSync(attention, 'utf8'), '1');
    // The LED change is reported in a new inventory.
    const second = await waitUntil(() => ofBody(cp.sessions[0], 'inventory').find((m) => m.inventory?.sequence === '2'), 'inventory 2');
    assert.equal(second.inventory?.devices.find((d) => d.serial === 'LED-1')?.led, 'LED_LOCATE');
    assert.equal(second.inventory?.devices.find((d) => d.serial === 'NOSLOT-1')?.led, 'LED_PATTERN_UNSPECIFIED');

    cp.sessions[0]?.send({ command: { command_id: 'c2', set_led: { serial: 'NOSLOT-1', pattern: 'LED_REBUILD' } } });
    cp.sessions[0]?.send({ command: { command_id: 'c3', set_led: { serial: 'MISSING', pattern: 'LED_OFF' } } });
    cp.sessions[0]?.send({ command: { command_id: 'c4', set_led: { serial: 'LED-1', pattern: 'LED_PATTERN_UNSPECIFIED' } } });
    await waitUntil(() => ofBody(cp.sessions[0], 'command_result').length === 4, 'three more results');
    const results = Object.fromEntries(ofBody(cp.sessions[0], 'command_result').map((m) => [m.command_result?.command_id, m.command_result]));
    assert.equal(results['c2']?.ok, false);
    assert.match(results['c2']?.error ?? '', /no PCIe hotplug slot/);
    assert.equal(results['c3']?.ok, false);
    assert.match(results['c3']?.error ?? '', /MISSING not found/);
    assert.equal(results['c4']?.ok, false);
    assert.match(results['c4']?.error ?? '', /invalid LED pattern/);
    assert.equal(readFileSync(attention, 'utf8'), '1', 'failed commands changed nothing');
  });

  it('sends volume reports like inventories: after Hello, on change, again after failover until acked', async (t) => {
    const a = await startFakeControlPlane('cp-a', false);
    const b = await startFakeControlPlane('cp-b', true);
    const inventory = new ScriptedInventory();
    inventory.publish(['S1']);
    const reports = new ScriptedVolumeReports();
    reports.publish(['v1']);
    const session = newSession([a.endpoint, b.endpoint], inventory, undefined, 2000, reports);
    t.after(async () => {
      await session.stop();
      a.kill();
      b.kill();
    });
    session.start();
    const first = await waitUntil(() => ofBody(a.sessions[0], 'volume_report')[0], 'volume report on cp-a');
    assert.deepEqual(first.volume_report, {
      sequence: '1',
      complete: true,
      volumes: [
        {
          volume_uuid: 'v1',
          node_uuid: identity.nodeUUIDs[0],
          generation: '2',
          state: 'VOLUME_SERVED',
          error: '',
          snapshots: [{ snapshot_uuid: 's1', available: true, error: '' }],
          connected_hosts: [{ host_nqn: '', address: '192.0.2.1', host_nqn_source: '' }],
          logical_used_bytes: '4096',
          physical_used_bytes: '1024',
          replica_legs: [], // a replica set's primary lists its copies here; proto3 decodes the empty list
          user_written_bytes: '0', // measured on a replicated volume's primary only: absent decodes as 0 and ''
          user_written_device: '',
          qos: null, // from a primary whose assignment has QoS limits only: an absent message decodes as null
        },
      ],
    });
    a.kill();
    await waitUntil(() => session.state().lastAckedVolumeReportSequence === 1, 'cp-b acks the re-sent report');
    assert.deepEqual(reports.acks, [1]);
    reports.publish(['v1', 'v2']);
    await waitUntil(() => session.state().lastAckedVolumeReportSequence === 2, 'the changed report is sent at once and acked');
    b.sessions[0]?.end();
    await waitUntil(() => b.sessions.length === 2 && ofBody(b.sessions[1], 'heartbeat').length >= 1, 'a new session on cp-b');
    assert.equal(ofBody(b.sessions[1], 'volume_report').length, 0, 'an acked report is not re-sent');
  });
  it('sends pool reports like volume reports: after Hello, on change, again after failover until acked', async (t) => {
    const a = await startFakeControlPlane('cp-a', false);
    const b = await startFakeControlPlane('cp-b', true);
    const inventory = new ScriptedInventory();
    inventory.publish(['S1']);
    let report: PoolReportSnapshot = {
      sequence: 1,
      pools: [
        {
          nodeUUID: identity.nodeUUIDs[0] as string, state: 'Growing', error: '', level: 'raid0', journal: false, rawBytes: 2000n, arrayBytes: 1990n,
          capacityBytes: 1800n, freeBytes: 1500n, provisionedBytes: 4096n, logicalUsedBytes: 600n, physicalUsedBytes: 300n,
          physicalUsedIncludingParityBytes: 300n, rebuildProgressPercent: 40, measuredAt: 'now',
          devices: [{ serial: 'S1', role: 'data', state: 'Adding', sizeBytes: 1000n, error: '' }],
        },
      ],
    };
    const listeners = new Set<(r: PoolReportSnapshot) => void>();
    const acks: number[] = [];
    const pools: PoolReportSource = {
      current: () => report,
      onChange: (l) => (listeners.add(l), () => listeners.delete(l)),
      acknowledged: (sequence) => acks.push(sequence),
    };
    const session = newSession([a.endpoint, b.endpoint], inventory, undefined, 2000, undefined, pools);
    t.after(async () => {
      await session.stop();
      a.kill();
      b.kill();
    });
    session.start();
    const first = await waitUntil(() => ofBody(a.sessions[0], 'pool_report')[0], 'pool report on cp-a');
    assert.equal(first.pool_report?.sequence, '1');
    assert.deepEqual(
      { ...first.pool_report?.pools[0], devices: undefined },
      {
        node_uuid: identity.nodeUUIDs[0], state: 'POOL_GROWING', error: '', level: 'raid0', journal: false, raw_bytes: '2000', array_bytes: '1990',
        capacity_bytes: '1800', free_bytes: '1500', provisioned_bytes: '4096', logical_used_bytes: '600', physical_used_bytes: '300',
        physical_used_including_parity_bytes: '300', rebuild_progress_percent: 40, measured_at: 'now', devices: undefined,
        // Not measured: absent on the wire (ErrorCount messages), not 0.
        recoverable_integrity_errors: null, unrecoverable_integrity_errors: null,
      },
    );
    assert.deepEqual(first.pool_report?.pools[0]?.devices, [
      { serial: 'S1', role: 'data', state: 'POOL_DEVICE_ADDING', size_bytes: '1000', error: '', recoverable_integrity_errors: null },
    ]);
    a.kill();
    await waitUntil(() => session.state().lastAckedPoolReportSequence === 1, 'cp-b acks the re-sent report');
    report = { ...report, sequence: 2 };
    for (const l of listeners) l(report);
    await waitUntil(() => session.state().lastAckedPoolReportSequence === 2, 'the changed report is sent at once and acked');
    assert.deepEqual(acks, [1, 2]);
  });

  it('presents a fresh token on every call and renews it on the live stream before it expires', async (t) => {
    const cp = await startFakeControlPlane('cp', true);
    const inventory = new ScriptedInventory();
    inventory.publish(['S1']);
    const tokens = stubTokens(2200);
    const session = newSession([cp.endpoint], inventory, undefined, 2000, undefined, undefined, tokens);
    t.after(async () => {
      await session.stop();
      cp.kill();
    });
    session.start();
    await waitUntil(() => session.state().connected, 'connected');
    assert.equal(cp.sessions[0]?.authorization, 'Bearer token-1');
    // Half of the remaining life (1.1 s), then again for each renewed token.
    const renewals = await waitUntil(() => (ofBody(cp.sessions[0], 'token_renewal').length >= 2 ? ofBody(cp.sessions[0], 'token_renewal') : undefined), 'two renewals', 5000);
    assert.deepEqual(renewals.slice(0, 2).map((m) => m.token_renewal?.token), ['token-2', 'token-3']);
    assert.equal(cp.sessions.length, 1, 'renewed on the stream, not by reconnecting');

    cp.sessions[0]?.end();
    await waitUntil(() => cp.sessions.length === 2 && session.state().connected, 'a new session');
    assert.match(cp.sessions[1]?.authorization ?? '', /^Bearer token-\d+$/);
    assert.notEqual(cp.sessions[1]?.authorization, cp.sessions[0]?.authorization, 'a new call gets a new token');
  });

  it('keeps retrying while no token can be issued (etcd unreachable, cluster not bootstrapped), then connects', async (t) => {
    const cp = await startFakeControlPlane('cp', true);
    const inventory = new ScriptedInventory();
    inventory.publish(['S1']);
    let failures = 3;
    const tokens: AgentTokenSource = {
      issue: async () => {
        if (failures-- > 0) throw new Error('etcd unreachable');
        return { token: 'good', expiresAtMs: Date.now() + 60_000 };
      },
    };
    const session = newSession([cp.endpoint], inventory, undefined, 2000, undefined, undefined, tokens);
    t.after(async () => {
      await session.stop();
      cp.kill();
    });
    session.start();
    await waitUntil(() => session.state().lastAckedSequence === 1, 'connected and acked once a token is issued', 5000);
    assert.equal(cp.sessions.length, 1, 'no call was made without a token');
    assert.equal(cp.sessions[0]?.authorization, 'Bearer good');
  });

  it('stops at once while a token is being issued', async () => {
    const inventory = new ScriptedInventory();
    inventory.publish(['S1']);
    const never: AgentTokenSource = { issue: () => new Promise(() => undefined) };
    const session = newSession(['127.0.0.1:1'], inventory, undefined, 2000, undefined, undefined, never);
    session.start();
    await new Promise((r) => setTimeout(r, 100));
    const started = Date.now();
    await session.stop();
    assert.ok(Date.now() - started < 500, 'stop() did not wait for the token');
  });
});
