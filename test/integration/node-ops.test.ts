// Node stop / start / restart / replace (spec 4.8, issue 15 items 1 and 3; docs/node-operations.md)
// end to end on the host: a real control plane (its own process), real etcd, and two real agents
// whose data path drives an nvmet tree in a temp directory. The rules, refusals and states; the
// planned failover of replicated volumes needs the real kernel (test/e2e/node-ops.e2e.test.ts).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { packageRoot } from '../../lib/paths.js';
import type { NodeCommandRecord, NodeRecord, NodeRunStateRecord, ReplicaSetRecord, VolumeRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../helpers/processes.js';
import { joinServer, markAbsent, markPresent, nodePoolRecord, putRecord, volumeRecord } from '../helpers/records.js';
import { waitUntil } from '../helpers/wait.js';
import { projectToken } from '../kits/test-tokens.js';
import {
  createEmulatedStorageServer,
  removeEmulatedStorageServer,
  startEmulatedAgent,
  type EmulatedStorageServer,
} from '../kits/datapath/emulated-storage-server.js';

interface Node {
  UUID: string;
  name: string;
  hostname: string;
  state: string;
  failureInfo: string;
  ETag: string;
}
interface Volume {
  UUID: string;
  state: string;
  nodeList: string[];
  protectionState: string;
}
interface ErrorBody {
  error: string;
  code: number;
  message: string;
}

const REPLACE_TIMEOUT_S = 10;
/** Concurrent commands fired at once, for a limit of 2. */
const CROWD = 20;

describe('node stop / start / restart / replace (real control plane, etcd and agents)', () => {
  let etcd: TestEtcd;
  let client: ReturnType<typeof createEtcdClient>;
  let plane: ControlPlaneProcess;
  const servers: EmulatedStorageServer[] = [];
  let solo: Volume;
  let soloNode: Node;
  let soloServer: EmulatedStorageServer;
  let subsystemNQN: string;

  async function call<T>(method: string, path: string, options: { body?: unknown; expected?: number; token?: string; headers?: Record<string, string> } = {}): Promise<T> {
    const res = await fetch(`${plane.apiUrl}/api/v2${path}`, {
      method,
      headers: { Authorization: `Bearer ${options.token ?? plane.adminToken()}`, 'Content-Type': 'application/json', ...options.headers },
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
    const text = await res.text();
    assert.equal(res.status, options.expected ?? 200, `${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as T;
  }
  const node = (uuid: string) => call<Node>('GET', `/nodes/${uuid}`);
  const until = <T>(what: string, probe: () => Promise<T | undefined | false>, ms = 20_000) => waitUntil(probe, what, ms, 100);
  const read = async <T>(key: string) => parseRecord<T>(key, await client.get(key).string());
  const eventNames = async () => (await call<{ events: { EventName: string; Description: string }[] }>('GET', '/events?limit=1000')).events;
  const exported = (server: EmulatedStorageServer, volumeUUID: string) => existsSync(join(server.nvmetRoot, 'subsystems', `${subsystemNQN}:vol:${volumeUUID}`));
  /** The volume's backing somewhere under the server's pool directory. */
  const backingExists = (server: EmulatedStorageServer, volumeUUID: string): boolean => {
    const walk = (dir: string): boolean =>
      readdirSync(dir, { withFileTypes: true }).some((e) => e.name.includes(volumeUUID) || (e.isDirectory() && walk(join(dir, e.name))));
    return walk(server.poolDir);
  };

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    plane = await startControlPlaneProcess({
      etcdEndpoint: etcd.endpoint,
      // Short replace limits: the failure tests wait for them.
      extraArgs: ['--max-node-commands-in-progress', '2', '--node-replace-timeout-seconds', String(REPLACE_TIMEOUT_S), '--node-replace-target-grace-seconds', '1'],
    });
    for (const hostname of ['storage-a', 'storage-b']) servers.push(createEmulatedStorageServer(hostname));
    for (const server of servers) await startEmulatedAgent(server, etcd.endpoint, plane.grpcEndpoint);
    await until('both nodes Active', async () => {
      const { nodes } = await call<{ nodes: Node[] }>('GET', '/nodes');
      return nodes.length === 2 && nodes.every((n) => n.state === 'Active');
    });
    subsystemNQN = (await call<{ subsystemNQN: string }>('GET', '/cluster')).subsystemNQN;
    const created = await call<Volume>('POST', '/projects/default/volumes', { body: { name: 'solo', size: '1GiB', replicaCount: 1, acl: { values: ['ALLOW_ANY'] } } });
    solo = await until('solo Available', async () => {
      const v = await call<Volume>('GET', `/volumes/${created.UUID}`);
      return v.state === 'Available' && v;
    });
    soloNode = await node(solo.nodeList[0]!);
    soloServer = servers.find((s) => s.hostname === soloNode.hostname)!;
  });
  after(async () => {
    for (const server of servers) await removeEmulatedStorageServer(server);
    await plane?.stop();
    client?.close();
    await etcd?.stop();
    if (plane) removeDir(plane.stateDir);
  });

  it('only system administrators may give node commands; bad input is 400, an unknown node 404', async () => {
    const viewer = await projectToken(client, 'system', ['system:cluster-viewer']);
    const projectAdmin = await projectToken(client, 'default', ['default:admin']);
    for (const verb of ['stop', 'start', 'restart', 'replace']) {
      const body = verb === 'replace' ? { TargetNodeUUID: randomUUID() } : {};
      for (const token of [viewer, projectAdmin]) {
        const denied = await call<ErrorBody>('POST', `/nodes/${soloNode.UUID}/${verb}`, { body, token, expected: 403 });
        assert.equal(denied.code, 7);
      }
      assert.equal((await call<ErrorBody>('POST', `/nodes/not-a-uuid/${verb}`, { body, expected: 400 })).code, 3);
      assert.equal((await call<ErrorBody>('POST', `/nodes/${randomUUID()}/${verb}`, { body, expected: 404 })).code, 5);
      await call<ErrorBody>('POST', `/nodes/${soloNode.UUID}/${verb}`, { body: [1], expected: 400 });
    }
    const noTarget = await call<ErrorBody>('POST', `/nodes/${soloNode.UUID}/replace`, { body: {}, expected: 400 });
    assert.match(noTarget.error, /TargetNodeUUID is required/);
    const other = servers.find((s) => s !== soloServer)!;
    const otherNode = (await call<{ nodes: Node[] }>('GET', '/nodes')).nodes.find((n) => n.hostname === other.hostname)!;
    const wrongStates = await call<ErrorBody>('POST', `/nodes/${soloNode.UUID}/replace`, { body: { TargetNodeUUID: otherNode.UUID }, expected: 400 });
    assert.match(wrongStates.error, /source node Inactive and the target node Unattached: .* is Active, .* is Active/);
    assert.equal(await read(keys.nodeCommand(soloNode.UUID)), null, 'nothing recorded');
    assert.equal((await node(soloNode.UUID)).ETag, soloNode.ETag);
  });

  it('stop and restart are refused with a 4xx naming the volume whose only in-sync copy the node holds; nothing is written', async () => {
    for (const [verb, body] of [['stop', { force: false }], ['restart', { force: false }], ['restart', { considerBackend: true }]] as const) {
      const refused = await call<ErrorBody>('POST', `/nodes/${soloNode.UUID}/${verb}`, { body, expected: 400 });
      assert.equal(refused.code, 3);
      assert.ok(refused.error.includes(`default/solo (${solo.UUID})`), refused.error);
      assert.match(refused.error, /only in-sync copy .*force/);
    }
    assert.equal(await read(keys.nodeCommand(soloNode.UUID)), null, 'no command recorded');
    const after = await node(soloNode.UUID);
    assert.equal(after.state, 'Active');
    assert.equal(after.ETag, soloNode.ETag);
    assert.ok(exported(soloServer, solo.UUID));
    assert.ok(!(await eventNames()).some((e) => e.EventName === 'NodeStopRequested'));
  });

  it('stop (forced) takes the node out of service, it stays stopped across an agent restart, and start serves it again', async () => {
    await call('POST', `/nodes/${soloNode.UUID}/stop`, { body: { force: true }, headers: { 'If-Match': soloNode.ETag } });
    const stopped = await until('node Inactive (stopped)', async () => {
      const n = await node(soloNode.UUID);
      return n.state === 'Inactive' && n;
    });
    assert.match(stopped.failureInfo, /stopped by an administrator/);
    assert.notEqual(stopped.ETag, soloNode.ETag, 'a command changes the node\'s ETag');
    const command = (await read<NodeCommandRecord>(keys.nodeCommand(soloNode.UUID)))!;
    assert.deepEqual([command.kind, command.desired, command.force], ['stop', 'Stopped', true]);
    const run = await until('the agent reports Stopped', async () => {
      const r = await read<NodeRunStateRecord>(keys.nodeRunState(soloNode.UUID));
      return r?.commandId === command.id && r.state === 'Stopped' && r;
    });
    assert.match(run.detail, /serving nothing/);
    // It serves nothing: its exports left the kernel target; the data stays.
    await until('export removed', async () => !exported(soloServer, solo.UUID));
    assert.ok(backingExists(soloServer, solo.UUID), 'the backing stays');
    const unavailable = await until('volume NotAvailable', async () => {
      const v = await call<Volume>('GET', `/volumes/${solo.UUID}`);
      return v.protectionState === 'NotAvailable' && v;
    });
    assert.equal(unavailable.state, 'Available', 'the volume is not changed, only not served');
    await until('events', async () => {
      const events = await eventNames();
      return events.some((e) => e.EventName === 'NodeStopRequested') && events.some((e) => e.EventName === 'NodeEnteredInactiveState' && /stopped/.test(e.Description));
    });

    // A stale ETag is 412, and nothing is recorded.
    const stale = await call<ErrorBody>('POST', `/nodes/${soloNode.UUID}/start`, { body: {}, headers: { 'If-Match': soloNode.ETag }, expected: 412 });
    assert.equal(stale.code, 9);
    assert.equal((await read<NodeCommandRecord>(keys.nodeCommand(soloNode.UUID)))?.id, command.id);

    // The agent restarts: the node stays stopped (and its server Active).
    await soloServer.agent!.stop();
    await startEmulatedAgent(soloServer, etcd.endpoint, plane.grpcEndpoint);
    await soloServer.agent!.dataPath.reconcileNow();
    assert.ok(!exported(soloServer, solo.UUID), 'still serving nothing after the agent restarted');
    assert.equal((await node(soloNode.UUID)).state, 'Inactive');
    const presence = await until('server present again', async () => (await read<{ nodeUUIDs: string[] }>(keys.presence(soloServer.agent!.identity.serverUUID))) ?? undefined);
    assert.deepEqual(presence.nodeUUIDs, [], 'the presence key leaves the stopped node out');

    // Start: served again, Active, the volume fully protected.
    const current = await node(soloNode.UUID);
    await call('POST', `/nodes/${soloNode.UUID}/start`, { body: {}, headers: { 'If-Match': current.ETag } });
    await until('node Active', async () => (await node(soloNode.UUID)).state === 'Active');
    await until('export back', async () => exported(soloServer, solo.UUID));
    await until('FullyProtected', async () => (await call<Volume>('GET', `/volumes/${solo.UUID}`)).protectionState === 'FullyProtected');
    const started = await until('the agent reports Running', async () => {
      const r = await read<NodeRunStateRecord>(keys.nodeRunState(soloNode.UUID));
      return r?.state === 'Running' && r;
    });
    assert.equal(started.commandId, (await read<NodeCommandRecord>(keys.nodeCommand(soloNode.UUID)))!.id);
    assert.ok((await eventNames()).some((e) => e.EventName === 'NodeStartRequested'));
  });

  it('restart is stop then start', async () => {
    await call('POST', `/nodes/${soloNode.UUID}/restart`, { body: { force: 'true', considerBackend: false } });
    const command = (await read<NodeCommandRecord>(keys.nodeCommand(soloNode.UUID)))!;
    assert.equal(command.kind, 'restart');
    const run = await until('restart done', async () => {
      const r = await read<NodeRunStateRecord>(keys.nodeRunState(soloNode.UUID));
      return r?.commandId === command.id && r.state === 'Running' && r;
    });
    assert.equal(run.stopDone, true, 'the stop half ran first');
    assert.equal((await node(soloNode.UUID)).state, 'Active');
    await until('served', async () => exported(soloServer, solo.UUID) && (await call<Volume>('GET', `/volumes/${solo.UUID}`)).protectionState === 'FullyProtected');
    assert.ok((await eventNames()).some((e) => e.EventName === 'NodeRestartRequested'));
  });

  it('the CLI: strata nodes stop --wait and start --wait (the node\'s agent did it when they return)', async () => {
    const strata = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(process.execPath, [join(packageRoot, 'dist', 'cli', 'main.js'), ...args], {
          env: { PATH: process.env['PATH'] ?? '', STRATA_ENDPOINT: plane.apiUrl, STRATA_TOKEN: plane.adminToken() }, timeout: 150_000,
        }, (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }));
      });
    const refused = await strata(['nodes', 'stop', soloNode.UUID]);
    assert.equal(refused.code, 1, 'an API refusal exits 1');
    assert.ok(refused.stderr.includes(`default/solo (${solo.UUID})`), refused.stderr);
    const stop = await strata(['nodes', 'stop', soloNode.UUID, '--force', '--wait', '--wait-timeout', '120s']);
    assert.equal(stop.code, 0, stop.stderr);
    assert.match(stop.stdout, /: Inactive \(stopped by an administrator/);
    // --wait ends when the node is Inactive (its agent left presence); the agent records its run
    // state Stopped at the end of the pass that follows.
    await until('the agent reports Stopped', async () => (await read<NodeRunStateRecord>(keys.nodeRunState(soloNode.UUID)))?.state === 'Stopped', 60_000);
    const start = await strata(['nodes', 'start', soloNode.UUID, '--wait', '--wait-timeout', '120s', '-o', 'json']);
    assert.equal(start.code, 0, start.stderr);
    assert.equal((JSON.parse(start.stdout) as Node).state, 'Active');
    await until('export back', async () => exported(soloServer, solo.UUID));
    // The start command is in progress until its agent records Running, which may come a moment
    // after the node is Active: it would count against the next test's limit of commands.
    await until('the agent reports Running', async () => (await read<NodeRunStateRecord>(keys.nodeRunState(soloNode.UUID)))?.state === 'Running', 60_000);
  });

  it('409 while a command runs on the node, 429 when too many run', async () => {
    // A server whose agent holds its presence but never carries commands out: they stay in progress.
    const busy = await joinServer(client, { server: { hostname: 'busy' }, nodes: [{ name: 'busy-1' }, { name: 'busy-2' }, { name: 'busy-3' }] });
    const [n1, n2, n3] = busy.nodes.map((n) => n.UUID) as [string, string, string];
    await call('POST', `/nodes/${n1}/stop`, { body: {} });
    const conflict = await call<ErrorBody>('POST', `/nodes/${n1}/start`, { body: {}, expected: 409 });
    assert.equal(conflict.code, 10);
    assert.match(conflict.error, /a stop command .* is in progress/);
    await call('POST', `/nodes/${n2}/stop`, { body: {} });
    const tooMany = await call<ErrorBody>('POST', `/nodes/${n3}/stop`, { body: {}, expected: 429 });
    assert.equal(tooMany.code, 8);
    assert.equal(await read(keys.nodeCommand(n3)), null);
    // Its agent gone, its commands wait for it without blocking new ones.
    await markAbsent(client, busy.server.UUID);
    await call('POST', `/nodes/${n1}/start`, { body: {} });
  });

  it('the limit of commands in progress holds under concurrent requests to two control planes: never more recorded, the others 429 with the JSON error body', async () => {
    const second = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, extraArgs: ['--max-node-commands-in-progress', '2'] });
    try {
      // Present nodes whose agent never carries a command out: each recorded command stays in progress.
      const crowd = await joinServer(client, { server: { hostname: 'crowd' }, nodes: Array.from({ length: CROWD }, (_, i) => ({ name: `crowd-${i}` })) });
      const answers = await Promise.all(
        crowd.nodes.map(async (n, i) => {
          const res = await fetch(`${(i % 2 === 0 ? plane : second).apiUrl}/api/v2/nodes/${n.UUID}/stop`, {
            method: 'POST',
            headers: { Authorization: `Bearer ${plane.adminToken()}`, 'Content-Type': 'application/json' },
            body: '{"force": true}',
          });
          return { status: res.status, type: res.headers.get('content-type') ?? '', body: (await res.json()) as Partial<ErrorBody> };
        }),
      );
      const recorded = (await Promise.all(crowd.nodes.map((n) => read<NodeCommandRecord>(keys.nodeCommand(n.UUID))))).filter((c) => c !== null);
      assert.equal(recorded.length, 2, `exactly the limit recorded: ${JSON.stringify(answers.map((a) => a.status))}`);
      assert.deepEqual(answers.map((a) => a.status).sort(), [200, 200, ...Array.from({ length: CROWD - 2 }, () => 429)]);
      for (const refused of answers.filter((a) => a.status === 429)) {
        assert.match(refused.type, /application\/json/);
        assert.equal(refused.body.code, 8);
        assert.match(refused.body.error ?? '', /2 node commands are in progress \(at most 2\)/);
        assert.equal(refused.body.message, refused.body.error);
      }
      assert.equal((await eventNames()).filter((e) => e.EventName === 'NodeStopRequested' && /crowd-/.test(e.Description)).length, 2, 'one event per recorded command');
      // Their agent gone, the commands wait for it without blocking the tests that follow.
      await markAbsent(client, crowd.server.UUID);
    } finally {
      await second.stop();
      removeDir(second.stateDir);
    }
  });

  it('replace: source Inactive and target Unattached, else 400; the target takes over and the source is detached', async () => {
    const gone = await joinServer(client, { server: { hostname: 'gone' }, nodes: [{ name: 'gone-1' }], present: false });
    const spare = await joinServer(client, { server: { hostname: 'spare' }, nodes: [{ name: 'spare-1', unattached: true }] });
    const source = gone.nodes[0]!.UUID;
    const target = spare.nodes[0]!.UUID;
    assert.equal((await node(target)).state, 'Unattached');
    const wrong = await call<ErrorBody>('POST', `/nodes/${target}/replace`, { body: { TargetNodeUUID: source }, expected: 400 });
    assert.match(wrong.error, /is Unattached, .* is Inactive/);
    assert.equal((await call<ErrorBody>('POST', `/nodes/${source}/replace`, { body: { TargetNodeUUID: randomUUID() }, expected: 404 })).code, 5);
    await call('POST', `/nodes/${source}/replace`, { body: { TargetNodeUUID: target.toUpperCase(), ReplaceWhileActive: null } });
    // It holds no copies: the replace completes at once.
    await until('target attached', async () => (await node(target)).state === 'Active');
    const detached = await node(source);
    assert.equal(detached.state, 'Inactive');
    assert.match(detached.failureInfo, new RegExp(`replaced by node ${target}`));
    const command = (await read<NodeCommandRecord>(keys.nodeCommand(source)))!;
    assert.ok(command.completedAt);
    await until('NodeReplaced', async () => (await eventNames()).some((e) => e.EventName === 'NodeReplaced'));
    assert.ok((await eventNames()).some((e) => e.EventName === 'NodeReplaceRequested'));
  });

  describe('a replace that cannot finish fails: NodeReplaceFailed with the reason, the moved copies go back, the target is Unattached again', () => {
    const GiB = 1024n ** 3n;
    let source: string;
    let peer: string;
    let volume: VolumeRecord;

    /** Replaces `source` with `target` and waits for the command to end failed. */
    async function failedReplace(target: string, beforeFailure?: () => Promise<void>, targetUnattached = true): Promise<NodeCommandRecord> {
      const before = (await eventNames()).filter((e) => e.EventName === 'NodeReplaceFailed').length;
      await call('POST', `/nodes/${source}/replace`, { body: { TargetNodeUUID: target } });
      await beforeFailure?.();
      const ended = await until('the replace ended failed', async () => {
        const c = await read<NodeCommandRecord>(keys.nodeCommand(source));
        return c?.failure ? c : undefined;
      }, 30_000);
      assert.ok(ended.failedAt);
      assert.equal(ended.completedAt, undefined);
      assert.equal(ended.failing, undefined);
      const events = await until('NodeReplaceFailed', async () => {
        const found = (await eventNames()).filter((e) => e.EventName === 'NodeReplaceFailed');
        return found.length > before && found;
      });
      assert.ok(events.some((e) => e.Description.includes(ended.failure!)), 'the event gives the reason');
      // Nothing half-done: the volume is as before the replace, the target holds nothing and is Unattached.
      const now = (await read<VolumeRecord>(keys.volume(volume.UUID)))!;
      assert.deepEqual(now.placement!.nodeList, [peer, source], 'the source is back in its place');
      assert.deepEqual((await read<ReplicaSetRecord>(keys.replicaSet(volume.UUID)))!.inSync, [peer]);
      await until('the target\'s assignment removed', async () => (await read(keys.assignment(target, volume.UUID))) === null);
      assert.equal((await read<NodeRecord>(keys.node(target)))!.unattached, targetUnattached);
      assert.match((await node(source)).failureInfo, /failed/);
      return ended;
    }

    before(async () => {
      // A replicated volume: its in-sync primary on a live node, its other copy (out of sync) on a node gone for good.
      peer = (await joinServer(client, { server: { hostname: 'peer' }, nodes: [{ name: 'peer-1' }] })).nodes[0]!.UUID;
      source = (await joinServer(client, { server: { hostname: 'lost' }, nodes: [{ name: 'lost-1' }], present: false })).nodes[0]!.UUID;
      volume = volumeRecord([peer, source], { name: 'mirrored', placement: { nodeList: [peer, source], primaryNodeUUID: peer, nsid: 900, port: 29000 } });
      const set: ReplicaSetRecord = { volumeUUID: volume.UUID, epoch: 1, primaryNodeUUID: peer, inSync: [peer], reason: 'created', announced: 'Unknown', updatedAt: new Date().toISOString() };
      // One transaction: a replica set the leader sees without its volume is an orphan it removes.
      await client
        .if(keys.volume(volume.UUID), 'Create', '==', 0)
        .then(client.put(keys.replicaSet(volume.UUID)).value(JSON.stringify(set)), client.put(keys.volume(volume.UUID)).value(JSON.stringify(volume)))
        .commit();
      await until('the volume\'s assignments', async () => (await read(keys.assignment(source, volume.UUID))) !== null);
    });

    it('no capacity on the target: fails before any copy moves', async () => {
      const small = (await joinServer(client, { server: { hostname: 'small' }, nodes: [{ name: 'small-1', unattached: true }] })).nodes[0]!;
      const ended = await failedReplace(small.UUID);
      assert.match(ended.failure!, /no capacity on target node small-1 .* for the copies of 1 volume\(s\): 1073741824 bytes needed, 0 free/);
      assert.equal((await node(small.UUID)).state, 'Unattached');
      assert.equal((await node(source)).state, 'Inactive');
    });

    it('the target goes away (Inactive past the grace): the copy moved to it goes back', async () => {
      const roomy = await joinServer(client, { server: { hostname: 'roomy' }, nodes: [{ name: 'roomy-1', unattached: true }] });
      const target = roomy.nodes[0]!;
      await putRecord(client, keys.nodePool(target.UUID), nodePoolRecord(target, { capacityBytes: String(100n * GiB), freeBytes: String(100n * GiB) }));
      const ended = await failedReplace(target.UUID, async () => {
        await until('the copy moved to the target', async () => (await read<VolumeRecord>(keys.volume(volume.UUID)))?.placement?.nodeList.includes(target.UUID));
        assert.deepEqual([(await node(source)).state, (await node(target.UUID)).state], ['Detaching', 'Attaching']);
        await markAbsent(client, roomy.server.UUID);
      });
      assert.match(ended.failure!, /target node roomy-1 .* has been Inactive for over 1 s/);
      assert.ok((await eventNames()).some((e) => e.EventName === 'VolumeReplicaReplaced' && /go back to node/.test(e.Description)));

      // The same target, present again, never gets the copy in sync: the replace times out.
      await markPresent(client, roomy.server.UUID, [target.UUID]);
      const timedOut = await failedReplace(target.UUID, async () => {
        await until('the copy moved to the target', async () => (await read<VolumeRecord>(keys.volume(volume.UUID)))?.placement?.nodeList.includes(target.UUID));
      });
      assert.match(timedOut.failure!, new RegExp(`not finished within ${REPLACE_TIMEOUT_S} s`));
      assert.equal((await node(target.UUID)).state, 'Unattached');

      // The target is attached by someone else meanwhile: it is no replace target any more.
      // (It stays attached: that was not the replace's doing.)
      const attached = await failedReplace(
        target.UUID,
        async () => {
          await until('the copy moved to the target', async () => (await read<VolumeRecord>(keys.volume(volume.UUID)))?.placement?.nodeList.includes(target.UUID));
          const record = (await read<NodeRecord>(keys.node(target.UUID)))!;
          await putRecord(client, keys.node(target.UUID), { ...record, unattached: false });
        },
        false,
      );
      assert.match(attached.failure!, /target node roomy-1 .* is no longer Unattached/);
    });
  });
});
