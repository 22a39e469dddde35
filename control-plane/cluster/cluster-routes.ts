// GET /api/v2/cluster (cluster read: it carries statistics) and GET /api/v2/clusterinfo (any
// valid token, the tenant view) — spec 4.4, wire-conventions §6.
// Route pattern: params (400; none here) → auth.require (401/403) → ClusterService.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { route } from '../http/routes.js';
import { clusterAnswer, clusterInfoAnswer } from './cluster-schema.js';
import type { ClusterService } from './cluster-service.js';

export interface ClusterRoutesDeps {
  readonly auth: Authenticator;
  readonly cluster: ClusterService;
}

export function createClusterRoutes(deps: ClusterRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/cluster', { summary: 'The cluster (spec 2.7)', response: clusterAnswer }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.cluster.cluster();
  });
  route(router, 'get', '/clusterinfo', { summary: 'The cluster, tenant view (spec 2.8)', response: clusterInfoAnswer }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.authenticated);
    ctx.body = await deps.cluster.clusterInfo();
  });
  return router;
}
