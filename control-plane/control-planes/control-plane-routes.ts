// GET /api/v2/controlPlanes (Strata extension; cluster role): the control-plane instances and
// which one is the active cluster manager. GET /healthz: liveness, no authentication.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { z } from 'zod';
import { permissions } from '../auth/permissions.js';
import { route } from '../http/routes.js';
import type { ControlPlaneStore } from './control-plane-store.js';

const controlPlanesAnswer = z.object({
  controlPlanes: z.array(z.object({
    instanceId: z.string(), hostname: z.string(), apiEndpoint: z.string(), grpcEndpoint: z.string(), version: z.string(), since: z.string(),
    isActiveClusterManager: z.boolean(),
  })),
});

export function createControlPlaneRoutes(deps: { readonly auth: Authenticator; readonly registry: ControlPlaneStore }): Router {
  const router = new Router();
  router.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  route(router, 'get', '/api/v2/controlPlanes', { summary: 'The control-plane instances (Strata extension)', response: controlPlanesAnswer }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    // apiScheme is for the control planes themselves (forwarding), not part of the answer.
    ctx.body = { controlPlanes: (await deps.registry.list()).map(({ apiScheme: _scheme, ...view }) => view) };
  });
  return router;
}
