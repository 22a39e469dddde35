// <stateDir>/datapath.json: a file written before replicatedPorts existed loads, the ports are
// written at once when one is new (to exit-fence-ports first, the exit fence's list), and the
// exit fence's read-only look creates nothing.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { DataPathState } from './datapath-state.js';

const work = mkdtempSync(join(tmpdir(), 'strata-datapath-state-'));
after(() => rmSync(work, { recursive: true, force: true }));

it('loads a file without replicatedPorts (version 1 as before) and keeps what it had', async () => {
  const dir = join(work, 'old');
  mkdirSync(dir);
  writeFileSync(join(dir, 'datapath.json'), JSON.stringify({ version: 1, ownedHosts: ['nqn.h1'], pendingRelink: [], pendingRevalidate: ['nqn.s1'], rollbacksDone: { v: '2:s' } }));
  const state = await DataPathState.load(dir);
  assert.deepEqual([...state.replicatedPorts], []);
  assert.deepEqual([[...state.ownedHosts], [...state.pendingRevalidate], [...state.rollbacksDone]], [['nqn.h1'], ['nqn.s1'], [['v', '2:s']]]);
  assert.deepEqual(await DataPathState.readReplicatedPorts(dir), []);
});

it('records new replicated ports at once (sorted, version 1), saves nothing when none is new, and reads them back', async () => {
  const dir = join(work, 'new');
  const state = await DataPathState.load(dir);
  assert.equal(state.recordReplicatedPorts([20007, 20003]), true);
  const file = JSON.parse(readFileSync(join(dir, 'datapath.json'), 'utf8')) as { version: number; replicatedPorts: number[] };
  assert.deepEqual([file.version, file.replicatedPorts], [1, [20003, 20007]]);
  rmSync(join(dir, 'datapath.json'));
  assert.equal(state.recordReplicatedPorts([20003]), false);
  assert.equal(existsSync(join(dir, 'datapath.json')), false, 'nothing new: not written');
  state.save();
  assert.deepEqual(await DataPathState.readReplicatedPorts(dir), [20003, 20007]);
  assert.deepEqual([...(await DataPathState.load(dir)).replicatedPorts], [20003, 20007]);
});

it('reads no ports from a state dir that does not exist, without creating it; a corrupt file throws', async () => {
  const missing = join(work, 'missing');
  assert.deepEqual(await DataPathState.readReplicatedPorts(missing), []);
  assert.equal(existsSync(missing), false);
  const corrupt = join(work, 'corrupt');
  mkdirSync(corrupt);
  writeFileSync(join(corrupt, 'datapath.json'), JSON.stringify({ ...DataPathState.empty(), replicatedPorts: [-1] }));
  await assert.rejects(DataPathState.load(corrupt), /corrupt data path state/);
});

it('writes the exit fence\'s list on load from a datapath.json that had ports but no list', async () => {
  const dir = join(work, 'upgraded');
  mkdirSync(dir);
  writeFileSync(join(dir, 'datapath.json'), JSON.stringify({ ...DataPathState.empty(), replicatedPorts: [20005, 20001] }));
  assert.equal(existsSync(join(dir, 'exit-fence-ports')), false);
  await DataPathState.load(dir);
  assert.equal(readFileSync(join(dir, 'exit-fence-ports'), 'utf8'), '20001\n20005\n');
});
