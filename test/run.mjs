#!/usr/bin/env node
// Runs the compiled tests with node's built-in test runner, in two phases:
//   1. host tests (unit + integration: real etcd, real daemons), two files at a time;
//   2. end-to-end tests (dist/test/e2e: QEMU guests booting Debian's kernel), one at a time,
//      only after the host tests passed — guests must not compete with the host tests.
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

/** Runs one phase, echoing its output; returns its exit code and pass/fail counts. */
function phase(files, concurrency) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--test', `--test-concurrency=${concurrency}`, '--test-reporter=spec', ...files], {
      cwd: root,
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
  console.log('\n--- end-to-end tests (QEMU guests) ---\n');
  results.push(await phase(e2e, 1));
}
const passed = results.reduce((n, r) => n + r.passed, 0);
const failed = results.reduce((n, r) => n + r.failed, 0);
console.log(`\n${passed} passed, ${failed} failed`);
process.exit(results.every((r) => r.code === 0) ? 0 : 1);
