// GET /api/v2/openapi.json: the OpenAPI 3.1 document of every route this control plane serves,
// generated (once, on first request) from the same routers the application runs, this route
// included. Any valid token may read it (docs/api.md, "OpenAPI document"): every /api request is
// authenticated from its headers first (issue 17), and the document ships in docs/openapi.json
// for whoever has no token.
import Router from '@koa/router';
import { z } from 'zod';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { route } from '../http/routes.js';
import { API_VERSION } from '../version/version-routes.js';
import { openApiDocument } from './openapi.js';

export interface OpenApiRoutesDeps {
  readonly auth: Authenticator;
  /** Every router of the application; read when the document is first asked for. */
  readonly routers: readonly Router[];
}

const openApiResponse = z.looseObject({ openapi: z.literal('3.1.0'), info: z.looseObject({}), paths: z.record(z.string(), z.looseObject({})) });

export function createOpenApiRoutes(deps: OpenApiRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  let document: string | undefined;
  route(router, 'get', '/openapi.json', { summary: 'This OpenAPI document', response: openApiResponse }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.authenticated);
    document ??= JSON.stringify(openApiDocument(deps.routers, { version: API_VERSION }), null, 2);
    ctx.type = 'application/json';
    ctx.body = document;
  });
  return router;
}
