// GET /api/v2/servers and GET /api/v2/servers/{UUID} (spec 4.12): cluster read.
// Route pattern: params (400) → auth.require (401/403) → ServersService.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { parseServerListQuery } from './servers-schema.js';
import type { ServersService } from './servers-service.js';

export interface ServersRoutesDeps {
  readonly auth: Authenticator;
  readonly servers: ServersService;
}

export function createServersRoutes(deps: ServersRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  router.get('/servers', async (ctx) => {
    const filters = parseServerListQuery(ctx.query);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { servers: await deps.servers.list(filters) };
  });
  router.get('/servers/:uuid', async (ctx) => {
    const uuid = ctx.params['uuid'] ?? '';
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.servers.get(uuid);
  });
  return router;
}
