// GET /api/v2/version: readable by any valid token (wire-conventions §4).
// Route pattern used by every resource: check params (400), then authenticate (401), then
// authorize (403) — `auth.require` does the last two — then call the domain service.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { z } from 'zod';
import { permissions } from '../auth/permissions.js';
import { route } from '../http/routes.js';

export const API_VERSION = 'v2.0';

export function createVersionRoutes(deps: { readonly auth: Authenticator }): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/version', { summary: 'The API version', response: z.object({ apiVersion: z.string() }) }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.authenticated);
    ctx.body = { apiVersion: API_VERSION };
  });
  return router;
}
