// The JSON error body (wire-conventions §3) on the answers Node's HTTP server would send on its
// own, bare: every HTTP server of the daemons (the REST API, the metrics address) answers its
// errors with it, including those Node raises before any request handler runs ('clientError').
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { StrataError, type ErrorCode } from './errors.js';

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
export function answerClientError(err: Error & { code?: string; reason?: string }, socket: Duplex): void {
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
