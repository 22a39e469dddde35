// GET /api/v2/kernelCapabilities (a Strata extension; cluster read): what each server's kernel
// can do, as its agent measured it (docs/kernel-capabilities.md).
import Router from '@koa/router';
import { z } from 'zod';
import { KERNEL_CAPABILITIES } from '../../lib/contract/kernel-capabilities.js';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { route } from '../http/routes.js';
import type { KernelCapabilitiesService } from './kernel-capabilities-service.js';

const serverCapabilitiesAnswer = z.object({
  serverUUID: z.string(),
  name: z.string(),
  NodesUUIDs: z.array(z.string()),
  kernel: z.string(),
  measured: z.boolean(),
  capabilities: z.object(Object.fromEntries(KERNEL_CAPABILITIES.map((c) => [c, z.boolean()]))),
});
const kernelCapabilitiesAnswer = z.object({ servers: z.array(serverCapabilitiesAnswer) });

export function createKernelCapabilitiesRoutes(deps: { auth: Authenticator; capabilities: KernelCapabilitiesService }): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/kernelCapabilities', { summary: "What each server's kernel can do (Strata extension; docs/kernel-capabilities.md)", response: kernelCapabilitiesAnswer }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { servers: await deps.capabilities.list() };
  });
  return router;
}
