// One retry policy (issue 14 item 5): a loop that retries lost optimistic-concurrency races goes
// through retryLostRaces, and one that retries failures through retry() (both lib/retry.ts, on
// cockatiel), so attempts, waits and the error once they run out are decided in one place. No
// shipped source (the .ts files under control-plane/, agent/, lib/ and cli/, *.test.ts excluded)
// counts attempts by hand: no `for (let attempt…` / `for (let retries…` loop, no `attempt++` or
// `tries += 1` counter.
//
// The files that still do are listed in ALLOWED with how many such lines each holds and why. The
// list only shrinks: a new loop fails, and so does an entry whose file now holds fewer (lower its
// count, or take it off, when a change removes one).
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { it } from 'node:test';
import { packageRoot } from '../lib/paths.js';

const ROOTS = ['control-plane', 'agent', 'lib', 'cli'];

/** A loop over an attempt counter, or such a counter stepped by hand. */
const HAND_WRITTEN_ATTEMPTS = [/\bfor\s*\(\s*let\s+\w*(attempt|retr|tries|tried)\w*\b/i, /\b\w*(attempt|retr|tries|tried)\w*\s*(\+\+|\+=\s*1\b)/i];

/** Files that still count attempts by hand: how many such lines, and why. */
const ALLOWED: Readonly<Record<string, { readonly lines: number; readonly why: string }>> = {
  'lib/retry.ts': { lines: 1, why: 'the policy itself: Backoff counts the attempts its delay grows with' },
  'agent/control-plane-session/control-plane-session.ts': { lines: 1, why: 'reconnects for as long as the agent runs, round-robin over the endpoints with Backoff: no last attempt, nothing to give up on' },
  'lib/ports.ts': { lines: 2, why: 'test port probing: a random port that is taken is not a failure to retry but a reason to try another, and the last resort is a kernel-picked port, not an error' },
};

function* sources(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sources(path);
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts') && !entry.name.endsWith('.d.ts')) yield path;
  }
}

/** Lines of code (comments aside) that count attempts by hand. */
function handWrittenAttempts(path: string): string[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => !line.startsWith('//') && !line.startsWith('*') && !line.startsWith('/*'))
    .filter((line) => HAND_WRITTEN_ATTEMPTS.some((pattern) => pattern.test(line)));
}

/** Every shipped source that counts attempts by hand, with its lines. */
function loops(): Map<string, string[]> {
  const found = new Map<string, string[]>();
  for (const root of ROOTS) {
    for (const path of sources(join(packageRoot, root))) {
      const lines = handWrittenAttempts(path);
      if (lines.length > 0) found.set(relative(packageRoot, path).split(sep).join('/'), lines);
    }
  }
  return found;
}

it('no shipped source counts attempts by hand: retries go through lib/retry.ts (the allow-list only shrinks)', () => {
  const found = loops();
  assert.ok(found.has('lib/retry.ts'), 'Backoff\'s own counter was not found: is the scan reading the sources?');
  const problems: string[] = [];
  for (const [file, lines] of found) {
    const allowed = ALLOWED[file]?.lines ?? 0;
    if (lines.length > allowed) {
      problems.push(`${file} counts attempts by hand (${lines.join(' | ')}): use retryLostRaces (a lost race) or retry() (a failure) from lib/retry.ts`);
    }
  }
  for (const [file, { lines, why }] of Object.entries(ALLOWED)) {
    assert.ok(why.length > 0, `${file}: an allowed loop says why it is still one`);
    const now = found.get(file)?.length ?? 0;
    if (now < lines) problems.push(`${file} now holds ${now} hand-written attempt line(s), not ${lines}: lower or remove its entry in ALLOWED (test/retry-loops.test.ts)`);
  }
  assert.deepEqual(problems, [], problems.join('\n'));
});

it('every file the allow-list names exists (a stale name would hide a renamed file)', () => {
  for (const file of Object.keys(ALLOWED)) assert.ok(existsSync(join(packageRoot, file)), `${file} is gone: take it off ALLOWED`);
});
