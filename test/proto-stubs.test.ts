// The committed typed stubs (proto/gen) must be what the generator makes from proto/strata.proto.
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { packageRoot } from '../lib/paths.js';

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
}

it('proto/gen is up to date with proto/strata.proto (run npm run proto:gen)', () => {
  const out = mkdtempSync(join(tmpdir(), 'strata-proto-'));
  try {
    execFileSync(process.execPath, [join(packageRoot, 'tools/proto-gen.mjs'), out], { cwd: packageRoot, stdio: 'pipe' });
    const committed = join(packageRoot, 'proto/gen');
    const generated = files(out).map((f) => relative(out, f)).sort();
    assert.deepEqual(files(committed).map((f) => relative(committed, f)).sort(), generated);
    for (const file of generated) assert.equal(readFileSync(join(committed, file), 'utf8'), readFileSync(join(out, file), 'utf8'), file);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
