#!/usr/bin/env node
// Runs the compiled tests with node's built-in test runner (its summary is what CI reads).
//   node test/run.mjs          every suite: unit + integration (real etcd, real daemons), then e2e
//   node test/run.mjs --fast   unit + integration only
// Test files are dist/**/*.test.js; files under test/e2e/ belong to the end-to-end suite.
import { spawnSync } from 'node:child_process';
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
const files = all.filter((f) => !fast && isE2e(f) ? true : !isE2e(f));
if (files.length === 0) {
  console.error('no test files found under dist/: run `npm run build` first');
  process.exit(1);
}
const result = spawnSync(process.execPath, ['--test', '--test-concurrency=2', '--test-reporter=spec', ...files], {
  cwd: root,
  stdio: 'inherit',
});
process.exit(result.status ?? 1);
