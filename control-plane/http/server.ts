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
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { StrataError } from '../../lib/errors.js';
import { answerClientError } from '../../lib/http-errors.js';

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
