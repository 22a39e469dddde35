// GET /api/v2/kernelCapabilities (a Strata extension; cluster read): what each server's kernel
// can do, as its agent measured it (docs/kernel-capabilities.md).
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import type { KernelCapabilitiesService } from './kernel-capabilities-service.js';

export function createKernelCapabilitiesRoutes(deps: { auth: Authenticator; capabilities: KernelCapabilitiesService }): Router {
  const router = new Router({ prefix: '/api/v2' });
  router.get('/kernelCapabilities', async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { servers: await deps.capabilities.list() };
  });
  return router;
}
