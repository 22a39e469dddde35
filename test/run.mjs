#!/usr/bin/env node
// Runs the compiled tests with node's built-in test runner, in two phases:
//   1. host tests (unit + integration: real etcd, real daemons), two files at a time;
//   2. end-to-end tests (dist/test/e2e: QEMU guests booting Debian's kernel), one at a time,
//      only after the host tests passed — guests must not compete with the host tests: every
//      suite on Debian 13's kernel (6.12, the lab's default), then the core data-path, discovery
//      and replication suites, and QoS's refusal where there is no ublk, again on Debian 12's 6.1 (STRATA_E2E_KERNEL_SUITE=bookworm); the suite
//      names say which kernel. Suites of what 6.1 cannot do (nvme-tcp-tls: no NVMe/TCP TLS) run on
//      6.12 only and skip themselves when STRATA_E2E_KERNEL_SUITE=bookworm.
//      A suite that failed because a guest's kernel died of an emulation fault (a double fault
//      under TCG, docs/e2e.md "Stalls") runs once more, said loudly; nothing else is retried.
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

/**
 * A guest kernel's death of corrupt emulated CPU state: "traps: PANIC: double fault" in a plain
 * allocation with an impossible EFLAGS, seen under TCG on 6.12 (docs/e2e.md, "Stalls"). The suites
 * name such a crash first in a failure (Guest.kernelCrash()); a suite that failed with one runs
 * once more, said loudly here and again in the summary. Any other crash fails the run as before.
 */
const EMULATION_FAULT = /guest [\w-]+: \[[\s\d.]+\] Oops: double fault/;

/**
 * Runs one phase, echoing its output; returns its exit code, pass/fail counts (the reporter's
 * own totals, read from anywhere in the output: a long failure list once pushed them out of a
 * fixed tail and the run said "0 failed") and the reporter's list of failing tests.
 */
function phase(name, files, concurrency, env = {}) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--test', `--test-concurrency=${concurrency}`, '--test-reporter=spec', ...files], {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const totals = { pass: 0, fail: 0 };
    let emulationFault;
    let partial = '';
    let failures = '';
    let inFailures = false;
    const take = (line) => {
      emulationFault ??= EMULATION_FAULT.exec(line)?.[0];
      const total = /^ℹ (pass|fail) (\d+)\s*$/.exec(line);
      if (total) {
        totals[total[1]] += Number(total[2]);
        inFailures = false;
      } else if (/^✖ failing tests:/.test(line)) inFailures = true;
      else if (inFailures && failures.length < FAILURES_KEPT) failures += `${line}\n`;
    };
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) take(line);
    });
    child.on('exit', (code) => {
      if (partial) take(partial);
      resolve({ name, code: code ?? 1, passed: totals.pass, failed: totals.fail, failures, emulationFault });
    });
  });
}

/** How much of a phase's failure list is repeated at the end of the run. */
const FAILURES_KEPT = 40_000;

/** Suites that failed with an emulation fault and ran again: said in the summary. */
const reruns = [];

/** The e2e files one at a time, each a phase of its own, merged into one result; see EMULATION_FAULT. */
async function e2ePhase(name, files, env) {
  const merged = { name, code: 0, passed: 0, failed: 0, failures: '' };
  for (const file of files) {
    let r = await phase(name, [file], 1, env);
    if (r.code !== 0 && r.emulationFault) {
      const line = `${file} (${name}): ${r.emulationFault}`;
      reruns.push(line);
      console.log(`\n--- a guest's kernel died of an emulation fault, the suite runs once more: ${line} ---\n`);
      r = await phase(name, [file], 1, env);
    }
    merged.code ||= r.code;
    merged.passed += r.passed;
    merged.failed += r.failed;
    merged.failures += r.failures;
  }
  return merged;
}

const results = [await phase('unit and integration tests', host, 2)];
if (!fast && e2e.length > 0 && results[0].code === 0) {
  const suite = process.env['STRATA_E2E_KERNEL_SUITE'] || 'trixie';
  console.log(`\n--- end-to-end tests (QEMU guests, Debian ${suite}'s kernel) ---\n`);
  results.push(await e2ePhase(`end-to-end tests (Debian ${suite}'s kernel)`, e2e, { STRATA_E2E_KERNEL_SUITE: suite }));
  const again = e2e.filter((f) => ON_BOTH_KERNELS.includes(f));
  if (again.length > 0 && suite !== 'bookworm') {
    console.log('\n--- end-to-end tests on Debian 12\'s kernel 6.1 (the core data path, discovery and replication again) ---\n');
    results.push(await e2ePhase("end-to-end tests (Debian 12's kernel 6.1)", again, { STRATA_E2E_KERNEL_SUITE: 'bookworm' }));
  }
}
const passed = results.reduce((n, r) => n + r.passed, 0);
const failed = results.reduce((n, r) => n + r.failed, 0);
// Every phase's failures again, last: whoever reads only the end of a long run sees them all.
for (const r of results.filter((r) => r.code !== 0)) {
  console.log(`\n--- failed: ${r.name} (exit ${r.code}) ---\n${r.failures || '(the reporter listed no failing test: see the phase\'s output above)\n'}`);
}
for (const line of reruns) console.log(`\n--- ran again after a guest kernel's emulation fault: ${line} ---`);
console.log(`\n${passed} passed, ${failed} failed`);
process.exit(results.every((r) => r.code === 0) ? 0 : 1);
