#!/usr/bin/env node
// Runs the compiled tests with node's built-in test runner, in two phases:
//   1. host tests (unit + integration: real etcd, real daemons), two files at a time;
//   2. end-to-end tests (dist/test/e2e: QEMU guests booting Debian's kernel), one at a time,
//      only after the host tests passed — guests must not compete with the host tests: every
//      suite on Debian 13's kernel (6.12, the lab's default), then the core data-path, discovery
//      and replication suites, and QoS's NotEnforced report, again on Debian 12's 6.1 (STRATA_E2E_KERNEL_SUITE=bookworm); the suite
//      names say which kernel. Suites of what 6.1 cannot do (nvme-tcp-tls: no NVMe/TCP TLS) run on
//      6.12 only and skip themselves when STRATA_E2E_KERNEL_SUITE=bookworm.
//   node test/run.mjs          both phases
//   node test/run.mjs --fast   phase 1 only
// Ends with one "N passed, N failed" line over both phases.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(fileURLToPath(new URL('.', import.meta.url)), '..');
const fast = process.argv.includes('--fast');

function* testFiles(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== 'node_modules') yield* testFiles(path);
    else if (entry.name.endsWith('.test.js')) yield path;
  }
}
const all = [...testFiles(join(root, 'dist'))].map((f) => relative(root, f)).sort();
const isE2e = (f) => f.startsWith(join('dist', 'test', 'e2e'));
const host = all.filter((f) => !isE2e(f));
const e2e = all.filter(isE2e);
if (host.length === 0) {
  console.error('no test files found under dist/: run `npm run build` first');
  process.exit(1);
}

/**
 * The e2e suites that run on Debian 12's 6.1 as well: the core data path; discovery, with the
 * connected hosts' NQNs (6.1 shows the target no controller at all); and replication, whose block
 * stack differs between the two kernels (device-mapper's flakey prints its table back
 * differently; the host keeps its LBA size per path on 6.1, per namespace on 6.12).
 */
const ON_BOTH_KERNELS = ['datapath', 'discovery', 'replication', 'qos'].map((suite) => join('dist', 'test', 'e2e', `${suite}.e2e.test.js`));

/** Runs one phase, echoing its output; returns its exit code and pass/fail counts. */
function phase(files, concurrency, env = {}) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--test', `--test-concurrency=${concurrency}`, '--test-reporter=spec', ...files], {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let tail = '';
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      tail = (tail + chunk.toString()).slice(-4000);
    });
    child.on('exit', (code) => {
      const count = (name) => Number(new RegExp(`ℹ ${name} (\\d+)`).exec(tail)?.[1] ?? 0);
      resolve({ code: code ?? 1, passed: count('pass'), failed: count('fail') });
    });
  });
}

const results = [await phase(host, 2)];
if (!fast && e2e.length > 0 && results[0].code === 0) {
  const suite = process.env['STRATA_E2E_KERNEL_SUITE'] || 'trixie';
  console.log(`\n--- end-to-end tests (QEMU guests, Debian ${suite}'s kernel) ---\n`);
  results.push(await phase(e2e, 1, { STRATA_E2E_KERNEL_SUITE: suite }));
  const again = e2e.filter((f) => ON_BOTH_KERNELS.includes(f));
  if (again.length > 0 && suite !== 'bookworm') {
    console.log('\n--- end-to-end tests on Debian 12\'s kernel 6.1 (the core data path, discovery and replication again) ---\n');
    results.push(await phase(again, 1, { STRATA_E2E_KERNEL_SUITE: 'bookworm' }));
  }
}
const passed = results.reduce((n, r) => n + r.passed, 0);
const failed = results.reduce((n, r) => n + r.failed, 0);
console.log(`\n${passed} passed, ${failed} failed`);
process.exit(results.every((r) => r.code === 0) ? 0 : 1);
