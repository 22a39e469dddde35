import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mapLimit } from './concurrency.js';

test('mapLimit keeps the order and never runs more than the limit at once', async () => {
  let running = 0;
  let most = 0;
  const results = await mapLimit([...Array(50).keys()], 4, async (n) => {
    running++;
    most = Math.max(most, running);
    await new Promise((r) => setTimeout(r, n % 3));
    running--;
    return n * 2;
  });
  assert.deepEqual(results, [...Array(50).keys()].map((n) => n * 2));
  assert.equal(most, 4);
  assert.deepEqual(await mapLimit([], 4, async () => 1), []);
  await assert.rejects(mapLimit([1, 2, 3], 2, async (n) => { if (n === 2) throw new Error('two'); return n; }), /two/);
});
