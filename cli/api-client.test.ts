// The HTTP client against a stub server: error bodies become one line, 503 + Retry-After is
// retried for idempotent methods only, If-Match is sent, transport failures are "cannot connect".
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import { freePort } from '../lib/ports.js';
import { ApiClient } from './api-client.js';
import { ApiError, ConnectionError } from './errors.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

describe('cli api client', () => {
  let server: Server;
  let endpoint: string;
  let handler: Handler;
  const seen: { method: string; url: string; headers: IncomingMessage['headers'] }[] = [];
  const retries: string[] = [];
  const client = () => new ApiClient({ endpoint, token: 'test-token', requestTimeoutMs: 5000, onRetry: (m) => retries.push(m) });
  const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };

  before(async () => {
    server = createServer((req, res) => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers });
      req.resume();
      req.on('end', () => handler(req, res));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  beforeEach(() => {
    seen.length = 0;
    retries.length = 0;
  });

  it('sends the bearer token under /api/v2 and percent-encodes the query', async () => {
    handler = (_req, res) => json(res, 200, { ok: true });
    assert.deepEqual(await client().get('/projects/default/volumes/', { name: 'a b', empty: '', none: undefined }), { ok: true });
    assert.equal(seen[0]!.url, '/api/v2/projects/default/volumes/?name=a+b');
    assert.equal(seen[0]!.headers.authorization, 'Bearer test-token');
  });

  it('turns the API error body into one line with status and gRPC name', async () => {
    handler = (_req, res) => json(res, 404, { error: 'volume x not found', code: 5, message: 'volume x not found' });
    await assert.rejects(client().get('/volumes/x'), (err: unknown) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.status, 404);
      assert.equal(err.message, 'volume x not found (HTTP 404, NotFound)');
      return true;
    });
    handler = (_req, res) => json(res, 401, { error: 'malformed token', code: 16, message: 'malformed token' });
    await assert.rejects(client().get('/cluster'), /^ApiError: authentication failed: malformed token \(HTTP 401, Unauthenticated\)/);
    handler = (_req, res) => {
      res.writeHead(502, { 'Content-Type': 'text/html' });
      res.end('<html>bad gateway</html>');
    };
    await assert.rejects(client().get('/cluster'), /HTTP 502 Bad Gateway: <html>bad gateway<\/html> \(not a Strata API answer/);
  });

  it('retries a 503 with Retry-After for GET, PUT and DELETE, honouring the delay', async () => {
    for (const method of ['GET', 'PUT', 'DELETE'] as const) {
      let calls = 0;
      handler = (_req, res) => (++calls < 3 ? json(res, 503, { error: 'busy', code: 14, message: 'busy' }, { 'Retry-After': '0' }) : json(res, 200, {}));
      await client().request(method, '/volumes/x', method === 'PUT' ? { body: { size: '1' }, ifMatch: '42' } : {});
      assert.equal(calls, 3, method);
    }
    assert.equal(retries.length, 6);
    assert.equal(seen.find((s) => s.method === 'PUT')!.headers['if-match'], '"42"');
  });

  it('gives up after a few retries, and never retries a 503 without Retry-After', async () => {
    let calls = 0;
    handler = (_req, res) => {
      calls++;
      json(res, 503, { error: 'busy', code: 14, message: 'busy' }, { 'Retry-After': '0' });
    };
    await assert.rejects(client().get('/cluster'), ApiError);
    assert.equal(calls, 4);
    calls = 0;
    handler = (_req, res) => {
      calls++;
      json(res, 503, { error: 'volume is Creating', code: 14, message: 'volume is Creating' });
    };
    await assert.rejects(client().put('/volumes/x', {}), /volume is Creating \(HTTP 503, Unavailable\)/);
    assert.equal(calls, 1);
  });

  it('never retries a POST, even a 503 with Retry-After', async () => {
    let calls = 0;
    handler = (_req, res) => {
      calls++;
      json(res, 503, { error: 'no node is Active', code: 14, message: 'no node is Active' }, { 'Retry-After': '0' });
    };
    await assert.rejects(client().post('/projects/default/volumes', { name: 'v' }), (err: unknown) => {
      assert.ok(err instanceof ApiError && err.retryAfterSeconds === 0);
      assert.equal(err.message, 'no node is Active (HTTP 503, Unavailable); the server asks to retry after 0 s');
      return true;
    });
    assert.equal(calls, 1);
  });

  it('reports a refused connection as ConnectionError', async () => {
    const closed = new ApiClient({ endpoint: `http://127.0.0.1:${await freePort()}`, token: 't', requestTimeoutMs: 5000 });
    await assert.rejects(closed.get('/cluster'), (err: unknown) => err instanceof ConnectionError && /connection refused/.test(err.message));
  });
});
