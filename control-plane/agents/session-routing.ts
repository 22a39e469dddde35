// Requests that need a server's agent session, from any control plane (issue 15; docs/diagnostics.md
// "Any control plane"). An agent keeps its gRPC session with one control plane; the LED command and
// the diagnostic bundle go down that session. A control plane that does not hold it forwards the
// caller's request, once validated, to the one that does (/strata/agent-sessions/<serverUUID> names
// it, /strata/control-planes/<instanceId> has its REST endpoint), with the caller's Authorization
// (the target authenticates and authorizes it again) and a marker header: a forwarded request is
// never forwarded again, so a stale record cannot make a loop; it is 503 where it lands. The answer
// comes back unchanged, streamed; a caller that goes away aborts the forwarded request. No retry
// here: a 503 tells the client to retry, and its retry looks the session up again.
import type { IncomingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import { errors } from '../../lib/errors.js';
import { send } from '../../lib/http-transport.js';
import type { Logger } from '../../lib/logger.js';
import type { AgentSessionRecord, ControlPlaneRecord } from '../../lib/records.js';

/** Set on a forwarded request: the instanceId of the control plane that forwarded it. */
export const FORWARDED_BY_HEADER = 'x-strata-forwarded-by';
/** The caller's headers a forward carries (the target authenticates, compares ETags, …). */
const REQUEST_HEADERS = ['authorization', 'if-match', 'content-type', 'accept'] as const;
/** The target's headers the caller gets back (Content-Length: the body is re-streamed). */
const ANSWER_HEADERS = ['content-type', 'content-disposition', 'etag', 'cache-control', 'retry-after'] as const;
/** Until the target's status line: longer than an agent command's own timeout (15 s). */
const ANSWER_TIMEOUT_MS = 30_000;

/** The REST request as the caller sent it, for a forward. */
export interface CallerRequest {
  readonly method: string;
  /** Path and query, as the target should get them. */
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  /** The request body (JSON), when it has one. */
  readonly body?: string;
  /** Aborts when the caller goes away. */
  readonly signal: AbortSignal;
}

/** The answer of the control plane that holds the session: the route sends it as it is. */
export class ForwardedAnswer {
  constructor(
    readonly instanceId: string,
    readonly status: number,
    readonly headers: Readonly<Record<string, string>>,
    readonly body: Readable | null,
  ) {}
}

export interface SessionRoutingDeps {
  readonly sessions: { isConnected(serverUUID: string): boolean };
  readonly store: { locate(serverUUID: string): Promise<AgentSessionRecord | null> };
  readonly registry: { get(instanceId: string): Promise<ControlPlaneRecord | null> };
  readonly instanceId: string;
  /** The cluster CA (PEM): what a control plane's issued REST certificate is verified with. */
  readonly clusterCa: string | undefined;
  readonly logger: Logger;
}

export class SessionRouting {
  constructor(private readonly deps: SessionRoutingDeps) {}

  /**
   * Nothing when the server's agent session is on this control plane (act here); else the answer
   * of the control plane that holds it, to `caller`'s request. 503 when no control plane holds it,
   * when the request was already forwarded once, or when the holder cannot be reached.
   */
  async elsewhere(serverUUID: string, caller: CallerRequest): Promise<ForwardedAnswer | undefined> {
    if (this.deps.sessions.isConnected(serverUUID)) return undefined;
    const notHere = `the agent of server ${serverUUID} is not connected to this control plane`;
    const forwardedBy = caller.headers[FORWARDED_BY_HEADER];
    if (forwardedBy !== undefined) throw errors.unavailable(`${notHere} (control plane ${String(forwardedBy)} forwarded the request here); retry once it reconnects`);
    const holder = await this.deps.store.locate(serverUUID);
    if (!holder || holder.instanceId === this.deps.instanceId) throw errors.unavailable(`the agent of server ${serverUUID} is not connected to any control plane; retry once it reconnects`);
    const plane = await this.deps.registry.get(holder.instanceId);
    if (!plane) throw errors.unavailable(`${notHere}, and control plane ${holder.instanceId}, which holds its session, is not registered; retry`);
    return this.forward(plane, caller);
  }

  private async forward(plane: ControlPlaneRecord, caller: CallerRequest): Promise<ForwardedAnswer> {
    const url = `${plane.apiScheme ?? 'https'}://${plane.apiEndpoint}${caller.url}`;
    const headers: Record<string, string> = { [FORWARDED_BY_HEADER]: this.deps.instanceId };
    for (const name of REQUEST_HEADERS) {
      const value = caller.headers[name];
      if (typeof value === 'string') headers[name] = value;
    }
    const abort = new AbortController();
    const stop = () => abort.abort(caller.signal.reason);
    caller.signal.addEventListener('abort', stop, { once: true });
    const timer = setTimeout(() => abort.abort(new Error(`no answer in ${ANSWER_TIMEOUT_MS / 1000} s`)), ANSWER_TIMEOUT_MS);
    const log = this.deps.logger.child({ forwardTo: plane.instanceId, url: caller.url });
    let res: Response;
    try {
      res = await send(url, { method: caller.method, headers, ...(caller.body === undefined ? {} : { body: caller.body }), signal: abort.signal }, { ca: this.deps.clusterCa });
    } catch (err) {
      caller.signal.removeEventListener('abort', stop);
      const cause = abort.signal.aborted ? (abort.signal.reason as Error) : ((err as Error).cause as Error | undefined) ?? (err as Error);
      log.warn({ err: cause?.message }, 'forwarded request failed');
      throw errors.unavailable(`control plane ${plane.instanceId} (${plane.apiEndpoint}), which holds the agent session, did not answer: ${cause?.message ?? 'unknown error'}; retry`, err);
    } finally {
      clearTimeout(timer);
    }
    log.debug({ status: res.status }, 'forwarded request answered');
    const answer: Record<string, string> = {};
    for (const name of ANSWER_HEADERS) {
      const value = res.headers.get(name);
      if (value !== null) answer[name] = value;
    }
    const body = res.body ? Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>) : null;
    // The caller's abort matters while the body streams; an answer without one is complete.
    if (body) body.once('close', () => caller.signal.removeEventListener('abort', stop));
    else caller.signal.removeEventListener('abort', stop);
    return new ForwardedAnswer(plane.instanceId, res.status, answer, body);
  }
}

/** `url` with one query parameter set (a forward names what the caller left to a default). */
export function withQueryParam(url: string, name: string, value: string): string {
  const parsed = new URL(url, 'http://forward.invalid');
  parsed.searchParams.set(name, value);
  return `${parsed.pathname}${parsed.search}`;
}
