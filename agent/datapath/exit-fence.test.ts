// The exit fence (exit-fence.ts, agent/exit-fence.ts): the ports datapath.json lists turn
// ANA-inaccessible in every group, nothing else is touched, and whatever is missing (the state
// file, configfs, a port) is only logged.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, describe, it } from 'node:test';
import { packageRoot } from '../../lib/paths.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { runExitFence } from './exit-fence.js';
import { DataPathState } from './reconcile/datapath-state.js';

const work = mkdtempSync(join(tmpdir(), 'strata-exit-fence-'));
after(() => rmSync(work, { recursive: true, force: true }));

let fixtures = 0;
/** A state dir and an nvmet tree laid out as configfs shows them (plain files here). */
function fixture(ports: Record<number, Record<number, string>>, replicatedPorts?: number[]): { stateDir: string; nvmetRoot: string; anaState: (port: number, group: number) => string } {
  const dir = join(work, String((fixtures += 1)));
  const stateDir = join(dir, 'state');
  const nvmetRoot = join(dir, 'nvmet');
  mkdirSync(stateDir, { recursive: true });
  for (const [port, groups] of Object.entries(ports)) {
    for (const sub of ['subsystems', 'referrals']) mkdirSync(join(nvmetRoot, 'ports', port, sub), { recursive: true });
    writeFileSync(join(nvmetRoot, 'ports', port, 'addr_trtype'), 'tcp\n');
    for (const [group, state] of Object.entries(groups)) {
      mkdirSync(join(nvmetRoot, 'ports', port, 'ana_groups', group), { recursive: true });
      writeFileSync(join(nvmetRoot, 'ports', port, 'ana_groups', group, 'ana_state'), `${state}\n`);
    }
  }
  if (replicatedPorts) {
    const file = { ...DataPathState.empty(), replicatedPorts };
    writeFileSync(join(stateDir, 'datapath.json'), JSON.stringify(file));
  }
  const anaState = (port: number, group: number) => readFileSync(join(nvmetRoot, 'ports', String(port), 'ana_groups', String(group), 'ana_state'), 'utf8').trim();
  return { stateDir, nvmetRoot, anaState };
}

describe('exit fence', () => {
  it('makes every ANA group of each listed port inaccessible and leaves unlisted ports alone; again, it changes nothing', async () => {
    const f = fixture({ 20001: { 1: 'optimized' }, 20002: { 1: 'optimized' }, 20003: { 1: 'optimized', 2: 'non-optimized' }, 20004: { 1: 'inaccessible' } }, [20001, 20003, 20004, 20009]);
    const result = await runExitFence({ stateDir: f.stateDir, nvmetRoot: f.nvmetRoot, logger: silentLogger() });
    assert.deepEqual(result, { listed: [20001, 20003, 20004, 20009], fenced: [20001, 20003, 20004], absent: [20009], failed: [] });
    assert.equal(f.anaState(20001, 1), 'inaccessible');
    assert.equal(f.anaState(20003, 1), 'inaccessible');
    assert.equal(f.anaState(20003, 2), 'inaccessible');
    assert.equal(f.anaState(20004, 1), 'inaccessible');
    assert.equal(f.anaState(20002, 1), 'optimized', 'a port not listed (a single copy\'s) keeps serving');
    const again = await runExitFence({ stateDir: f.stateDir, nvmetRoot: f.nvmetRoot, logger: silentLogger() });
    assert.deepEqual(again, result);
    assert.equal(f.anaState(20002, 1), 'optimized');
  });

  it('a state file written before replicatedPorts existed, no state file, a corrupt one, no configfs: nothing fenced, nothing thrown', async () => {
    const old = fixture({ 20001: { 1: 'optimized' } });
    const { replicatedPorts: _none, ...before } = DataPathState.empty();
    writeFileSync(join(old.stateDir, 'datapath.json'), JSON.stringify(before));
    assert.deepEqual(await runExitFence({ stateDir: old.stateDir, nvmetRoot: old.nvmetRoot, logger: silentLogger() }), { listed: [], fenced: [], absent: [], failed: [] });
    assert.equal(old.anaState(20001, 1), 'optimized');

    const none = fixture({ 20001: { 1: 'optimized' } });
    assert.deepEqual(await runExitFence({ stateDir: none.stateDir, nvmetRoot: none.nvmetRoot, logger: silentLogger() }), { listed: [], fenced: [], absent: [], failed: [] });
    assert.equal(none.anaState(20001, 1), 'optimized');

    const corrupt = fixture({ 20001: { 1: 'optimized' } });
    writeFileSync(join(corrupt.stateDir, 'datapath.json'), '{"version": 1, "replicatedPorts": "20001"}');
    assert.deepEqual(await runExitFence({ stateDir: corrupt.stateDir, nvmetRoot: corrupt.nvmetRoot, logger: silentLogger() }), { listed: [], fenced: [], absent: [], failed: [] });
    assert.equal(corrupt.anaState(20001, 1), 'optimized');

    const noConfigfs = fixture({}, [20001]);
    assert.deepEqual(await runExitFence({ stateDir: noConfigfs.stateDir, nvmetRoot: join(noConfigfs.nvmetRoot, 'absent'), logger: silentLogger() }), { listed: [20001], fenced: [], absent: [20001], failed: [] });
  });

  it('a group that cannot be written is reported, and the port\'s other groups and the other ports are still fenced', async () => {
    const f = fixture({ 20001: { 1: 'optimized', 2: 'optimized' }, 20002: { 1: 'optimized' } }, [20001, 20002]);
    // A directory where the attribute should be: the write fails as a refused configfs write would.
    rmSync(join(f.nvmetRoot, 'ports', '20001', 'ana_groups', '1', 'ana_state'));
    mkdirSync(join(f.nvmetRoot, 'ports', '20001', 'ana_groups', '1', 'ana_state'));
    const result = await runExitFence({ stateDir: f.stateDir, nvmetRoot: f.nvmetRoot, logger: silentLogger() });
    assert.deepEqual(result.fenced, [20002]);
    assert.deepEqual(result.failed.map((x) => x.port), [20001]);
    assert.match(result.failed[0]!.error, /^ana_groups\/1: /);
    assert.equal(f.anaState(20001, 2), 'inaccessible');
    assert.equal(f.anaState(20002, 1), 'inaccessible');
  });

  it('the entry point (ExecStopPost) takes the agent\'s flags, logs one JSON line and exits 0, also on a configuration the agent would refuse', async () => {
    const run = promisify(execFile);
    const entry = join(packageRoot, 'dist', 'agent', 'exit-fence.js');
    // Port 70000 cannot exist in a kernel's nvmet (port ids are 16-bit): nothing real is touched.
    const f = fixture({}, [70000]);
    const ok = await run(process.execPath, [entry, '--state-dir', f.stateDir, '--log-level', 'info']);
    const lines = ok.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(lines.length, 1, ok.stdout);
    assert.deepEqual([lines[0]!['event'], lines[0]!['listed'], lines[0]!['absent'], lines[0]!['fenced']], ['agent.exitFence', [70000], [70000], []]);
    // The agent's cross-setting checks do not stop it (the state dir is known).
    const crossed = await run(process.execPath, [entry, '--state-dir', f.stateDir, '--volume-port-min', '30000', '--volume-port-max', '20000']);
    assert.deepEqual((JSON.parse(crossed.stdout.trim()) as { absent: number[] }).absent, [70000]);
    // An invalid setting: the default state dir's ports (none on a machine without an agent).
    if (existsSync('/var/lib/strata/agent/datapath.json')) return;
    const bad = await run(process.execPath, [entry, '--state-dir', f.stateDir, '--log-level', 'loud']);
    const badLines = bad.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.match(String(badLines[0]!['msg']), /configuration is invalid/);
    assert.deepEqual([badLines.at(-1)!['event'], badLines.at(-1)!['stateDir']], ['agent.exitFence', '/var/lib/strata/agent']);
  });
});
