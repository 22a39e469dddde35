// strata-ublk, the QoS stage's ublk server (native/ublk/, native/README.md), on the host: its
// token buckets against a simulated clock, and what its command line refuses on any kernel. The
// device itself needs a kernel with ublk: the lab guests check it (native/README.md).
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { packageRoot } from '../lib/paths.js';

const run = promisify(execFile);
const server = join(packageRoot, 'native', 'build', 'strata-ublk');
const haveCompiler = ['/usr/bin/cc', '/usr/bin/make'].every((path) => existsSync(path));

/** Exit status, stdout and stderr of the server run with `args`. */
async function serverRun(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(server, args, { timeout: 10_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof failed.code === 'number' ? failed.code : -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
}

it('the token buckets hold each rate, a live change and a stall (make test: native/ublk/throttle-test.c)', { skip: !haveCompiler && 'no cc/make' }, async () => {
  const out = mkdtempSync(join(tmpdir(), 'strata-throttle-'));
  try {
    const { stdout } = await run('make', ['--no-print-directory', '-s', '-C', join(packageRoot, 'native', 'ublk'), 'test', `OUT=${out}`], { timeout: 120_000 });
    assert.doesNotMatch(stdout, /^FAIL/m, stdout);
    assert.match(stdout, /^ok 300 IOPS for 10 s/m);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

const built = existsSync(server);

it('refuses a bad command line with status 2 and a bad limits file or backing with 1, before touching ublk', { skip: !built && 'strata-ublk not built (liburing-dev missing)' }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'strata-ublk-'));
  try {
    const backing = join(dir, 'backing');
    writeFileSync(backing, Buffer.alloc(1 << 20));
    assert.equal((await serverRun([])).code, 2);
    assert.equal((await serverRun(['serve'])).code, 2);
    assert.equal((await serverRun(['serve', backing, '--read-iops', '-1'])).code, 2);
    assert.equal((await serverRun(['serve', backing, '--read-iops', '1.5'])).code, 2);
    assert.equal((await serverRun(['serve', backing, '--limits', join(dir, 'limits'), '--read-iops', '1'])).code, 2);
    assert.equal((await serverRun(['delete', 'x'])).code, 2);

    writeFileSync(join(dir, 'limits'), 'read-iops 300\nwrite-kbps 5\n');
    const badFile = await serverRun(['serve', backing, '--limits', join(dir, 'limits')]);
    assert.equal(badFile.code, 1);
    assert.match(badFile.stderr, /line 2: expected/);

    const missing = await serverRun(['serve', join(dir, 'absent'), '--read-iops', '1']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /backing .*absent: No such file or directory/);

    writeFileSync(join(dir, 'tiny'), Buffer.alloc(100));
    assert.match((await serverRun(['serve', join(dir, 'tiny')])).stderr, /smaller than one 4096-byte block/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('says plainly when the kernel has no ublk (status 69), and is fine where it has', { skip: !built && 'strata-ublk not built (liburing-dev missing)' }, async () => {
  const check = await serverRun(['check']);
  if (existsSync('/dev/ublk-control')) {
    assert.equal(check.code, 0, check.stderr);
  } else {
    assert.equal(check.code, 69);
    assert.match(check.stderr, /ublk is missing: \/dev\/ublk-control/);
  }
});
