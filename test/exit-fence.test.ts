// The exit fence (systemd/strata-agent-exit-fence, strata-agent.service's ExecStopPost): every ANA
// group of each port the agent listed in <stateDir>/exit-fence-ports turns inaccessible, nothing
// else is touched, whatever is missing (the list, configfs, a port) is only reported, and it
// always exits 0. Run with sh on a tree laid out as configfs shows it (plain files here).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, describe, it } from 'node:test';
import { DataPathState } from '../agent/datapath/reconcile/datapath-state.js';
import { packageRoot } from '../lib/paths.js';

const SCRIPT = join(packageRoot, 'systemd', 'strata-agent-exit-fence');
const work = mkdtempSync(join(tmpdir(), 'strata-exit-fence-'));
after(() => rmSync(work, { recursive: true, force: true }));

let fixtures = 0;
function fixture(ports: Record<number, Record<number, string>>): { stateDir: string; nvmetRoot: string; anaState: (port: number, group: number) => string } {
  const dir = join(work, String((fixtures += 1)));
  const stateDir = join(dir, 'state');
  const nvmetRoot = join(dir, 'nvmet');
  mkdirSync(stateDir, { recursive: true });
  for (const [port, groups] of Object.entries(ports)) {
    mkdirSync(join(nvmetRoot, 'ports', port, 'subsystems'), { recursive: true });
    for (const [group, state] of Object.entries(groups)) {
      mkdirSync(join(nvmetRoot, 'ports', port, 'ana_groups', group), { recursive: true });
      writeFileSync(join(nvmetRoot, 'ports', port, 'ana_groups', group, 'ana_state'), `${state}\n`);
    }
  }
  const anaState = (port: number, group: number) => readFileSync(join(nvmetRoot, 'ports', String(port), 'ana_groups', String(group), 'ana_state'), 'utf8').trim();
  return { stateDir, nvmetRoot, anaState };
}

/** Runs the fence; its one JSON line, parsed. */
async function fence(stateDir: string, nvmetRoot: string): Promise<{ listed: number[]; fenced: number[]; absent: number[]; failed: number[]; event: string }> {
  const { stdout } = await promisify(execFile)('sh', [SCRIPT, stateDir], { env: { ...process.env, NVMET_ROOT: nvmetRoot } });
  const lines = stdout.trim().split('\n');
  assert.equal(lines.length, 1, stdout);
  return JSON.parse(lines[0]!);
}

describe('exit fence', () => {
  it('makes every ANA group of each port the agent listed inaccessible, leaves the others alone, and changes nothing the second time', async () => {
    const f = fixture({ 20001: { 1: 'optimized' }, 20002: { 1: 'optimized' }, 20003: { 1: 'optimized', 2: 'non-optimized' }, 20004: { 1: 'inaccessible' } });
    // Listed the way the agent lists them (datapath-state.ts), before the fence runs.
    const state = await DataPathState.load(f.stateDir);
    state.recordReplicatedPorts([20001, 20003, 20004, 20009]);
    for (let round = 0; round < 2; round += 1) {
      const line = await fence(f.stateDir, f.nvmetRoot);
      assert.deepEqual([line.event, line.listed, line.fenced, line.absent, line.failed], ['agent.exitFence', [20001, 20003, 20004, 20009], [20001, 20003, 20004], [20009], []]);
      assert.deepEqual([f.anaState(20001, 1), f.anaState(20003, 1), f.anaState(20003, 2), f.anaState(20004, 1)], ['inaccessible', 'inaccessible', 'inaccessible', 'inaccessible']);
      assert.equal(f.anaState(20002, 1), 'optimized', 'an unlisted port (a single copy) keeps serving');
    }
  });

  it('fences nothing and exits 0 without a list, without configfs, and skips lines that are not ports', async () => {
    const f = fixture({ 20001: { 1: 'optimized' } });
    assert.deepEqual((await fence(f.stateDir, f.nvmetRoot)).listed, [], 'no list: nothing');
    assert.deepEqual((await fence(join(work, 'no-such-dir'), f.nvmetRoot)).listed, []);
    writeFileSync(join(f.stateDir, 'exit-fence-ports'), '20001\n$(touch /tmp/x)\n-3\n\n');
    const line = await fence(f.stateDir, join(work, 'no-configfs'));
    assert.deepEqual([line.listed, line.fenced, line.absent], [[20001], [], [20001]]);
    assert.equal(f.anaState(20001, 1), 'optimized');
    assert.deepEqual((await fence(f.stateDir, f.nvmetRoot)).fenced, [20001]);
    assert.equal(f.anaState(20001, 1), 'inaccessible');
  });
});
