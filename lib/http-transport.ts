// The one HTTP(S) client transport of the CLI and of a control plane forwarding a request to
// another (control-plane/agents/session-routing.ts): node:https rather than fetch, because Node
// 20's fetch cannot be given a CA: both verify a control plane against the cluster CA (the CLI's
// --ca-file, STRATA_CA_FILE, ~/.config/strata/ca.pem; a control plane's <stateDir>/ca.pem)
// besides the system's, and the CLI skips verification only when told --insecure. Answers are web Responses and failures are shaped like fetch's
// (TypeError('fetch failed') with the socket error as cause, the signal's reason on abort), so
// the client above reads them the same way.
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { rootCertificates } from 'node:tls';
import { Readable } from 'node:stream';

export interface TlsTrust {
  /** PEM CA certificate(s) trusted besides the system's. */
  readonly ca?: string | undefined;
  /** Do not verify the server's certificate at all (--insecure). */
  readonly insecure?: boolean | undefined;
}

export interface SendInit {
  readonly method: string;
  readonly headers: Record<string, string>;
  readonly body?: string;
  readonly signal: AbortSignal;
}

const NO_BODY = new Set([101, 204, 205, 304]);

export function send(url: string, init: SendInit, trust: TlsTrust = {}): Promise<Response> {
  const target = new URL(url);
  const https = target.protocol === 'https:';
  return new Promise((resolve, reject) => {
    if (init.signal.aborted) return reject(init.signal.reason);
    const options = {
      method: init.method,
      headers: { ...init.headers, ...(init.body === undefined ? {} : { 'Content-Length': String(Buffer.byteLength(init.body)) }) },
      signal: init.signal,
      ...(https ? { rejectUnauthorized: trust.insecure !== true, ...(trust.ca ? { ca: [...rootCertificates, trust.ca] } : {}) } : {}),
    };
    const req = (https ? httpsRequest : httpRequest)(target, options, (res) => {
      const headers = new Headers();
      for (const [name, value] of Object.entries(res.headers)) {
        if (value === undefined) continue;
        for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
      }
      const status = res.statusCode ?? 0;
      const body = NO_BODY.has(status) ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>);
      if (body === null) res.resume();
      resolve(new Response(body, { status, statusText: res.statusMessage ?? '', headers }));
    });
    req.on('error', (err) => reject(init.signal.aborted ? init.signal.reason : new TypeError('fetch failed', { cause: err })));
    req.end(init.body);
  });
}
