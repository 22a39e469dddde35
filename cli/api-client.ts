// The one HTTP client of the CLI: the REST API under /api/v2 with the bearer token, the API's
// JSON error body (wire-conventions §3) turned into ApiError, transport failures into
// ConnectionError, and the retry rule:
//   - a 503 carrying Retry-After ("refused for now, nothing done, come back in N s") is retried a
//     few times, honouring the delay, but only for GET, PUT and DELETE: they are idempotent (a PUT
//     sends the whole new value, a DELETE of a Deleting volume changes nothing).
//   - POST is never retried: a create whose answer was lost may have happened, and the caller is
//     the one who can tell (docs/cli.md, "Retries").
//   - transport failures are never retried: "cannot connect" should come back at once (exit 3).
import { retry } from '../lib/retry.js';
import { ApiError, ConnectionError } from './errors.js';
import { send, type TlsTrust } from '../lib/http-transport.js';

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** Query values; undefined and '' are left out (the API reads '' as "not given" anyway). */
export type Query = Record<string, string | number | boolean | undefined>;

export interface ApiClientOptions {
  /** http(s)://host:port, without /api/v2. */
  readonly endpoint: string;
  readonly token: string;
  /** Per attempt. */
  readonly requestTimeoutMs: number;
  /** Retries of a 503 with Retry-After (idempotent methods only). */
  readonly maxRetries?: number;
  /** A Retry-After longer than this is not waited for: the error is reported instead. */
  readonly maxRetryAfterSeconds?: number;
  /** Told before each retry (the CLI prints it on stderr). */
  readonly onRetry?: (message: string) => void;
  readonly userAgent?: string;
  /** How an https:// endpoint is verified (default: the system's CAs). */
  readonly tls?: TlsTrust;
}

export interface RequestOptions {
  readonly query?: Query;
  readonly body?: unknown;
  /** Sent as If-Match (wire-conventions §5): the API answers 412 when the record changed. */
  readonly ifMatch?: string;
}

const DEFAULT_MAX_RETRIES = 3;
const DEFAULT_MAX_RETRY_AFTER_SECONDS = 60;
const IDEMPOTENT: ReadonlySet<HttpMethod> = new Set(['GET', 'PUT', 'DELETE']);

/** The Retry-After of a 503 (the only answer worth retrying), else undefined. */
function retryAfterOf(err: unknown): number | undefined {
  return err instanceof ApiError && err.status === 503 ? err.retryAfterSeconds : undefined;
}

/** gRPC status names (wire-conventions §3), for error lines. */
const GRPC_NAMES: Readonly<Record<number, string>> = {
  1: 'Cancelled', 2: 'Unknown', 3: 'InvalidArgument', 4: 'DeadlineExceeded', 5: 'NotFound', 6: 'AlreadyExists',
  7: 'PermissionDenied', 8: 'ResourceExhausted', 9: 'FailedPrecondition', 10: 'Aborted', 11: 'OutOfRange',
  12: 'Unimplemented', 13: 'Internal', 14: 'Unavailable', 15: 'DataLoss', 16: 'Unauthenticated',
};

/**
 * Builds an API path with every interpolated value percent-encoded as one path segment:
 * apiPath`/projects/${project}/volumes/${uuid}`.
 */
export function apiPath(strings: TemplateStringsArray, ...values: (string | number)[]): string {
  return strings.reduce((path, part, i) => path + part + (i < values.length ? encodeURIComponent(String(values[i])) : ''), '');
}

export class ApiClient {
  /** http(s)://host:port/api/v2 */
  readonly baseUrl: string;

  constructor(private readonly options: ApiClientOptions) {
    this.baseUrl = `${options.endpoint.replace(/\/+$/, '')}/api/v2`;
  }

  get<T>(path: string, query?: Query): Promise<T> {
    return this.request<T>('GET', path, query === undefined ? {} : { query });
  }

  post<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>('POST', path, { body });
  }

  put<T>(path: string, body: unknown, ifMatch?: string): Promise<T> {
    return this.request<T>('PUT', path, ifMatch === undefined ? { body } : { body, ifMatch });
  }

  delete<T>(path: string, query?: Query): Promise<T> {
    return this.request<T>('DELETE', path, query === undefined ? {} : { query });
  }

  /** One API call; resolves with the parsed JSON body of a 2xx answer. */
  async request<T>(method: HttpMethod, path: string, options: RequestOptions = {}): Promise<T> {
    const url = this.urlOf(path, options.query);
    const maxRetries = IDEMPOTENT.has(method) ? (this.options.maxRetries ?? DEFAULT_MAX_RETRIES) : 0;
    const maxRetryAfter = this.options.maxRetryAfterSeconds ?? DEFAULT_MAX_RETRY_AFTER_SECONDS;
    try {
      return (await retry(() => this.attempt(method, url, options), {
        maxRetries,
        retryIf: (err) => (retryAfterOf(err) ?? Number.POSITIVE_INFINITY) <= maxRetryAfter,
        delayMs: (err) => (retryAfterOf(err) ?? 0) * 1000,
        onRetry: (err, _delay, retryNumber) => this.options.onRetry?.(`${err.message}; retrying in ${retryAfterOf(err)} s (${retryNumber}/${maxRetries})`),
      })) as T;
    } catch (err) {
      const retryAfter = retryAfterOf(err);
      if (retryAfter === undefined) throw err;
      const apiError = err as ApiError;
      throw new ApiError(`${apiError.message}; the server asks to retry after ${retryAfter} s`, apiError.status, apiError.grpcCode, retryAfter);
    }
  }

  private urlOf(path: string, query: Query | undefined): string {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== '') params.append(name, String(value));
    }
    const search = params.toString();
    return `${this.baseUrl}${path}${search ? `?${search}` : ''}`;
  }

  /**
   * A GET whose answer is a byte stream (the diagnostic bundle): resolves with the response once
   * its headers are in (within the request timeout); the body is the caller's to read, without
   * a deadline. An error answer is the API's error, as for request().
   */
  async download(path: string, query?: Query, signal?: AbortSignal): Promise<Response> {
    const url = this.urlOf(path, query);
    const headersIn = new AbortController();
    const timer = setTimeout(() => headersIn.abort(new DOMException('no headers in time', 'TimeoutError')), this.options.requestTimeoutMs);
    const abort = () => headersIn.abort(signal?.reason);
    signal?.addEventListener('abort', abort, { once: true });
    let response: Response;
    try {
      response = await send(url, { method: 'GET', headers: this.headers('*/*'), signal: headersIn.signal }, this.options.tls);
    } catch (err) {
      throw transportError(err, 'GET', url, this.options.requestTimeoutMs);
    } finally {
      clearTimeout(timer);
    }
    if (!response.ok) {
      signal?.removeEventListener('abort', abort);
      const text = await response.text();
      throw apiErrorOf(response, parseJson(text), text);
    }
    return response;
  }

  private headers(accept: string): Record<string, string> {
    return {
      Authorization: `Bearer ${this.options.token}`,
      Accept: accept,
      'User-Agent': this.options.userAgent ?? 'strata-cli',
    };
  }

  private async attempt(method: HttpMethod, url: string, options: RequestOptions): Promise<unknown> {
    const headers = this.headers('application/json');
    if (options.body !== undefined) headers['Content-Type'] = 'application/json';
    if (options.ifMatch !== undefined) headers['If-Match'] = `"${options.ifMatch}"`;

    let response: Response;
    let text: string;
    try {
      // A redirect is never followed: it would resend the token to wherever it points.
      response = await send(url, {
        method,
        headers,
        ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
        signal: AbortSignal.timeout(this.options.requestTimeoutMs),
      }, this.options.tls);
      text = await response.text();
    } catch (err) {
      throw transportError(err, method, url, this.options.requestTimeoutMs);
    }

    const body = parseJson(text);
    if (response.ok) {
      if (body === undefined) throw new ApiError(`${method} ${url}: the answer is not JSON (HTTP ${response.status})`, response.status, undefined, undefined);
      return body;
    }
    throw apiErrorOf(response, body, text);
  }
}

function parseJson(text: string): unknown {
  if (text.trim() === '') return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** The error body's message as one line, named by status (401/403 say what to do about them). */
function apiErrorOf(response: Response, body: unknown, text: string): ApiError {
  const wire = typeof body === 'object' && body !== null ? (body as { message?: unknown; error?: unknown; code?: unknown }) : undefined;
  const apiMessage = typeof wire?.message === 'string' && wire.message !== '' ? wire.message : typeof wire?.error === 'string' ? wire.error : undefined;
  const grpcCode = typeof wire?.code === 'number' ? wire.code : undefined;
  const retryAfterSeconds = parseRetryAfter(response.headers.get('retry-after'));
  const status = response.status;

  let message: string;
  if (apiMessage === undefined) {
    // Not the API's error body: a proxy, a load balancer, another service on that port.
    const snippet = text.replace(/\s+/g, ' ').trim().slice(0, 120);
    message = `HTTP ${status} ${response.statusText}${snippet ? `: ${snippet}` : ''} (not a Strata API answer; is --endpoint right?)`;
  } else {
    const grpcName = grpcCode === undefined ? '' : `, ${GRPC_NAMES[grpcCode] ?? `code ${grpcCode}`}`;
    const line = apiMessage.replace(/\s+/g, ' ').trim();
    if (status === 401) message = `authentication failed: ${line} (HTTP 401${grpcName}); check the token (--token-file, STRATA_TOKEN or ~/.config/strata/token)`;
    else if (status === 403) message = `permission denied: ${line} (HTTP 403${grpcName}); the token's roles do not allow this`;
    else message = `${line} (HTTP ${status}${grpcName})`;
  }
  return new ApiError(message, status, grpcCode, retryAfterSeconds);
}

/** Retry-After is delay-seconds or an HTTP date (RFC 9110 §10.2.3). */
function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/** Node's fetch reports transport failures as TypeError('fetch failed') with the socket error as cause. */
function transportError(err: unknown, method: HttpMethod, url: string, timeoutMs: number): ConnectionError {
  const base = url.replace(/\?.*$/, '');
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) {
    const outcome = method === 'GET' ? '' : '; the request may or may not have been applied';
    return new ConnectionError(`no answer from ${base} within ${timeoutMs / 1000} s${outcome}`);
  }
  const cause = err instanceof Error ? (err.cause as { code?: unknown; message?: unknown; errors?: { code?: unknown }[] } | undefined) : undefined;
  const code = typeof cause?.code === 'string' ? cause.code : typeof cause?.errors?.[0]?.code === 'string' ? cause.errors[0].code : undefined;
  const origin = new URL(url).origin;
  switch (code) {
    case 'ECONNREFUSED':
      return new ConnectionError(`cannot connect to ${origin}: connection refused (is the control plane running there? --endpoint, STRATA_ENDPOINT)`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new ConnectionError(`cannot connect to ${origin}: host not found (${code})`);
    case 'ECONNRESET':
    case 'UND_ERR_SOCKET':
      return new ConnectionError(`connection to ${origin} lost (${code})${method === 'GET' ? '' : '; the request may or may not have been applied'}`);
    default: {
      const detail = typeof cause?.message === 'string' && cause.message !== '' ? cause.message : err instanceof Error ? err.message : String(err);
      const tls = code !== undefined && /CERT|SSL|TLS|SELF_SIGNED|HOSTNAME|ALTNAME|VERIFY|ISSUER/i.test(code)
        ? ' (the server\'s certificate is not verified: give the cluster CA with --ca-file or STRATA_CA_FILE (the launcher and the control plane write it as ca.pem), or --insecure to skip verification)'
        : '';
      return new ConnectionError(`cannot connect to ${origin}: ${detail}${code && !detail.includes(code) ? ` (${code})` : ''}${tls}`);
    }
  }
}
