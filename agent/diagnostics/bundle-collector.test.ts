// What IoNice and NumOfDaysToCollectLogs really do to the agent's collection (GET /api/v2/logs,
// docs/diagnostics.md), observed on the processes and files themselves: the collector runs real
// child processes, and stand-ins put first on PATH for `uname`, `systemctl` and `journalctl`
// report the priority they actually run at (their own /proc/<pid>/stat nice value and ionice(1)'s
// answer about their own pid) and the arguments they were given; a temp directory stands for
// /var/log, its files dated with utimes. (journald's own filtering by --since is not exercised:
// this host runs no journald, and its entries cannot be back-dated; the arguments are checked, and
// that the real journalctl accepts them.)
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { which } from '../../lib/executables.js';
import { removeDir } from '../../test/helpers/processes.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { BundleCollector, type BundleOptions } from './bundle-collector.js';

const DAY_MS = 86_400_000;

/** The nice value of a process (field 19 of /proc/<pid>/stat, counted after the command name). */
function niceOf(pid: number | 'self'): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
}

describe('the agent\'s bundle collection: IoNice and NumOfDaysToCollectLogs take effect', () => {
  let dir: string;
  let bin: string;
  let logDir: string;
  let systemdRunDir: string;
  let ionice: string;
  const originalPath = process.env['PATH'];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'strata-bundle-collector-'));
    bin = join(dir, 'bin');
    logDir = join(dir, 'var-log');
    systemdRunDir = join(dir, 'run-systemd-system');
    for (const d of [bin, logDir, systemdRunDir]) mkdirSync(d);
    ionice = (await which('ionice'))!;
    assert.ok(ionice, 'ionice (util-linux) is installed');
    // Each stand-in reports the priority its own process runs at, and its arguments.
    for (const name of ['uname', 'systemctl', 'journalctl']) {
      writeFileSync(join(bin, name), `#!/bin/sh\necho "nice=$(cut -d' ' -f19 /proc/$$/stat) io=$(${ionice} -p $$)"\necho "argv=$*"\n`, { mode: 0o755 });
    }
    process.env['PATH'] = `${bin}:${originalPath ?? ''}`;
  });
  after(() => {
    process.env['PATH'] = originalPath;
    removeDir(dir);
  });

  async function collect(options: Partial<BundleOptions>): Promise<Map<string, string>> {
    const collector = new BundleCollector({
      nvmet: async () => ({ absent: 'no nvmet in this test' }),
      agentState: () => ({}),
      poolDir: join(dir, 'no-pool'),
      logDir,
      units: ['strata-agent'],
      systemdRunDir,
      logger: silentLogger(),
    });
    const entries = new Map<string, string>();
    await collector.collect(
      {
        days_of_logs: 2, skip_statistics: true, statistics_cycles: 1, statistics_interval_seconds: 1,
        capture_cpu_and_tcpdump: false, services_only: false, skip_var_log: true, io_nice: false, ...options,
      },
      { file: async (path, filePath) => void entries.set(path, readFileSync(filePath, 'utf8')) },
      new AbortController().signal,
    );
    return entries;
  }
  const reported = (entries: Map<string, string>, path: string) => {
    const text = entries.get(path);
    assert.ok(text, `${path} collected: ${[...entries.keys()].join(', ')}`);
    const [, nice, io] = /^nice=(-?\d+) io=(.*)$/m.exec(text)!;
    return { nice: Number(nice), io: io!, argv: /^argv=(.*)$/m.exec(text)![1]! };
  };

  it('IoNice: every command runs at nice 19 in the idle I/O class (as each process reports itself); without it, at the agent\'s own priority', async (t) => {
    const own = { nice: niceOf('self'), io: execFileSync(ionice, ['-p', String(process.pid)], { encoding: 'utf8' }).trim() };
    if (own.io === 'idle' || own.nice >= 19) {
      // Run under `nice -n 19` or `ionice -c3` (a developer's background run): the lowest
      // priority is this process's own, and IoNice's effect cannot be told apart from it.
      t.skip(`this test runs at the lowest priority already (nice ${own.nice}, ${own.io}): IoNice cannot be told apart`);
      return;
    }

    const niced = await collect({ io_nice: true });
    for (const path of ['system/uname.txt', 'services/strata-agent.status.txt', 'services/strata-agent.journal.log', 'services/kernel.journal.log']) {
      const { nice, io } = reported(niced, path);
      assert.deepEqual({ nice, io }, { nice: 19, io: 'idle' }, path);
    }
    assert.equal(reported(niced, 'system/uname.txt').argv, '-a', 'the command\'s own arguments, unchanged');
    assert.doesNotMatch(niced.get('NOT-COLLECTED.txt')!, /IoNice/);

    const plain = await collect({ io_nice: false });
    assert.deepEqual(
      (({ nice, io }) => ({ nice, io }))(reported(plain, 'system/uname.txt')),
      own,
      'without IoNice a command runs at the priority of the process that collects',
    );
  });

  it('NumOfDaysToCollectLogs: /var/log files changed within the days are collected, older ones are not; journald is read --since that many days back', async () => {
    const now = Date.now();
    const dated = (relative: string, ageMs: number) => {
      const path = join(logDir, relative);
      mkdirSync(join(path, '..'), { recursive: true });
      writeFileSync(path, `${relative}\n`);
      const at = new Date(now - ageMs);
      utimesSync(path, at, at);
    };
    dated('syslog', 60_000);
    dated('syslog.1', 1.5 * DAY_MS);
    dated('syslog.2', 2.5 * DAY_MS);
    dated('apt/history.log', 0.5 * DAY_MS);
    dated('apt/history.log.1', 10 * DAY_MS);
    dated('journal/system.journal', 60_000);

    const twoDays = await collect({ days_of_logs: 2, skip_var_log: false });
    const logs = (entries: Map<string, string>) => [...entries.keys()].filter((p) => p.startsWith('var-log/')).sort();
    assert.deepEqual(logs(twoDays), ['var-log/apt/history.log', 'var-log/syslog', 'var-log/syslog.1']);
    assert.equal(twoDays.get('var-log/syslog.1'), 'syslog.1\n');
    assert.deepEqual(logs(await collect({ days_of_logs: 1, skip_var_log: false })), ['var-log/apt/history.log', 'var-log/syslog']);
    assert.deepEqual(logs(await collect({ days_of_logs: 30, skip_var_log: false })), [
      'var-log/apt/history.log', 'var-log/apt/history.log.1', 'var-log/syslog', 'var-log/syslog.1', 'var-log/syslog.2',
    ], 'every file within 30 days; the journal directory is journalctl\'s');

    // journald filters by itself: the collector asks it for entries since N days ago.
    for (const days of [1, 7]) {
      const entries = await collect({ days_of_logs: days });
      for (const [path, selector] of [['services/strata-agent.journal.log', '-u strata-agent'], ['services/kernel.journal.log', '-k']] as const) {
        const { argv } = reported(entries, path);
        const since = /--since=@(\d+)/.exec(argv);
        assert.ok(since && argv.startsWith(`${selector} `), `${path}: ${argv}`);
        const back = Date.now() / 1000 - Number(since[1]);
        assert.ok(Math.abs(back - days * 86_400) < 30, `${path}: --since ${back} s back for ${days} day(s)`);
        // The real journalctl takes these arguments (a timestamp it cannot parse exits 1), here on an
        // empty journal directory (-k also asks for this boot, which an empty directory has not).
        const real = ['/usr/bin/journalctl', '/bin/journalctl'].find((p) => existsSync(p));
        if (real && selector !== '-k') execFileSync(real, [...argv.split(' '), `--directory=${dir}`], { stdio: 'ignore' });
      }
    }
  });
});
