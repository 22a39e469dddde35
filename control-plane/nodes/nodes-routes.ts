// GET /api/v2/nodes and GET /api/v2/nodes/{UUID} (spec 4.8): cluster read.
// Route pattern: params (400) → auth.require (401/403) → NodesService.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { route } from '../http/routes.js';
import { nodeAnswer, nodeListAnswer, nodeListQuery, nodeParams, parseNodeListQuery } from './nodes-schema.js';
import type { NodesService } from './nodes-service.js';

export interface NodesRoutesDeps {
  readonly auth: Authenticator;
  readonly nodes: NodesService;
}

export function createNodesRoutes(deps: NodesRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/nodes', { summary: 'List nodes (spec 4.8)', query: nodeListQuery, response: nodeListAnswer }, async (ctx) => {
    const filter = parseNodeListQuery(ctx.query);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { nodes: await deps.nodes.list(filter) };
  });
  route(router, 'get', '/nodes/:uuid', { summary: 'One node', params: nodeParams, malformedParamIsNotFound: 'node', response: nodeAnswer }, async (ctx) => {
    const uuid = ctx.params['uuid'] ?? '';
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.nodes.get(uuid);
  });
  return router;
}
