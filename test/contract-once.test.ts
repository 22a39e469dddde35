// Shared contracts exist once (lib/contract/): no shipped or tool source outside it defines the
// UUID pattern, the ACL pseudo-values, the volume subsystem NQN format, the UUID host NQN prefix
// or a size unit table again.
// Tests are exempt: they may spell out what they check.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { it } from 'node:test';
import { packageRoot } from '../lib/paths.js';

const ROOTS = ['control-plane', 'agent', 'lib', 'cli', 'tools', 'bench'];

function* sources(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sources(path);
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts') && !entry.name.endsWith('.d.ts')) yield path;
  }
}

/** The code of a file without its comments (good enough for the patterns below). */
function code(path: string): string {
  return readFileSync(path, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');
}

const DUPLICATES: readonly (readonly [string, RegExp])[] = [
  ['a UUID pattern', /\[0-9a-f(?:A-F)?\]\{8\}-|\[0-9a-f(?:A-F)?-\]\{(?:27|36)\}/],
  ['an ACL pseudo-value literal', /['"`]ALLOW_(?:ANY|NONE)['"`]/],
  ['the volume subsystem NQN format', /:vol:/],
  ['the UUID host NQN prefix', /nqn\.2014-08\.org\.nvmexpress:uuid:/],
  ['a size unit table', /\b(?:gib|gb)\s*:\s*10(?:24|00)n/],
];

it('ACL pseudo-values, the volume and UUID host NQNs, the UUID pattern and size units are defined only in lib/contract/', () => {
  const found: string[] = [];
  for (const root of ROOTS) {
    for (const path of sources(join(packageRoot, root))) {
      const file = relative(packageRoot, path);
      if (file.startsWith(join('lib', 'contract'))) continue;
      const text = code(path);
      for (const [what, pattern] of DUPLICATES) if (pattern.test(text)) found.push(`${file}: ${what}`);
    }
  }
  assert.deepEqual(found, [], `use lib/contract/ instead:\n${found.join('\n')}`);
});
