// strata bundle's progress (cli/transfer-progress.ts): the terminal bar's frames, and the plain
// lines written where stderr is not a terminal, on a clock the test moves.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LINE_EVERY_MS, progressBar, progressLine, REDRAW_MS, TransferProgress, type ProgressOutput } from './transfer-progress.js';

const MiB = 1024 * 1024;

function output(isTTY: boolean, columns?: number): ProgressOutput & { readonly written: string[] } {
  const written: string[] = [];
  return { isTTY, ...(columns ? { columns } : {}), written, write: (text: string) => written.push(text) };
}

describe('strata bundle progress', () => {
  it('a terminal frame: an indeterminate bar sweeping back and forth, bytes, time and rate', () => {
    const state = { name: 'strata-bundle-host-20250101-000000.tgz', bytes: 12 * MiB, elapsedMs: 4000 };
    assert.equal(progressBar(state, 0, 120), 'strata: receiving strata-bundle-host-20250101-000000.tgz [<=>                 ] 12 MiB in 4 s (3 MiB/s)');
    assert.match(progressBar(state, 1), /\[ <=>                \]/);
    assert.match(progressBar(state, 17), /\[                 <=>\]/, 'the far end');
    assert.match(progressBar(state, 18), /\[                <=> \]/, 'and back');
    assert.equal(progressBar(state, 34), progressBar(state, 0), 'a full sweep');
    for (let frame = 0; frame < 40; frame++) assert.equal(/\[(.*)\]/.exec(progressBar(state, frame))![1]!.length, 20, 'the bar keeps its width');
    // 80 columns (the default) or fewer: the name gives way (from its start), the line never reaches the last column.
    const narrow = progressBar(state, 3);
    assert.equal(narrow.length, 79, narrow);
    assert.match(narrow, /^strata: receiving …01-000000\.tgz \[   <=>/);
    assert.match(narrow, /12 MiB in 4 s \(3 MiB\/s\)$/);
  });

  it('a terminal: redrawn in place on every tick, cleared at the end', () => {
    let now = 1000;
    const out = output(true, 100);
    const progress = new TransferProgress(out, 'b.tgz', { now: () => now, startedAt: 500 });
    progress.received(MiB);
    for (let i = 0; i < 3; i++) {
      now += REDRAW_MS;
      progress.tick();
    }
    progress.stop();
    assert.equal(out.written.length, 4);
    for (const [i, frame] of out.written.slice(0, 3).entries()) {
      assert.ok(frame.startsWith('\r') && frame.endsWith('\u001b[K'), JSON.stringify(frame));
      assert.ok(!frame.includes('\n'), 'redrawn in place');
      assert.ok(frame.includes(`[${' '.repeat(i)}<=>`), frame);
    }
    assert.match(out.written[0]!, /b\.tgz \[<=> +\] 1 MiB in 0\.8 s/, 'time since the request');
    assert.equal(out.written[3], '\r\u001b[K');
  });

  it('not a terminal: a plain line at once, then one every 5 s; no control characters, nothing at the end', () => {
    let now = 0;
    const out = output(false);
    const progress = new TransferProgress(out, 'b.tgz', { now: () => now });
    const at = (ms: number, bytes: number) => {
      now = ms;
      progress.received(bytes);
      progress.tick();
    };
    at(REDRAW_MS, MiB);
    for (let ms = 2 * REDRAW_MS; ms < LINE_EVERY_MS + REDRAW_MS; ms += REDRAW_MS) at(ms, 0);
    at(LINE_EVERY_MS + REDRAW_MS, 9 * MiB);
    at(LINE_EVERY_MS + 2 * REDRAW_MS, MiB);
    progress.stop();
    assert.deepEqual(out.written, ['strata: receiving b.tgz: 1 MiB in 0.3 s (4 MiB/s)\n', 'strata: receiving b.tgz: 10 MiB in 5.3 s (1.9 MiB/s)\n']);
    assert.equal(progressLine({ name: 'x', bytes: 0, elapsedMs: 0 }), 'strata: receiving x: 0 B in 0 s (0 B/s)');
    for (const line of out.written) assert.doesNotMatch(line, /[\r\u001b]/);
  });
});
