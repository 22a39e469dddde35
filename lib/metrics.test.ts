// The metrics address: GET /metrics in Prometheus' text format; every error with the JSON error
// body, including those Node's HTTP server would send bare (issue 13 item 11).
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { createLogger } from './logger.js';
import { startMetricsServer, type MetricsServer } from './metrics.js';

/** Writes `text` on a fresh socket and reads until the server closes it. */
function raw(port: number, text: string): Promise<{ status: number; headers: string; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(new Error('no close within 5 s')), 5_000);
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      clearTimeout(timer);
      const [headers = '', body = ''] = Buffer.concat(chunks).toString('utf8').split('\r\n\r\n', 2);
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(headers)?.[1] ?? 0), headers, body });
    });
    socket.write(text);
  });
}

function jsonError(reply: { status: number; headers: string; body: string }, status: number, code: number): void {
  assert.equal(reply.status, status, reply.headers);
  assert.match(reply.headers, /content-type: application\/json/i);
  const body = JSON.parse(reply.body) as { error: string; code: number; message: string };
  assert.equal(body.code, code);
  assert.equal(body.error, body.message);
}

describe('metrics address', () => {
  let metrics: MetricsServer;
  let port: number;
  before(async () => {
    metrics = await startMetricsServer('127.0.0.1', 0, createLogger('test', 'silent'));
    port = metrics.port as number;
  });
  after(() => metrics.close());

  test('GET /metrics is the text format, also without a Host header', async () => {
    const reply = await raw(port, 'GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n');
    assert.equal(reply.status, 200, reply.headers);
    assert.match(reply.body, /process_cpu_seconds_total/);
  });

  test('another path is 404, headers too large 431, a malformed request 400: each with the JSON error body', async () => {
    jsonError(await raw(port, 'GET /api/v2/nodes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), 404, 5);
    jsonError(await raw(port, 'POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'), 404, 5);
    jsonError(await raw(port, `GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`), 431, 3);
    jsonError(await raw(port, 'NOT A REQUEST\r\n\r\n'), 400, 3);
  });
});
