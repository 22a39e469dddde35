// The REST API's HTTP server: Node's server with the limits of docs/api.md ("Limits"), and the
// answers Node would otherwise give on its own before any route runs, rewritten so every error
// the process sends carries the JSON error body of wire-conventions §3:
// - a malformed request (400), headers too large (431), chunk extensions too large (413), a
//   request whose headers or body do not arrive in time (408): 'clientError';
// - an `Expect` other than `100-continue` (Cinder sends an empty `Expect:` on every call):
//   Node would answer 417; the request is answered as usual instead ('checkExpectation');
// - an HTTP/1.1 request without a `Host` header: Node would answer 400 with an empty body; the
//   API never depends on Host (wire-conventions §1: clients send any), so it is answered as usual
//   ('requireHostHeader').
import { STATUS_CODES, createServer as createHttpServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { StrataError, type ErrorCode } from '../../lib/errors.js';

export interface ApiServerLimits {
  /** The request line and headers must arrive within this time (from the connection or the previous response). */
  readonly headersTimeoutMs: number;
  /** The whole request, headers and body, must arrive within this time. */
  readonly requestTimeoutMs: number;
  /** An idle kept-alive connection is closed after this time. */
  readonly keepAliveTimeoutMs: number;
  /** Connections beyond this many at once are closed as they arrive. */
  readonly maxConnections: number;
}

/** How often Node checks the header and request timeouts: a timeout fires within this much of its due time. */
export const TIMEOUT_CHECK_INTERVAL_MS = 500;

/** The HTTP (or, with `tls`, HTTPS) server of the REST API, without a request listener yet. */
export function createApiServer(limits: ApiServerLimits, tls?: { cert: Buffer; key: Buffer }): Server {
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new StrataError('CONFIG_INVALID', `apiHeadersTimeoutSeconds (${limits.headersTimeoutMs / 1000}) must not exceed apiRequestTimeoutSeconds (${limits.requestTimeoutMs / 1000})`);
  }
  const options: ServerOptions = {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
    requireHostHeader: false,
  };
  const server: Server = tls ? createHttpsServer({ ...options, ...tls }) : createHttpServer(options);
  server.maxConnections = limits.maxConnections;
  // An empty or unknown expectation is no reason to refuse a storage API call.
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => server.emit('request', req, res));
  server.on('clientError', answerClientError);
  return server;
}

/** Writes `error` as the JSON error body (wire-conventions §3) with its HTTP status. */
export function writeError(res: ServerResponse, error: StrataError, headers: Record<string, string> = {}): void {
  const body = JSON.stringify(error.toWire());
  res.writeHead(error.httpStatus, { ...headers, 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': String(Buffer.byteLength(body)) });
  res.end(body);
}

/** The registry code of an error Node's HTTP parser or its timeouts raised. */
function edgeErrorOf(err: Error & { code?: string; reason?: string }): StrataError {
  const byNodeCode: Record<string, [ErrorCode, string]> = {
    HPE_HEADER_OVERFLOW: ['HEADERS_TOO_LARGE', 'request headers are too large'],
    HPE_CHUNK_EXTENSIONS_OVERFLOW: ['CHUNK_EXTENSIONS_TOO_LARGE', 'chunk extensions of the request body are too large'],
    ERR_HTTP_REQUEST_TIMEOUT: ['REQUEST_TIMEOUT', 'the request did not arrive in time'],
  };
  const known = err.code === undefined ? undefined : byNodeCode[err.code];
  if (known) return new StrataError(known[0], known[1]);
  const reason = typeof err.reason === 'string' ? err.reason : err.code ?? 'unparseable';
  return new StrataError('MALFORMED_REQUEST', `malformed HTTP request: ${reason}`);
}

const answered = new WeakSet<Duplex>();

/** 'clientError': answer once with the JSON body when nothing of a response was sent yet, then close. */
function answerClientError(err: Error & { code?: string; reason?: string }, socket: Duplex): void {
  if (answered.has(socket)) return;
  answered.add(socket);
  const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined;
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || !socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const error = edgeErrorOf(err);
  if (inFlight) {
    // A request being handled (its body still arriving): answer through its own response, so
    // the route's later answer finds the response ended and is dropped.
    inFlight.once('finish', () => socket.destroy());
    writeError(inFlight, error, { Connection: 'close' });
    return;
  }
  const body = JSON.stringify(error.toWire());
  const head = [
    `HTTP/1.1 ${error.httpStatus} ${STATUS_CODES[error.httpStatus] ?? ''}`,
    'Content-Type: application/json; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Connection: close',
  ].join('\r\n');
  socket.end(`${head}\r\n\r\n${body}`, () => socket.destroy());
}
