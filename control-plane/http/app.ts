// The Koa application: request ids and logs, the error mapper (every failure becomes the JSON
// error body of wire-conventions §3 with the registry's status), authentication of every /api
// request from its headers before any route reads a parameter or the body, routers, and the 404
// fallback (an unknown path or method gets the JSON 404 body too, not Koa's plain text). An error
// Koa meets after the middleware (writing the response) would get Koa's plain-text answer: it gets
// the JSON body as well (jsonOnError).
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import Koa from 'koa';
import type Router from '@koa/router';
import { StrataError, toStrataError } from '../../lib/errors.js';
import { writeError } from '../../lib/http-errors.js';
import type { Logger } from '../../lib/logger.js';
import { apiRequestDuration, apiRequests, routeLabel } from '../metrics/control-plane-metrics.js';

export interface HttpAppOptions {
  /**
   * Runs before the routes of every /api request: brings the watch cache up to date with etcd
   * (WatchCache.sync), so everything a route reads from it is at least as new as the request.
   */
  readonly beforeApiRoutes?: () => Promise<void>;
  /**
   * Runs for every /api request after beforeApiRoutes and before its route: a missing or bad
   * token is 401 before the route checks parameters or reads a byte of the body (issue 17).
   * Routes authenticate again for their principal; the Authenticator answers that from memory.
   */
  readonly authenticate?: (headers: IncomingHttpHeaders) => Promise<unknown>;
}

export function createHttpApp(logger: Logger, routers: readonly Router[], options: HttpAppOptions = {}): Koa {
  const app = new Koa({ proxy: false });
  app.silent = true; // errors are logged by the mapper below, once
  jsonOnError(app, logger);

  app.use(async (ctx, next) => {
    const requestId = randomUUID();
    const started = process.hrtime.bigint();
    ctx.set('X-Request-Id', requestId);
    try {
      await next();
      if (ctx.body === undefined && ctx.status === 404) throw new StrataError('ROUTE_NOT_FOUND', `no route for ${ctx.method} ${ctx.path}`);
    } catch (err) {
      const error = toStrataError(err);
      ctx.status = error.httpStatus;
      ctx.type = 'application/json';
      ctx.body = error.toWire();
      // A refused request whose body has not all arrived (a 401 before the body is read, a 415,
      // a body too large): close the connection instead of waiting for the rest of it.
      if (!ctx.req.complete) ctx.set('Connection', 'close');
      // Internal errors are ours to fix: log them in full. 503s (transient states, etcd away) and
      // deliberate 500s like the unavailable federation service are part of the API's answers.
      if (error.code === 'INTERNAL') {
        logger.error({ err, requestId, method: ctx.method, path: ctx.path, code: error.code }, 'request failed');
      } else if (error.httpStatus >= 500) {
        logger.warn({ requestId, method: ctx.method, path: ctx.path, code: error.code, message: error.message }, 'request refused');
      }
    } finally {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      // A request refused before its route ran (401) still counts under the route it addressed.
      const route = routeLabel((ctx as { _matchedRoute?: unknown })._matchedRoute ?? templateOf(routers, ctx.path, ctx.method));
      apiRequests.labels(route, ctx.method, String(ctx.status)).inc();
      apiRequestDuration.labels(route, ctx.method).observe(ms / 1000);
      logger.debug({ requestId, method: ctx.method, path: ctx.path, status: ctx.status, ms }, 'request');
    }
  });

  const beforeApiRoutes = options.beforeApiRoutes;
  if (beforeApiRoutes) {
    app.use(async (ctx, next) => {
      if (ctx.path.startsWith('/api/')) await beforeApiRoutes();
      await next();
    });
  }

  const authenticate = options.authenticate;
  if (authenticate) {
    app.use(async (ctx, next) => {
      if (ctx.path.startsWith('/api/')) await authenticate(ctx.headers);
      await next();
    });
  }

  for (const router of routers) {
    app.use(router.routes());
  }
  return app;
}

/**
 * Koa answers an error it meets after the middleware returned (a body it cannot serialize, say) with
 * its own ctx.onerror: text/plain. Answer with the JSON error body instead, keeping X-Request-Id;
 * once the response has begun nothing can be rewritten, and Koa's handler just drops it.
 */
function jsonOnError(app: Koa, logger: Logger): void {
  const koaOnError = app.context.onerror;
  app.context.onerror = function onerror(this: Koa.Context, err: unknown): void {
    if (err === null || err === undefined) return;
    if (this.headerSent || !this.writable) return koaOnError.call(this, err as Error);
    const error = toStrataError(err);
    const requestId = this.response.get('X-Request-Id');
    logger.error({ err, requestId, method: this.method, path: this.path, code: error.code }, 'response failed');
    for (const name of this.res.getHeaderNames()) this.res.removeHeader(name);
    writeError(this.res, error, requestId ? { 'X-Request-Id': requestId } : {});
  };
}

/** The route template a path and method address (the last matching layer, as koa-router picks). */
function templateOf(routers: readonly Router[], path: string, method: string): string | undefined {
  for (const router of routers) {
    const layers = router.match(path, method).pathAndMethod;
    const last = layers[layers.length - 1];
    if (last && typeof last.path === 'string') return last.path;
  }
  return undefined;
}
