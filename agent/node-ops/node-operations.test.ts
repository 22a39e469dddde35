// NodeOperations against a real etcd with a fake data path, pools and presence: restart with
// considerBackend runs stop, the pool's reassembly, then start, and records each step in the run
// state; a failed reassembly fails the command with the reason and the node stays stopped (its
// pool down); an agent killed in the middle of the reassembly resumes it when it starts again.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { commandDone, NodeCommandStore } from '../../lib/etcd/node-command-store.js';
import { keys } from '../../lib/etcd/keys.js';
import type { NodeCommandRecord, NodeRunStateRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { WatchedStates } from '../../test/helpers/watched-state.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { NodeOperations, type NodeDataPath, type NodePoolControl, type NodePresence } from './node-operations.js';

const NODE = '0d0d0d0d-1111-4222-8333-444444444444';

/** What the agent's parts were asked, in order. */
class Fakes {
  readonly calls: string[] = [];
  listed = [NODE];
  /** What reassemble() fails with, when set. */
  reassemblyFails: string | undefined;
  /** reassemble() waits for this before finishing (an agent killed meanwhile). */
  gate: Promise<void> | undefined;

  readonly dataPath: NodeDataPath = {
    freezeNode: async () => void this.calls.push('freeze'),
    handOverNode: async () => (this.calls.push('handOver'), []),
    finishHandOver: async () => void this.calls.push('finishHandOver'),
    holdNode: async () => (this.calls.push('hold'), []),
    holdNodeAtStart: () => void this.calls.push('holdAtStart'),
    releaseNode: async () => void this.calls.push('release'),
  };
  readonly pools: NodePoolControl = {
    holdDownAtStart: (_node, reason) => void this.calls.push(`poolDownAtStart: ${reason}`),
    reassemble: async () => {
      this.calls.push('reassemble');
      await this.gate;
      if (this.reassemblyFails) throw new Error(this.reassemblyFails);
      return { steps: ['unmounted /p', 'stopped /dev/md127', 'assembled /dev/md127 from /dev/nvme0n1', 'mounted /dev/md127 on /p'] };
    },
    bringUp: async () => void this.calls.push('bringUp'),
  };
  readonly presence: NodePresence = {
    setListedNodes: async (nodes) => {
      this.listed = [...nodes];
    },
    listedNodes: () => this.listed,
  };
}

describe('node operations: restart with considerBackend', { timeout: 60_000 }, () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  const states = new WatchedStates();
  let store: NodeCommandStore;
  let running: NodeOperations[] = [];

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    store = new NodeCommandStore(client, states.of(client));
  });
  /** Each test's agents stop at its end (they all watch the one node's command). */
  async function stopAgents(): Promise<void> {
    for (const ops of running) await ops.stop();
    running = [];
  }
  after(async () => {
    await stopAgents();
    await states.stop();
    client?.close();
    await etcd?.stop();
  });

  async function give(considerBackend = true): Promise<NodeCommandRecord> {
    const command: NodeCommandRecord = { nodeUUID: NODE, id: randomUUID(), kind: 'restart', desired: 'Running', force: true, considerBackend, requestedAt: new Date().toISOString() };
    await client.put(keys.nodeCommand(NODE)).value(JSON.stringify(command));
    return command;
  }
  async function agent(fakes: Fakes): Promise<NodeOperations> {
    const ops = new NodeOperations({ store, nodeUUIDs: [NODE], dataPath: fakes.dataPath, pools: fakes.pools, presence: fakes.presence, logger: silentLogger() });
    running.push(ops);
    await ops.load();
    ops.start();
    return ops;
  }
  async function runState(until: (r: NodeRunStateRecord) => boolean): Promise<NodeRunStateRecord> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const r = (await store.runState(NODE))?.record;
      if (r && until(r)) return r;
      assert.ok(Date.now() < deadline, `run state: ${JSON.stringify(r)}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it('stops, reassembles the pool, starts; the run state says so and the command is done', async () => {
    const fakes = new Fakes();
    await agent(fakes);
    const command = await give();
    const run = await runState((r) => r.commandId === command.id && r.state === 'Running');
    assert.deepEqual(fakes.calls, ['freeze', 'handOver', 'finishHandOver', 'hold', 'reassemble', 'bringUp', 'release']);
    assert.equal(run.reassembled, true);
    assert.equal(run.stopDone, true);
    assert.equal(run.failure, undefined);
    assert.match(run.detail, /storage pool reassembled/);
    assert.ok(commandDone(command, run));
    assert.deepEqual(fakes.listed, [NODE], 'listed in presence again');
    await stopAgents();
  });

  it('a failed reassembly fails the command with the reason: the node stays stopped, its pool down, also after an agent restart; a start serves it again', async () => {
    const fakes = new Fakes();
    fakes.reassemblyFails = 'unmounting /p failed: umount: /p: target is busy.';
    const first = await agent(fakes);
    const command = await give();
    const run = await runState((r) => r.commandId === command.id && r.failure !== undefined);
    assert.equal(run.state, 'Stopped');
    assert.equal(run.failure, 'reassembling the storage pool failed: unmounting /p failed: umount: /p: target is busy.');
    assert.ok(commandDone(command, run), 'over: a new command may be given');
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(fakes.calls, ['freeze', 'handOver', 'finishHandOver', 'hold', 'reassemble'], 'not retried, never started');
    assert.deepEqual(fakes.listed, [], 'out of presence');

    await first.stop();
    const restarted = new Fakes();
    await agent(restarted);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(restarted.calls.slice(0, 2), ['holdAtStart', `poolDownAtStart: ${run.failure}`]);
    assert.ok(!restarted.calls.includes('reassemble') && !restarted.calls.includes('release'), restarted.calls.join(', '));

    const start: NodeCommandRecord = { nodeUUID: NODE, id: randomUUID(), kind: 'start', desired: 'Running', force: false, considerBackend: false, requestedAt: new Date().toISOString() };
    await client.put(keys.nodeCommand(NODE)).value(JSON.stringify(start));
    await runState((r) => r.commandId === start.id && r.state === 'Running');
    assert.deepEqual(restarted.calls.slice(-2), ['bringUp', 'release']);
    await stopAgents();
  });

  it('an agent killed in the middle of the reassembly resumes it when it starts again, then starts the node', async () => {
    const fakes = new Fakes();
    fakes.gate = new Promise(() => undefined); // never finishes
    const first = await agent(fakes);
    const command = await give();
    await runState((r) => r.commandId === command.id && r.stopDone === true && /reassembling the storage pool/.test(r.detail));
    // Killed: this agent does nothing more (its reassembly never finishes).
    void first.stop();
    running.splice(running.indexOf(first), 1);

    const restarted = new Fakes();
    await agent(restarted);
    const run = await runState((r) => r.commandId === command.id && r.state === 'Running');
    assert.deepEqual(restarted.calls, ['holdAtStart', `poolDownAtStart: being reassembled (restart ${command.id}, resumed after an agent restart)`, 'reassemble', 'bringUp', 'release'], 'its stop was done: not again');
    assert.equal(run.reassembled, true);
    await stopAgents();
  });

  it('a restart without considerBackend does not touch the pool', async () => {
    const fakes = new Fakes();
    await agent(fakes);
    const command = await give(false);
    const run = await runState((r) => r.commandId === command.id && r.state === 'Running');
    assert.ok(!fakes.calls.includes('reassemble'));
    assert.equal(run.reassembled, undefined);
    await stopAgents();
  });
});
