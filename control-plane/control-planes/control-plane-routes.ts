// GET /api/v2/controlPlanes (Strata extension; cluster role): the control-plane instances and
// which one is the active cluster manager. GET /healthz: liveness, no authentication.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import type { ControlPlaneRegistry } from './control-plane-registry.js';

export function createControlPlaneRoutes(deps: { readonly auth: Authenticator; readonly registry: ControlPlaneRegistry }): Router {
  const router = new Router();
  router.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  router.get('/api/v2/controlPlanes', async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { controlPlanes: await deps.registry.list() };
  });
  return router;
}
