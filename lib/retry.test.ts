// The one retry policy (lib/retry.ts): what is retried, how long it waits, how it stops.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Backoff, DeadlineExceeded, LOST_RACE, retry, RetryAborted, retryLostRaces, withDeadline } from './retry.js';

const failTimes = (n: number, error = () => new Error('not yet')) => {
  let calls = 0;
  const work = async () => {
    calls += 1;
    if (calls <= n) throw error();
    return calls;
  };
  return { work, calls: () => calls };
};

describe('retry', () => {
  it('retries until the work succeeds, waiting a capped exponential backoff between attempts', async () => {
    const { work } = failTimes(4);
    const waits: number[] = [];
    const numbers: number[] = [];
    const result = await retry(work, { backoff: { initialMs: 1, maxMs: 4, jitter: 0 }, onRetry: (_err, delay, n) => (waits.push(delay), numbers.push(n)) });
    assert.equal(result, 5);
    assert.deepEqual(waits, [1, 2, 4, 4]);
    assert.deepEqual(numbers, [1, 2, 3, 4]);
  });

  it('throws at once a failure retryIf declines, and the last failure once maxRetries ran out', async () => {
    const declined = failTimes(5, () => new Error('fatal'));
    await assert.rejects(retry(declined.work, { retryIf: (err) => err.message !== 'fatal' }), /fatal/);
    assert.equal(declined.calls(), 1);
    const limited = failTimes(5);
    await assert.rejects(retry(limited.work, { maxRetries: 2, backoff: { initialMs: 1, maxMs: 1 } }), /not yet/);
    assert.equal(limited.calls(), 3);
  });

  it('takes the wait from the failure when delayMs answers', async () => {
    const waits: number[] = [];
    await retry(failTimes(2).work, { delayMs: () => 3, backoff: { initialMs: 1000, maxMs: 1000 }, onRetry: (_e, delay) => waits.push(delay) });
    assert.deepEqual(waits, [3, 3]);
  });

  it('an abort ends the wait at once and starts no further attempt', async () => {
    const abort = new AbortController();
    const { work, calls } = failTimes(100);
    const started = Date.now();
    const pending = retry(work, { backoff: { initialMs: 60_000, maxMs: 60_000 }, signal: abort.signal });
    setTimeout(() => abort.abort(), 20);
    await assert.rejects(pending, RetryAborted);
    assert.ok(Date.now() - started < 5000, 'the 60 s wait was cut short');
    assert.equal(calls(), 1);
  });

  it('Backoff: jitter takes at most its fraction off; reset starts over', () => {
    const backoff = new Backoff({ initialMs: 100, maxMs: 1000, jitter: 0.5 });
    for (const full of [100, 200, 400, 800, 1000, 1000]) {
      const delay = backoff.next();
      assert.ok(delay >= full / 2 && delay <= full, `${delay} within [${full / 2}, ${full}]`);
    }
    backoff.reset();
    assert.ok(backoff.next() <= 100);
  });

  it('withDeadline: the work\'s outcome in time, DeadlineExceeded after, and a late failure is nobody\'s unhandled rejection', async () => {
    assert.equal(await withDeadline(Promise.resolve(7), 1000, 'slow'), 7);
    await assert.rejects(withDeadline(Promise.reject(new Error('own')), 1000, 'slow'), /own/);
    const keepAlive = setInterval(() => undefined, 1000);
    try {
      let fail: (err: Error) => void = () => undefined;
      const late = new Promise<number>((_, reject) => (fail = reject));
      await assert.rejects(withDeadline(late, 30, 'did not finish within 30 ms'), (err: Error) => err instanceof DeadlineExceeded && err.message === 'did not finish within 30 ms');
      fail(new Error('too late'));
      await new Promise((r) => setTimeout(r, 10));
    } finally {
      clearInterval(keepAlive);
    }
  });
});

describe('retryLostRaces', () => {
  it('answers the first attempt that does not lose its race, attempt numbers from 0', async () => {
    const seen: number[] = [];
    const result = await retryLostRaces(5, async (n) => {
      seen.push(n);
      return n < 2 ? LOST_RACE : `won at ${n}`;
    }, () => new Error('busy'));
    assert.equal(result, 'won at 2');
    assert.deepEqual(seen, [0, 1, 2]);
  });

  it('rejects with exhausted() after `attempts` lost races, and with what an attempt throws at once', async () => {
    let calls = 0;
    await assert.rejects(retryLostRaces(3, async () => { calls++; return LOST_RACE; }, () => new Error('busy record')), /busy record/);
    assert.equal(calls, 3);
    calls = 0;
    await assert.rejects(retryLostRaces(3, async () => { calls++; throw new TypeError('not a race'); }, () => new Error('busy')), TypeError);
    assert.equal(calls, 1);
  });
});
