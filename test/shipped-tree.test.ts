// What `dist/` ships outside `dist/test/` (the daemons, the CLI, their shared code) holds no test
// kit, fixture, fake or e2e scenario: none is named like one, none imports node:test or
// node:assert, and none imports anything under test/. Unit tests (*.test.js) may sit beside the
// code they test; what they need that is test-only lives under test/ (test/kits/, test/helpers/,
// test/e2e/scenarios/). Only compiled files whose source still exists count: tsc does not delete
// the output of a file that was moved or removed.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { it } from 'node:test';
import { packageRoot } from '../lib/paths.js';

const dist = join(packageRoot, 'dist');
const SHIPPED = ['control-plane', 'agent', 'lib', 'cli', 'proto'];
const TEST_NAMES = /(?:\.e2e\.js|test-kit|test-support|test-fixtures?|fixtures?|fakes?|(?:^|-)testing)(?:\.js)?$|(?:^|\/)(?:testing|fixtures|fakes|kits)\/|(?:^|\/)(?:test|fake)-[^/]*\.js$/;

function* compiled(dir: string): Generator<string> {
  if (!existsSync(dir)) return;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* compiled(path);
    else if (entry.name.endsWith('.js') && !entry.name.endsWith('.test.js')) yield path;
  }
}

/** The module specifiers a compiled ES module imports (static and dynamic). */
function importsOf(code: string): string[] {
  return [...code.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"]([^'"]+)['"]/g)].map((m) => m[1]!);
}

it('dist/ outside dist/test holds no test kit, fixture, fake or e2e scenario, and imports none', () => {
  const problems: string[] = [];
  let checked = 0;
  for (const root of SHIPPED) {
    for (const file of compiled(join(dist, root))) {
      const fromDist = relative(dist, file).split(sep).join('/');
      if (!existsSync(join(packageRoot, fromDist.replace(/\.js$/, '.ts')))) continue; // stale output
      checked += 1;
      if (TEST_NAMES.test(fromDist)) problems.push(`${fromDist}: named like test code`);
      for (const specifier of importsOf(readFileSync(file, 'utf8'))) {
        if (/^node:(?:test|assert)(?:\/|$)/.test(specifier)) problems.push(`${fromDist}: imports ${specifier}`);
        if (specifier.startsWith('.')) {
          const target = relative(dist, resolve(dirname(file), specifier)).split(sep).join('/');
          if (target.startsWith('test/')) problems.push(`${fromDist}: imports ${target}`);
        }
      }
    }
  }
  assert.ok(checked > 100, `only ${checked} compiled files found under dist/: run the build first`);
  assert.deepEqual(problems, [], problems.join('\n'));
});

it('the production wiring has no test switch: only test code builds the emulated (plain-directory) nvmet target', () => {
  // The wiring, the configfs driver and the agent's composition root: none has an emulated mode
  // to turn on or asks whether it is on (test/kits/datapath/emulated-nvmet-configfs.ts is the
  // stand-in, a subclass).
  for (const file of [['agent', 'datapath', 'datapath.js'], ['agent', 'datapath', 'kernel', 'nvmet-configfs.js'], ['agent', 'agent.js']]) {
    const code = readFileSync(join(dist, ...file), 'utf8');
    assert.doesNotMatch(code, /emulated:\s*(?:true|false)|\.emulated\b|prepareEmulatedRoot|removeEmulatedContents|tests only/, file.join('/'));
  }
});
