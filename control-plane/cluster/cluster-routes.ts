// GET /api/v2/cluster (cluster read: it carries statistics) and GET /api/v2/clusterinfo (any
// valid token, the tenant view) — spec 4.4, wire-conventions §6.
// Route pattern: params (400; none here) → auth.require (401/403) → ClusterService.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import type { ClusterService } from './cluster-service.js';

export interface ClusterRoutesDeps {
  readonly auth: Authenticator;
  readonly cluster: ClusterService;
}

export function createClusterRoutes(deps: ClusterRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  router.get('/cluster', async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.cluster.cluster();
  });
  router.get('/clusterinfo', async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.authenticated);
    ctx.body = await deps.cluster.clusterInfo();
  });
  return router;
}
