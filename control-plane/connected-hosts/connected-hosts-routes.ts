// GET /api/v2/connectedHosts and GET /api/v2/connectedHosts/{hostNQN} (spec 4.7): cluster read.
// Route pattern: params (400) → auth.require (401/403) → ConnectedHostsService (404).
// The hostNQN query of the list is ignored, as the spec says: all hosts are returned.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { queryValue } from '../http/body.js';
import type { ConnectedHostsService } from './connected-hosts-service.js';

export interface ConnectedHostsRoutesDeps {
  readonly auth: Authenticator;
  readonly connectedHosts: ConnectedHostsService;
}

export function createConnectedHostsRoutes(deps: ConnectedHostsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  router.get('/connectedHosts', async (ctx) => {
    const volumeUUID = queryValue(ctx.query, 'volumeUUID');
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { connectedHosts: await deps.connectedHosts.list(volumeUUID === undefined ? {} : { volumeUUID }) };
  });
  router.get('/connectedHosts/:hostNQN', async (ctx) => {
    const hostNQN = ctx.params['hostNQN'] ?? '';
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.connectedHosts.get(hostNQN);
  });
  return router;
}
