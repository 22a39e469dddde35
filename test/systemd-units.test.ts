// The unit files: the directives the daemons rely on, and systemd's own verdict when available.
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../lib/paths.js';

const units = ['strata-control-plane.service', 'strata-agent.service'];

function directives(unit: string): Map<string, string[]> {
  const result = new Map<string, string[]>();
  for (const line of readFileSync(join(packageRoot, 'systemd', unit), 'utf8').split('\n')) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (match) result.set(match[1]!, [...(result.get(match[1]!) ?? []), match[2]!]);
  }
  return result;
}

it('both units notify readiness, restart on failure, log to the journal and use the watchdog', () => {
  for (const unit of units) {
    const d = directives(unit);
    assert.deepEqual(d.get('Type'), ['notify'], unit);
    assert.deepEqual(d.get('Restart'), ['on-failure'], unit);
    assert.ok(d.get('WatchdogSec'), `${unit} sets WatchdogSec`);
    assert.deepEqual(d.get('StandardOutput'), ['journal'], unit);
    assert.ok(d.get('ExecStart')?.[0]?.includes(`dist/${unit.replace('strata-', '').replace('.service', '')}/main.js`), `${unit} runs the right daemon`);
  }
  const agent = directives('strata-agent.service');
  // The exit fence runs after the agent however it ended: the script in the installed tree, on the
  // state dir systemd gives the agent.
  const stopPost = agent.get('ExecStopPost') ?? [];
  assert.equal(stopPost.length, 1, 'the agent unit runs one ExecStopPost');
  // Through /bin/sh: systemd-analyze verify wants the command to exist, and a copy of the tree
  // that lost the executable bit still fences.
  const [shell, script, ...stopPostArgs] = stopPost[0]!.split(/\s+/);
  assert.equal(shell, '/bin/sh');
  assert.equal(script, '/opt/strata/systemd/strata-agent-exit-fence');
  assert.ok(existsSync(join(packageRoot, script!.replace('/opt/strata/', ''))), `${script} is in the tree`);
  assert.deepEqual(stopPostArgs, [`/var/lib/${agent.get('StateDirectory')?.[0]}`], 'the exit fence reads the agent\'s state dir');
  assert.ok(agent.get('ReadWritePaths')?.join(' ').includes('/sys/kernel/config'), 'the agent may write configfs');
  assert.ok(!agent.has('PrivateDevices') || agent.get('PrivateDevices')?.[0] === 'no', 'the agent sees block devices');
});

it('systemd-analyze verify accepts both units', (t) => {
  if (!existsSync('/usr/bin/systemd-analyze')) {
    t.skip('systemd-analyze is not installed');
    return;
  }
  // verify resolves ExecStart binaries; /usr/bin/node exists on every machine that runs this.
  execFileSync('/usr/bin/systemd-analyze', ['verify', ...units.map((u) => join(packageRoot, 'systemd', u))], { stdio: 'pipe' });
});
