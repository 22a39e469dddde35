// What the domain suites on the in-memory etcd share: the control plane's watched state over the
// fake (stopped after each test), and the check that a call is refused with a given error code.
import assert from 'node:assert/strict';
import { afterEach } from 'node:test';
import type { StrataError } from '../../lib/errors.js';
import { WatchCache } from '../../control-plane/watch-cache/watch-cache.js';
import { silentLogger } from '../helpers/silent-logger.js';
import type { MemoryEtcd } from './memory-etcd.js';

/** Call inside a describe: returns a function that starts a WatchCache on a fake, stopped after the test. */
export function watchedStateForEachTest(): (kv: MemoryEtcd) => Promise<WatchCache> {
  const caches: WatchCache[] = [];
  afterEach(async () => {
    await Promise.all(caches.splice(0).map((cache) => cache.stop()));
  });
  return async (kv) => {
    const cache = new WatchCache(kv, silentLogger());
    caches.push(cache);
    await cache.start();
    return cache;
  };
}

/** Rejects with a StrataError of this code (and message). */
export async function refuses(promise: Promise<unknown>, code: string, message?: RegExp): Promise<void> {
  await assert.rejects(promise, (err: StrataError) => {
    assert.equal(err.code, code, err.message);
    if (message) assert.match(err.message, message);
    return true;
  });
}
