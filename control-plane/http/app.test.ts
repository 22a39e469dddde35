// The Koa application answers every error with the JSON error body (wire-conventions §3), also
// one Koa meets itself after the routes ran (issue 13 item 11).
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import Router from '@koa/router';
import { createLogger } from '../../lib/logger.js';
import { createHttpApp } from './app.js';
import { createApiServer } from './server.js';

describe('HTTP app: errors Koa meets itself', () => {
  const server = createApiServer({ headersTimeoutMs: 5_000, requestTimeoutMs: 5_000, keepAliveTimeoutMs: 5_000, maxConnections: 10 });
  let base = '';

  before(async () => {
    const router = new Router();
    // A body JSON.stringify cannot serialize: Koa fails while writing the response, after every
    // middleware returned, and would answer text/plain "Internal Server Error".
    router.get('/unserializable', (ctx) => {
      ctx.body = { size: 1n };
    });
    router.get('/fine', (ctx) => {
      ctx.body = { ok: true };
    });
    server.on('request', createHttpApp(createLogger('test', 'silent'), [router]).callback());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  test('a response Koa cannot write is a 500 with the JSON error body and the request id', async () => {
    const res = await fetch(`${base}/unserializable`);
    assert.equal(res.status, 500);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    assert.match(res.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
    const body = (await res.json()) as { error: string; code: number; message: string };
    assert.equal(body.code, 13);
    assert.equal(body.error, body.message);
    assert.equal((await fetch(`${base}/fine`)).status, 200, 'the server goes on');
  });
});
