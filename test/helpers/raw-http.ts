// HTTP/1.1 spoken by hand: what fetch() refuses to send (no Host, an empty Expect, oversized or
// malformed heads), for tests of the answers Node's HTTP server would give on its own.
import assert from 'node:assert/strict';
import { connect as connectTcp } from 'node:net';
import { connect as connectTls, type ConnectionOptions } from 'node:tls';

export interface RawReply {
  readonly status: number;
  readonly headers: string;
  readonly body: string;
  /** ms from the first byte sent to the socket's close. */
  readonly closedAfterMs: number;
}

/**
 * Writes `text` on a fresh connection to 127.0.0.1:`port` (TLS with `tls`) and reads until the
 * server closes it (or `waitMs` passes: rejected with what arrived).
 */
export function rawHttp(port: number, text: string | Buffer, options: { waitMs?: number; tls?: ConnectionOptions } = {}): Promise<RawReply> {
  const waitMs = options.waitMs ?? 10_000;
  return new Promise((resolve, reject) => {
    const socket = options.tls ? connectTls({ ...options.tls, host: '127.0.0.1', port }) : connectTcp(port, '127.0.0.1');
    const started = Date.now();
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no close within ${waitMs} ms; got ${Buffer.concat(chunks).toString().slice(0, 300)}`));
    }, waitMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      const all = Buffer.concat(chunks).toString('utf8');
      const [head = '', body = ''] = all.split('\r\n\r\n', 2);
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0), headers: head, body, closedAfterMs: Date.now() - started });
    });
    socket.write(text);
  });
}

/** Asserts the JSON error body of wire-conventions §3 with this HTTP status and gRPC code. */
export function assertJsonError(reply: { status: number; headers?: string | Headers; body: string }, status: number, code: number): { error: string; code: number; message: string } {
  assert.equal(reply.status, status, reply.body.slice(0, 300));
  const type = typeof reply.headers === 'string' ? /^content-type: *(.*)$/im.exec(reply.headers)?.[1] : reply.headers?.get('content-type');
  if (reply.headers !== undefined) assert.match(type ?? '', /^application\/json/, 'Content-Type');
  const body = JSON.parse(reply.body) as { error: string; code: number; message: string };
  assert.equal(body.code, code);
  assert.equal(typeof body.error, 'string');
  assert.equal(body.error, body.message);
  return body;
}
