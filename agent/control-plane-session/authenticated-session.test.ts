// The agent's session against the real control-plane gRPC service and a real etcd, with agent
// tokens as in production (docs/agent-auth.md): it connects with a token issued from the secret
// in etcd, its reports are stored, it renews short-lived tokens on the stream, follows secret
// rotations without reconnecting, and comes back after the control plane restarts.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type * as grpc from '@grpc/grpc-js';
import type { Etcd3 } from 'etcd3';
import { AgentSecretStore } from '../../lib/etcd/agent-secret-store.js';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { ClusterStore } from '../../lib/etcd/cluster-store.js';
import { NodeStore } from '../../lib/etcd/node-store.js';
import { keys } from '../../lib/etcd/keys.js';
import type { ClusterRecord, ServerFactsRecord, VolumeStatusRecord } from '../../lib/records.js';
import { AgentAuthenticator } from '../../control-plane/agents/agent-authenticator.js';
import { bindGrpcServer, createAgentGrpcServer } from '../../control-plane/agents/agent-grpc-server.js';
import { AgentSessions } from '../../control-plane/agents/agent-sessions.js';
import { InventoryService } from '../../control-plane/agents/inventory-service.js';
import { InventoryStore } from '../../control-plane/agents/inventory-store.js';
import { VolumeReportService } from '../../control-plane/agents/volume-report-service.js';
import { VolumeStatusStore } from '../../control-plane/agents/volume-status-store.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { joinServer } from '../../test/helpers/records.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import type { VolumeReportSnapshot, VolumeReportSource } from '../datapath/reconcile/volume-report.js';
import type { InventorySnapshot, InventorySource } from '../inventory/inventory-service.js';
import { EtcdAgentTokenIssuer } from './agent-token-issuer.js';
import { ControlPlaneSession } from './control-plane-session.js';

/** A source of snapshots the test publishes (sequence grows by one each time). */
class Published<T extends { sequence: number }> {
  private snapshot: T | undefined;
  private readonly listeners = new Set<(s: T) => void>();
  current() {
    return this.snapshot;
  }
  onChange(listener: (s: T) => void) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  acknowledged() {}
  publish(make: (sequence: number) => T): void {
    this.snapshot = make((this.snapshot?.sequence ?? 0) + 1);
    for (const l of this.listeners) l(this.snapshot);
  }
}

describe('the agent session with a real control plane and agent tokens', () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let server: grpc.Server;
  let port: number;
  const clusterUUID = randomUUID();
  const cluster: ClusterRecord = {
    UUID: clusterUUID, clusterName: 'test', subsystemNQN: `nqn.2024-01.io.strata:cluster:${clusterUUID}`, supportedMaxReplicas: 3,
    createdAt: new Date().toISOString(), bootstrappedBy: 'test',
  };
  const sessions = new AgentSessions();

  async function startControlPlaneGrpc(atPort: number): Promise<number> {
    const authenticator = new AgentAuthenticator({ secrets: new AgentSecretStore(client), nodes: new NodeStore(client), clusterUUID: cluster.UUID, logger: silentLogger(), clockToleranceSeconds: 1 });
    await authenticator.start();
    server = createAgentGrpcServer({
      logger: silentLogger(),
      sessions,
      authenticator,
      inventory: new InventoryService(new InventoryStore(client), 'cp-test'),
      volumeReports: new VolumeReportService(new VolumeStatusStore(client)),
      instanceId: 'cp-test',
      clusterUUID: cluster.UUID,
    });
    return bindGrpcServer(server, '127.0.0.1', atPort);
  }

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    await client.put(keys.cluster()).value(JSON.stringify(cluster));
    port = await startControlPlaneGrpc(0);
  });
  after(async () => {
    sessions.closeAll('test done');
    server.forceShutdown();
    client.close();
    await etcd.stop();
  });

  it('connects with a token from etcd, stores its reports, renews, follows rotations and survives a control-plane restart', async (t) => {
    const { server: record, nodes } = await joinServer(client);
    const identity = { serverUUID: record.UUID, nodeUUIDs: nodes.map((n) => n.UUID) };
    const inventory = new Published<InventorySnapshot>();
    const volumes = new Published<VolumeReportSnapshot>();
    const hostname = (sequence: number) => `host-${sequence}`;
    inventory.publish((sequence) => ({
      sequence,
      facts: { hostname: hostname(sequence), productVersion: '0.1.0', tpm2Supported: false, cpuCores: 2, memoryBytes: '1', os: 'x', kernel: 'y' },
      devices: [],
      journalDeviceSerial: '',
      takenAt: new Date().toISOString(),
    }));
    const volumeUUID = randomUUID();
    volumes.publish((sequence) => ({
      sequence,
      complete: true,
      volumes: [{ volumeUUID, nodeUUID: identity.nodeUUIDs[0]!, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [], logicalUsedBytes: '0', physicalUsedBytes: '0' }],
      takenAt: new Date().toISOString(),
    }));
    const session = new ControlPlaneSession({
      endpoints: [`127.0.0.1:${port}`],
      identity,
      agentVersion: '0.1.0-test',
      agentInstance: randomUUID(),
      clusterUUID: () => cluster.UUID,
      inventory: inventory as InventorySource,
      volumeReports: volumes as VolumeReportSource,
      commands: { setLed: async () => undefined },
      // Tokens of 3 s: renewed about every 1.5 s, so a few seconds cover several renewals.
      tokens: new EtcdAgentTokenIssuer({ cluster: new ClusterStore(client), secrets: new AgentSecretStore(client), identity, logger: silentLogger(), lifetimeSeconds: 3 }),
      heartbeatMs: 200,
      reconnectBackoff: { initialMs: 50, maxMs: 400 },
      logger: silentLogger(),
    });
    t.after(() => session.stop());
    session.start();

    const facts = async () => parseRecord<ServerFactsRecord>('', await client.get(keys.serverFacts(identity.serverUUID)).string());
    await waitUntil(() => session.state().lastAckedSequence === 1 && session.state().lastAckedVolumeReportSequence === 1, 'reports acked', 5000);
    assert.equal((await facts())?.hostname, hostname(1));
    const status = parseRecord<VolumeStatusRecord>('', await client.get(keys.volumeStatus(volumeUUID, identity.nodeUUIDs[0]!)).string());
    assert.equal(status?.state, 'Served');

    // Past the first token and its tolerance: still the first session.
    await new Promise((r) => setTimeout(r, 5000));
    assert.deepEqual([session.state().connected, session.state().sessions], [true, 1]);

    // Two rotations retire the secret the session started with; renewals use the current one.
    await new AgentSecretStore(client).rotate();
    await new Promise((r) => setTimeout(r, 2000));
    await new AgentSecretStore(client).rotate();
    await new Promise((r) => setTimeout(r, 4000));
    assert.deepEqual([session.state().connected, session.state().sessions], [true, 1], 'no reconnect across rotations');
    inventory.publish((sequence) => ({ ...inventory.current()!, sequence, facts: { ...inventory.current()!.facts, hostname: hostname(sequence) } }));
    await waitUntil(() => session.state().lastAckedSequence === 2, 'inventory 2 acked', 3000);
    assert.equal((await facts())?.hostname, hostname(2));

    // A control-plane restart (a new process: nothing remembered but etcd).
    server.forceShutdown();
    await startControlPlaneGrpc(port);
    await waitUntil(() => session.state().connected && session.state().sessions === 2, 'reconnected after the restart', 10_000);
    inventory.publish((sequence) => ({ ...inventory.current()!, sequence, facts: { ...inventory.current()!.facts, hostname: hostname(sequence) } }));
    await waitUntil(() => session.state().lastAckedSequence === 3, 'inventory 3 acked', 3000);
    assert.equal((await facts())?.hostname, hostname(3));
  });
});
