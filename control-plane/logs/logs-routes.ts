// GET /api/v2/logs (spec 4.5): the diagnostic bundle, a byte stream (docs/diagnostics.md).
// Route pattern: query (400) → auth.require (401/403; cluster administrators only: the bundle
// holds every server's logs and the cluster's records) → LogsService. Once the first byte is
// out the status is 200: a failure after that cuts the connection, so a client never takes a
// truncated archive for a whole one. A bundle of a server whose agent session is on another control
// plane is made there and streamed through (control-plane/agents/session-routing.ts).
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { tokenFromHeaders } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { answerForwarded, callerOf } from '../http/forwarding.js';
import { route } from '../http/routes.js';
import { ForwardedAnswer } from '../agents/session-routing.js';
import { bundleQuery, parseBundleQuery } from './logs-schema.js';
import type { LogsService } from './logs-service.js';

export interface LogsRoutesDeps {
  readonly auth: Authenticator;
  readonly logs: LogsService;
}

export function createLogsRoutes(deps: LogsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/logs', { summary: 'The diagnostic bundle of one server (spec 4.5)', query: bundleQuery, response: { binary: ['application/gzip', 'application/x-xz', 'application/x-tar'] } }, async (ctx) => {
    const request = parseBundleQuery(ctx.query);
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    const bundle = await deps.logs.open(request, tokenFromHeaders(ctx.headers), callerOf(ctx));
    if (bundle instanceof ForwardedAnswer) return answerForwarded(ctx, bundle);
    bundle.stream.once('error', () => ctx.res.destroy());
    ctx.status = 200;
    ctx.type = bundle.contentType;
    ctx.set('Content-Disposition', `attachment; filename="${bundle.filename}"`);
    ctx.set('Cache-Control', 'no-store');
    ctx.body = bundle.stream;
  });
  return router;
}
