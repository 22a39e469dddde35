// The metrics address: GET /metrics in Prometheus' text format; every error with the JSON error
// body, including those Node's HTTP server would send bare (issue 13 item 11).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertJsonError, rawHttp } from '../test/helpers/raw-http.js';
import { createLogger } from './logger.js';
import { startMetricsServer, type MetricsServer } from './metrics.js';

describe('metrics address', () => {
  let metrics: MetricsServer;
  let port: number;
  before(async () => {
    metrics = await startMetricsServer('127.0.0.1', 0, createLogger('test', 'silent'));
    port = metrics.port as number;
  });
  after(() => metrics.close());

  test('GET /metrics is the text format, also without a Host header', async () => {
    const reply = await rawHttp(port, 'GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n');
    assert.equal(reply.status, 200, reply.headers);
    assert.match(reply.body, /process_cpu_seconds_total/);
  });

  test('another path is 404, headers too large 431, a malformed request 400: each with the JSON error body', async () => {
    assertJsonError(await rawHttp(port, 'GET /api/v2/nodes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), 404, 5);
    assertJsonError(await rawHttp(port, 'POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'), 404, 5);
    assertJsonError(await rawHttp(port, `GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`), 431, 3);
    assertJsonError(await rawHttp(port, 'NOT A REQUEST\r\n\r\n'), 400, 3);
  });
});
