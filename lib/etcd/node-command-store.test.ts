// The node command store as the agent uses it (agent/node-ops/node-operations.ts): a node's
// command and run state read back with their revisions, the agent's run state written, the
// commands of its nodes read from the watched state at one revision and followed from it. Run
// twice: on a real etcd and on the in-memory fake (test/fakes/memory-etcd.ts). What the agent
// does with them is agent/node-ops/node-operations.test.ts's (on etcd).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { NodeCommandRecord, NodeRunStateRecord } from '../records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { startEtcdWithClient } from '../../test/helpers/etcd.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { keys } from './keys.js';
import { kvOf, type KvClient } from './kv.js';
import { NodeCommandStore } from './node-command-store.js';
import { PrefixMirror } from './prefix-mirror.js';

/** Where the cases run: the store client, a raw (not JSON) put, and how to stop it. */
interface Backend {
  readonly client: KvClient;
  putRaw(key: string, value: string): Promise<void>;
  close(): Promise<void>;
}

const command = (nodeUUID: string, desired: NodeCommandRecord['desired'] = 'Stopped'): NodeCommandRecord => ({
  nodeUUID, id: randomUUID(), kind: desired === 'Stopped' ? 'stop' : 'start', desired, force: false, considerBackend: false, requestedAt: new Date().toISOString(),
});

function nodeCommandCases(name: string, open: () => Promise<Backend>): void {
  describe(`node command store on ${name}`, () => {
    let backend: Backend;
    let state: PrefixMirror;
    let store: NodeCommandStore;
    const give = async (record: NodeCommandRecord) => kvOf(backend.client).commit({ guards: [], writes: [{ put: keys.nodeCommand(record.nodeUUID), value: record }] });
    before(async () => {
      backend = await open();
      // As the agent's watched state mirrors them (agent/agent-state-store.ts).
      state = new PrefixMirror(backend.client, [keys.nodeCommandsPrefix()], silentLogger(), { everyRevision: true, keepCorrupt: true });
      store = new NodeCommandStore(backend.client, state);
    });
    after(async () => {
      await state.stop();
      await backend.close();
    });

    test('a command and the agent\'s run state read back with their revisions; none is null', async () => {
      const node = randomUUID();
      assert.equal(await store.command(node), null);
      assert.equal(await store.runState(node), null);
      const given = command(node);
      const { revision } = await give(given);
      assert.deepEqual(await store.command(node), { key: keys.nodeCommand(node), record: given, revision });
      const run: NodeRunStateRecord = { nodeUUID: node, state: 'Stopped', commandId: given.id, detail: '', updatedAt: new Date().toISOString() };
      await store.putRunState(run);
      assert.deepEqual((await store.runState(node))?.record, run);
      await store.putRunState({ ...run, state: 'Running' });
      assert.equal((await store.runState(node))?.record.state, 'Running', 'the agent\'s answer overwritten');
    });

    test('commandsOf reads its nodes\' commands (a corrupt one is none) and run states at one revision; watchCommands reports what changed since, then each change', async () => {
      const [a, b, corrupt, other] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
      const [forA, forB] = [command(a), command(b)];
      await give(forA);
      await give(forB);
      const written = await give(command(other));
      await backend.putRaw(keys.nodeCommand(corrupt), 'not json');
      const run: NodeRunStateRecord = { nodeUUID: a, state: 'Stopping', commandId: forA.id, detail: '', updatedAt: new Date().toISOString() };
      await store.putRunState(run);

      const read = await store.commandsOf([a, b, corrupt]);
      assert.deepEqual(Object.fromEntries(read.commands), { [a]: forA, [b]: forB }, 'another node\'s command is not read; a corrupt one is none');
      assert.deepEqual(Object.fromEntries(read.runStates), { [a]: run });
      assert.ok(BigInt(read.revision) >= BigInt(written.revision), 'read at a revision that holds what was written before');

      // Written after the read, before the watch: reported at once, as each later change is.
      const again = command(a, 'Running');
      await give(again);
      const seen: [string, NodeCommandRecord | undefined][] = [];
      const watch = store.watchCommands(read.revision, (node, record) => seen.push([node, record]), () => assert.fail('no error expected'));
      try {
        await waitUntil(() => seen.some(([node, record]) => node === a && record?.id === again.id), 'the command given after the read');
        await kvOf(backend.client).commit({ guards: [], writes: [{ delete: keys.nodeCommand(b) }] });
        await waitUntil(() => seen.some(([node, record]) => node === b && record === undefined), 'the deleted command');
        assert.ok(!seen.some(([, record]) => record?.id === forA.id || record?.id === forB.id), 'what the read saw is not reported again');
      } finally {
        await watch.cancel();
      }
    });
  });
}

nodeCommandCases('etcd', async () => {
  const { client, close } = await startEtcdWithClient();
  return { client, putRaw: async (key, value) => void (await client.put(key).value(value)), close };
});

nodeCommandCases('the in-memory etcd', async () => {
  const memory = new MemoryEtcd();
  return { client: memory, putRaw: async (key, value) => void memory.putRaw(key, value), close: async () => {} };
});
