// Issue 13 item 9: the node and NVMe device data-integrity counters are measured. An agent's
// PoolReport carries md's corrected read errors (recoverable, per device and for the node) and
// btrfs' read, corruption and generation errors (unrecoverable, for the node); the real control
// plane stores them and GET /api/v2/nodes/{UUID} and GET /api/v2/nvmeDevices serve them. A pool
// report without them (an agent that did not measure them) keeps the documented "not measured" 0.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import type { Etcd3 } from 'etcd3';
import { signAgentToken } from '../../lib/agent-token.js';
import { AgentSecretStore } from '../../lib/etcd/agent-secret-store.js';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { loadStrataProto } from '../../lib/grpc/proto.js';
import type { ClusterRecord, NodeRecord } from '../../lib/records.js';
import type { AgentMessage } from '../../proto/gen/strata/v1/AgentMessage.js';
import type { ControlMessage__Output } from '../../proto/gen/strata/v1/ControlMessage.js';
import type { NodePool } from '../../proto/gen/strata/v1/NodePool.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { startControlPlaneProcess, type ControlPlaneProcess } from '../helpers/processes.js';
import { joinServer, reportInventory } from '../helpers/records.js';
import { waitUntil } from '../helpers/wait.js';

describe('data-integrity counters in the API (real control plane)', { timeout: 60_000 }, () => {
  let etcd: TestEtcd;
  let observer: Etcd3;
  let plane: ControlPlaneProcess;
  let node: NodeRecord;
  let serverUUID: string;
  let session: ReturnType<typeof openSession>;

  const api = async (path: string) => {
    const res = await fetch(`${plane.apiUrl}${path}`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } });
    assert.equal(res.status, 200, path);
    return (await res.json()) as any;
  };

  /** The agent's side of the gRPC session, over TLS verified by the cluster CA. */
  function openSession(token: string) {
    const proto = loadStrataProto();
    const stub = new proto.strata.v1.AgentReporting(plane.grpcEndpoint, grpc.credentials.createSsl(readFileSync(plane.caPath)));
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${token}`);
    const call = stub.Session(metadata);
    const received: ControlMessage__Output[] = [];
    call.on('data', (m: ControlMessage__Output) => received.push(m));
    call.on('error', () => undefined);
    return {
      send: (m: AgentMessage) => call.write(m),
      received,
      close: () => {
        call.end();
        stub.close();
      },
    };
  }

  const pool = (counts: Partial<Pick<NodePool, 'recoverable_integrity_errors' | 'unrecoverable_integrity_errors'>>, deviceCount?: string): NodePool => ({
    node_uuid: node.UUID, state: 'POOL_READY', error: '', level: 'raid1', journal: false, raw_bytes: '1000', array_bytes: '1000', capacity_bytes: '900',
    free_bytes: '900', provisioned_bytes: '0', logical_used_bytes: '0', physical_used_bytes: '0', physical_used_including_parity_bytes: '0',
    rebuild_progress_percent: 0, measured_at: new Date().toISOString(),
    devices: [{ serial: 'INTEGRITY-D0', role: 'data', state: 'POOL_DEVICE_HEALTHY', size_bytes: '1000', error: '', ...(deviceCount ? { recoverable_integrity_errors: { count: deviceCount } } : {}) }],
    ...counts,
  });
  const sendPool = async (sequence: string, p: NodePool) => {
    session.send({ pool_report: { sequence, pools: [p] } });
    await waitUntil(async () => session.received.find((m) => m.pool_report_ack?.sequence === sequence), `pool report ${sequence} acknowledged`, 10_000);
  };
  const nodeCounts = async () => {
    const { statistics } = await api(`/api/v2/nodes/${node.UUID}`);
    return [statistics.UnrecoverableDataIntegrityErrors, statistics.RecoverableDataIntegrityErrors, statistics.GarbageCollectorDataIntegrityErrors];
  };
  const deviceCounts = async () => {
    const device = ((await api('/api/v2/nvmeDevices')).NvmeDevices as any[]).find((d) => d.serial === 'INTEGRITY-D0');
    return [device?.statistics?.UnrecoverableDataIntegrityErrors, device?.statistics?.RecoverableDataIntegrityErrors];
  };
  /** Waits until the node answer shows `expected` (the control plane's cache follows etcd). */
  const showsCounts = async (expected: number[]) => {
    let last: number[] = [];
    await waitUntil(async () => {
      last = await nodeCounts();
      return JSON.stringify(last) === JSON.stringify(expected);
    }, () => `node counts ${JSON.stringify(expected)}, last seen ${JSON.stringify(last)}`, 10_000);
  };

  before(async () => {
    etcd = await startEtcd();
    observer = createEtcdClient([etcd.endpoint]);
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    const cluster = await waitUntil(async () => parseRecord<ClusterRecord>(keys.cluster(), await observer.get(keys.cluster()).string()) ?? undefined, 'the cluster is bootstrapped');
    const joined = await joinServer(observer, { nodes: [{ managedDeviceSerials: ['INTEGRITY-D0'] }] });
    node = joined.nodes[0]!;
    serverUUID = joined.server.UUID;
    await reportInventory(observer, serverUUID, { devices: [{ serial: 'INTEGRITY-D0', sizeBytes: '1000' }] });
    const { token } = await signAgentToken((await new AgentSecretStore(observer).ensure()).current, { clusterUUID: cluster.UUID, serverUUID, nodeUUIDs: [node.UUID] });
    session = openSession(token);
    session.send({ hello: { server_uuid: serverUUID, node_uuids: [node.UUID], agent_instance: randomUUID(), cluster_uuid: cluster.UUID } });
    await waitUntil(async () => session.received.find((m) => m.welcome), 'the control plane welcomed the agent', 10_000);
  });
  after(async () => {
    session?.close();
    await plane?.stop();
    observer?.close();
    await etcd?.stop();
  });

  it('serves the counts an agent measured in the node and the device answers, and the "not measured" 0 once a report has none', async () => {
    await sendPool('1', pool({ recoverable_integrity_errors: { count: '24' }, unrecoverable_integrity_errors: { count: '3' } }, '24'));
    await showsCounts([3, 24, 0]);
    assert.deepEqual(await nodeCounts(), [3, 24, 0], 'unrecoverable (btrfs), recoverable (md), garbage collector (not measured)');
    assert.deepEqual(await deviceCounts(), [0, 24], 'the device: md\'s count for it; its unrecoverable count is not measured');

    await sendPool('2', pool({}));
    await showsCounts([0, 0, 0]);
    assert.deepEqual(await deviceCounts(), [0, 0]);
  });
});
