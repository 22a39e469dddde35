// kill -9 in the middle of a node command or a server add (issue 15: "an agent or control plane
// killed in the middle of a stop, replace or server add converges when it returns: the command is
// recorded in etcd, not only in memory"; docs/node-operations.md). Real etcd, real control-plane
// processes and a real agent process (its data path drives an nvmet tree in a temp directory), all
// SIGKILLed for real. "In the middle" is hit by watching etcd, never by a hook in the product: the
// test watches the key the step writes and kills at once; where the killed process would otherwise
// finish the next step within a millisecond, its etcd connection goes through a proxy that holds
// etcd's answers back for a moment (test/helpers/tcp-proxy.ts), so the effect is in etcd while the
// process still waits for the answer when it is killed.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { ReplicaSetStore } from '../../lib/etcd/replica-set-store.js';
import { freePort } from '../../lib/ports.js';
import type { NodeCommandRecord, NodeRunStateRecord, ReplicaSetRecord, ServerRecord, VolumeRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess, type DaemonProcess } from '../helpers/processes.js';
import { joinServer, nodePoolRecord, putRecord, volumeRecord } from '../helpers/records.js';
import { adminApi } from '../helpers/admin-api.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { waitUntil } from '../helpers/wait.js';
import {
  createEmulatedStorageServer,
  removeEmulatedStorageServer,
  spawnEmulatedAgent,
  type EmulatedStorageServer,
} from '../kits/datapath/emulated-storage-server.js';

interface Node {
  UUID: string;
  state: string;
  failureInfo: string;
}
interface Event {
  EventName: string;
  Description: string;
}

/** How long the proxies hold etcd's answers back while a kill is aimed (a few round trips: well under a second each). */
const ANSWER_DELAY_MS = 300;
const GiB = 1024n ** 3n;

describe('kill -9 in the middle of a node command or a server add: it converges when the process returns', () => {
  let etcd: TestEtcd;
  let client: ReturnType<typeof createEtcdClient>;
  /** The control plane the agent reports to; restarted on the same ports and state (as systemd does). */
  let plane: ControlPlaneProcess;
  let planePorts: { apiPort: number; grpcPort: number; stateDir: string };
  /** The control plane's etcd connection, and the agent's. */
  let planeProxy: TcpProxy;
  let agentProxy: TcpProxy;
  const others: ControlPlaneProcess[] = [];
  let server: EmulatedStorageServer;
  let agent: DaemonProcess;
  let nodeUUID: string;
  let volumeUUID: string;
  let subsystemNQN: string;

  /** The API of `p` (default: `plane`, whichever process it is now); a 200 answer's JSON. */
  const api = (p?: ControlPlaneProcess) => adminApi(() => p ?? plane);
  /** A request to the control plane about to be killed: what became of it (its answer, or none). */
  const unanswered = (path: string, body: unknown) =>
    fetch(`${plane.apiUrl}/api/v2${path}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${plane.adminToken()}`, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    }).then((res) => `answered ${res.status}`, (err: Error) => `no answer (${err.message})`);
  const until = <T>(what: string, probe: () => Promise<T | undefined | false>, ms = 30_000) => waitUntil(probe, what, ms, 50);
  const read = async <T>(key: string) => parseRecord<T>(key, await client.get(key).string());
  const node = (uuid: string, p: ControlPlaneProcess = plane) => api(p).api<Node>('GET', `/nodes/${uuid}`);
  const events = async (p: ControlPlaneProcess = plane) => (await api(p).api<{ events: Event[] }>('GET', '/events?limit=1000')).events;
  const eventsAbout = async (name: string, text: string, p: ControlPlaneProcess = plane) => (await events(p)).filter((e) => e.EventName === name && e.Description.includes(text));
  const exported = () => existsSync(join(server.nvmetRoot, 'subsystems', `${subsystemNQN}:vol:${volumeUUID}`));

  const startPlane = async () => {
    plane = await startControlPlaneProcess({ etcdEndpoint: planeProxy.endpoint, ...planePorts });
    return plane;
  };
  /** Another control plane on the same cluster (its etcd straight, not through the proxy). */
  const startOther = async () => {
    const other = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, stateDir: planePorts.stateDir });
    others.push(other);
    return other;
  };
  const isLeader = async (p: ControlPlaneProcess) => {
    const { controlPlanes } = await api(p).api<{ controlPlanes: { instanceId: string; isActiveClusterManager: boolean }[] }>('GET', '/controlPlanes');
    return controlPlanes.some((c) => c.instanceId === p.instanceId && c.isActiveClusterManager);
  };
  const startAgentProcess = async () => {
    agent = await spawnEmulatedAgent(server, agentProxy.endpoint, plane.grpcEndpoint);
    return agent;
  };
  /** SIGKILLs `victim` the moment `key` is written with a value `hit` accepts; resolves with that value. */
  async function killOnWrite<T>(key: string, hit: (record: T) => boolean, victim: () => DaemonProcess): Promise<{ killed: Promise<T> }> {
    const watcher = await client.watch().key(key).create();
    const killed = new Promise<T>((resolve, reject) => {
      watcher.on('put', (kv) => {
        const record = JSON.parse(kv.value.toString()) as T;
        if (!hit(record)) return;
        void victim().kill().then(() => resolve(record), reject);
        void watcher.cancel();
      });
    });
    return { killed };
  }

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    planeProxy = await startTcpProxy('127.0.0.1', etcd.clientPort);
    agentProxy = await startTcpProxy('127.0.0.1', etcd.clientPort);
    const first = await startControlPlaneProcess({ etcdEndpoint: planeProxy.endpoint });
    planePorts = { apiPort: Number(new URL(first.apiUrl).port), grpcPort: Number(first.grpcEndpoint.split(':')[1]), stateDir: first.stateDir };
    plane = first;
    server = createEmulatedStorageServer('crash-a');
    await startAgentProcess();
    const [only] = await until('the node Active', async () => {
      const { nodes } = await api().api<{ nodes: Node[] }>('GET', '/nodes');
      return nodes.length === 1 && nodes[0]!.state === 'Active' && nodes;
    });
    nodeUUID = only!.UUID;
    subsystemNQN = (await api().api<{ subsystemNQN: string }>('GET', '/cluster')).subsystemNQN;
    const created = await api().api<{ UUID: string }>('POST', '/projects/default/volumes', { name: 'crash-solo', size: '1GiB', replicaCount: 1, acl: { values: ['ALLOW_ANY'] } });
    volumeUUID = created.UUID;
    await until('the volume Available and exported', async () => (await api().api<{ state: string }>('GET', `/volumes/${volumeUUID}`)).state === 'Available' && exported());
  });
  after(async () => {
    await agent?.kill();
    if (server) await removeEmulatedStorageServer(server);
    for (const p of [plane, ...others]) await p?.kill();
    await planeProxy?.close();
    await agentProxy?.close();
    client?.close();
    await etcd?.stop();
    if (planePorts) removeDir(planePorts.stateDir);
  });

  /** Starts the node again and waits until it serves (the next test starts from a served node). */
  async function startAgain(): Promise<void> {
    await api().api('POST', `/nodes/${nodeUUID}/start`, {});
    await until('the node Active and its volume exported again', async () => (await node(nodeUUID)).state === 'Active' && exported());
    await until('the agent reports Running', async () => (await read<NodeRunStateRecord>(keys.nodeRunState(nodeUUID)))?.state === 'Running');
  }

  it('the control plane SIGKILLed as the stop is recorded: the agent stops the node meanwhile; the control plane restarted reports it, nothing stuck', async () => {
    // Killed the moment the command is in etcd, before the control plane could answer the request.
    const { killed } = await killOnWrite<NodeCommandRecord>(keys.nodeCommand(nodeUUID), (c) => c.kind === 'stop', () => plane);
    planeProxy.delayAnswers(ANSWER_DELAY_MS);
    const request = unanswered(`/nodes/${nodeUUID}/stop`, { force: true });
    const command = await killed;
    planeProxy.delayAnswers(0);
    assert.match(await request, /^no answer/, 'the control plane died before it answered');

    // No control plane runs: the agent carries the stop out from etcd alone.
    const stopped = await until('the agent reports Stopped', async () => {
      const run = await read<NodeRunStateRecord>(keys.nodeRunState(nodeUUID));
      return run?.commandId === command.id && run.state === 'Stopped' && run;
    });
    assert.equal(stopped.state, 'Stopped');
    assert.equal(exported(), false, 'its export left the kernel target');

    await startPlane();
    await until('the restarted control plane leads', () => isLeader(plane));
    const after = await until('the node Inactive, stopped', async () => {
      const n = await node(nodeUUID);
      return n.state === 'Inactive' && n;
    });
    assert.match(after.failureInfo, new RegExp(`stopped by an administrator \\(command ${command.id}, stop\\)`));
    // The events of a stop, once each: the request (recorded with the command) and the state change
    // (reported by the restarted control plane, which was dead when the presence changed).
    const inactive = await until('NodeEnteredInactiveState', async () => {
      const found = await eventsAbout('NodeEnteredInactiveState', nodeUUID);
      return found.length > 0 && found;
    });
    assert.equal(inactive.length, 1, JSON.stringify(inactive));
    assert.match(inactive[0]!.Description, /it was stopped \(node stop\)/);
    assert.equal((await eventsAbout('NodeStopRequested', command.id)).length, 1);
    // Nothing stuck: the command is done, a new one is accepted.
    await startAgain();
    assert.equal((await eventsAbout('NodeEnteredActiveState', nodeUUID)).length, 2, 'joined, then started');
  });

  it('the agent SIGKILLed in the middle of the stop (after Stopping, before Stopped): started again it finishes the stop, and stays stopped across restarts', async () => {
    // Its etcd answers held back: once it recorded Stopping, it is still waiting when it is killed.
    const { killed } = await killOnWrite<NodeRunStateRecord>(keys.nodeRunState(nodeUUID), (r) => r.state === 'Stopping', () => agent);
    const activeBefore = (await eventsAbout('NodeEnteredActiveState', nodeUUID)).length;
    agentProxy.delayAnswers(ANSWER_DELAY_MS);
    await api().api('POST', `/nodes/${nodeUUID}/stop`, { force: true });
    const command = (await read<NodeCommandRecord>(keys.nodeCommand(nodeUUID)))!;
    const atKill = await killed;
    agentProxy.delayAnswers(0);
    assert.equal(atKill.commandId, command.id);
    assert.equal((await read<NodeRunStateRecord>(keys.nodeRunState(nodeUUID)))?.state, 'Stopping', 'killed before it recorded Stopped');

    await startAgentProcess();
    await until('the agent reports Stopped', async () => {
      const run = await read<NodeRunStateRecord>(keys.nodeRunState(nodeUUID));
      return run?.commandId === command.id && run.state === 'Stopped';
    });
    await until('its export gone', async () => !exported());
    const stoppedNode = await until('the node Inactive, stopped', async () => {
      const n = await node(nodeUUID);
      return n.state === 'Inactive' && /stopped by an administrator/.test(n.failureInfo) && n;
    });
    assert.match(stoppedNode.failureInfo, new RegExp(`command ${command.id}`));

    // Stays stopped across restarts, a graceful one and a crash: never served, never listed.
    for (const restart of ['SIGTERM', 'SIGKILL'] as const) {
      if (restart === 'SIGTERM') await agent.stop();
      else await agent.kill();
      let served = false;
      const watch = setInterval(() => (served ||= exported()), 20);
      try {
        await startAgentProcess();
        await new Promise((resolve) => setTimeout(resolve, 1500));
      } finally {
        clearInterval(watch);
      }
      assert.equal(served, false, `not served after a ${restart} restart`);
      assert.equal((await node(nodeUUID)).state, 'Inactive', `still Inactive after a ${restart} restart`);
      const run = await read<NodeRunStateRecord>(keys.nodeRunState(nodeUUID));
      assert.deepEqual([run?.commandId, run?.state], [command.id, 'Stopped']);
    }
    assert.equal((await eventsAbout('NodeStopRequested', command.id)).length, 1);
    assert.ok((await eventsAbout('NodeEnteredInactiveState', nodeUUID)).length >= 2, 'the stop reported Inactive');
    assert.equal((await eventsAbout('NodeEnteredActiveState', nodeUUID)).length, activeBefore, 'never Active meanwhile');
    await startAgain();
  });

  it('replace: the active control plane SIGKILLed as the replace is recorded, the next one SIGKILLed during the copy: each successor goes on, the replace completes once', async () => {
    // Record-level servers (as in node-ops.test.ts): the primary's peer, the source gone for good,
    // the Unattached target with room. The primary's resync is written as its agent writes it.
    const peer = (await joinServer(client, { server: { hostname: 'crash-peer' }, nodes: [{ name: 'crash-peer-1' }] })).nodes[0]!.UUID;
    const source = (await joinServer(client, { server: { hostname: 'crash-lost' }, nodes: [{ name: 'crash-lost-1' }], present: false })).nodes[0]!.UUID;
    const spare = await joinServer(client, { server: { hostname: 'crash-spare' }, nodes: [{ name: 'crash-spare-1', unattached: true }] });
    const target = spare.nodes[0]!;
    await putRecord(client, keys.nodePool(target.UUID), nodePoolRecord(target, { capacityBytes: String(100n * GiB), freeBytes: String(100n * GiB) }));
    const volume = volumeRecord([peer, source], { name: 'crash-mirrored', placement: { nodeList: [peer, source], primaryNodeUUID: peer, nsid: 901, port: 29001 } });
    const set: ReplicaSetRecord = { volumeUUID: volume.UUID, epoch: 1, primaryNodeUUID: peer, inSync: [peer], reason: 'created', announced: 'Unknown', updatedAt: new Date().toISOString() };
    await client
      .if(keys.volume(volume.UUID), 'Create', '==', 0)
      .then(client.put(keys.replicaSet(volume.UUID)).value(JSON.stringify(set)), client.put(keys.volume(volume.UUID)).value(JSON.stringify(volume)))
      .commit();
    await until('the source Inactive, the target Unattached', async () => (await node(source)).state === 'Inactive' && (await node(target.UUID)).state === 'Unattached');
    const standby = await startOther();

    // 1. The leader dies the moment the replace is in etcd.
    const { killed } = await killOnWrite<NodeCommandRecord>(keys.nodeCommand(source), (c) => c.kind === 'replace', () => plane);
    planeProxy.delayAnswers(ANSWER_DELAY_MS);
    const request = unanswered(`/nodes/${source}/replace`, { TargetNodeUUID: target.UUID });
    const command = await killed;
    planeProxy.delayAnswers(0);
    assert.match(await request, /^no answer/);
    assert.equal(command.targetNodeUUID, target.UUID);
    // The standby takes over and moves the copy to the target (the move is recorded, the copy not in sync yet).
    await until('the standby moved the copy to the target', async () => (await read<VolumeRecord>(keys.volume(volume.UUID)))?.placement?.nodeList.includes(target.UUID));
    assert.equal(await isLeader(standby), true);
    assert.deepEqual([(await node(source, standby)).state, (await node(target.UUID, standby)).state], ['Detaching', 'Attaching']);

    // 2. During the copy: the control plane comes back (standby now), the leader dies.
    await startPlane();
    await standby.kill();
    // The primary's agent finishes the full resync and records the target in sync (its own write: no control plane needed).
    assert.equal(await new ReplicaSetStore(client).markInSync(volume.UUID, 1, peer, target.UUID, `replica ${target.UUID} resynchronized`), 'done');

    // The restarted control plane leads and completes the replace.
    const done = await until('the replace completed', async () => {
      const c = await read<NodeCommandRecord>(keys.nodeCommand(source));
      return c?.completedAt ? c : undefined;
    });
    assert.equal(done.id, command.id);
    assert.equal(done.failure, undefined);
    assert.equal(await isLeader(plane), true);
    const detached = await node(source);
    assert.equal(detached.state, 'Inactive');
    assert.match(detached.failureInfo, new RegExp(`replaced by node ${target.UUID}`));
    assert.equal((await node(target.UUID)).state, 'Active');
    assert.deepEqual((await read<VolumeRecord>(keys.volume(volume.UUID)))!.placement!.nodeList, [peer, target.UUID]);
    // Its events once each, whichever control plane wrote them.
    await until('NodeReplaced', async () => (await eventsAbout('NodeReplaced', target.UUID)).length > 0);
    assert.equal((await eventsAbout('NodeReplaceRequested', command.id)).length, 1);
    assert.equal((await eventsAbout('VolumeReplicaReplaced', 'crash-mirrored')).length, 1, 'the copy moved once');
    assert.equal((await eventsAbout('NodeReplaced', target.UUID)).length, 1);
    // Nothing stuck: a new command for the source is accepted.
    await api().api('POST', `/nodes/${source}/start`, {});
  });

  it('server add: the control plane SIGKILLed after the etcd member add, before the record has it: restarted, it completes the record', async () => {
    const uuid = randomUUID();
    const peerURL = `http://127.0.0.7:${await freePort()}`;
    const members = async () => (await client.cluster.memberList({})).members;
    const before = (await members()).length;
    planeProxy.delayAnswers(ANSWER_DELAY_MS);
    const request = unanswered('/servers', { serverEndpoints: [peerURL], serverUUID: uuid });
    // etcd added the member; the control plane has not had the answer yet.
    const member = await waitUntil(async () => (await members()).find((m) => (m.peerURLs ?? []).includes(peerURL)), 'the etcd member added', 20_000, 5);
    await plane.kill();
    planeProxy.delayAnswers(0);
    assert.match(await request, /^no answer/);
    const left = (await read<ServerRecord>(keys.server(uuid)))!;
    assert.equal(left.added?.etcdMemberID, '', 'killed before the record had its member');

    await startPlane();
    const completed = await until('the record carries the member', async () => {
      const r = await read<ServerRecord>(keys.server(uuid));
      return r?.added?.etcdMemberID === String(member.ID) && r;
    });
    assert.equal(completed.added?.etcdPeerURL, peerURL);
    const now = await members();
    assert.equal(now.length, before + 1, 'no second member added');
    assert.equal(now.filter((m) => (m.peerURLs ?? []).includes(peerURL)).length, 1);
    const shown = await until('the server shown with its learner', async () => {
      const s = await api().api<{ UUID: string; state: string; etcdMemberInfo: { role: string } }>('GET', `/servers/${uuid}`);
      return s.etcdMemberInfo.role === 'Learner' && s;
    }, 10_000);
    assert.equal(shown.state, 'Creating');
    // A second add of the same server is refused: the add is recorded, not lost.
    assert.equal((await api().request('POST', '/servers', { serverEndpoints: [peerURL], serverUUID: uuid })).status, 409);
    await client.cluster.memberRemove({ ID: member.ID });
  });
});
