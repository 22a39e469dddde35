// The Koa application: request ids and logs, the error mapper (every failure becomes the JSON
// error body of wire-conventions §3 with the registry's status), routers, and the 404 fallback
// (an unknown path or method gets the JSON 404 body too, not Koa's plain text).
import { randomUUID } from 'node:crypto';
import Koa from 'koa';
import type Router from '@koa/router';
import { StrataError, toStrataError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';

export interface HttpAppOptions {
  /**
   * Runs before the routes of every /api request: brings the watch cache up to date with etcd
   * (WatchCache.sync), so everything a route reads from it is at least as new as the request.
   */
  readonly beforeApiRoutes?: () => Promise<void>;
}

export function createHttpApp(logger: Logger, routers: readonly Router[], options: HttpAppOptions = {}): Koa {
  const app = new Koa({ proxy: false });
  app.silent = true; // errors are logged by the mapper below, once

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
      // Internal errors are ours to fix: log them in full. 503s (transient states, etcd away) and
      // deliberate 500s like the unavailable federation service are part of the API's answers.
      if (error.code === 'INTERNAL') {
        logger.error({ err, requestId, method: ctx.method, path: ctx.path, code: error.code }, 'request failed');
      } else if (error.httpStatus >= 500) {
        logger.warn({ requestId, method: ctx.method, path: ctx.path, code: error.code, message: error.message }, 'request refused');
      }
    } finally {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
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

  for (const router of routers) {
    app.use(router.routes());
  }
  return app;
}
