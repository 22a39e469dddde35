// GET /api/v2/servers and GET /api/v2/servers/{UUID} (spec 4.12): cluster read. POST
// /api/v2/servers: adds a server and its etcd member (cluster write; server-add.ts).
// Route pattern: params (400) → auth.require (401/403) → ServersService.
import Router from '@koa/router';
import { toStrataError } from '../../lib/errors.js';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import type { ServerAdder } from './server-add.js';
import { route } from '../http/routes.js';
import { addServerBody, parseAddServer, parseServerListQuery, serverAnswer, serverListAnswer, serverListQuery, serverParams } from './servers-schema.js';
import type { ServersService } from './servers-service.js';

export interface ServersRoutesDeps {
  readonly auth: Authenticator;
  readonly servers: ServersService;
  /** Without it, POST /servers is not served (read-only harnesses). */
  readonly adder?: ServerAdder;
}

export function createServersRoutes(deps: ServersRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/servers', { summary: 'List servers (spec 4.12)', query: serverListQuery, response: serverListAnswer }, async (ctx) => {
    const filters = parseServerListQuery(ctx.query);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { servers: await deps.servers.list(filters) };
  });
  const adder = deps.adder;
  if (adder) route(router, 'post', '/servers', { summary: 'Add a server and its etcd member', body: addServerBody, response: serverAnswer }, async (ctx) => {
    const input = parseAddServer(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    try {
      ctx.body = await deps.servers.get(await adder.add(input), { freshMembers: true });
    } catch (err) {
      // etcd refusing a reconfiguration for now (a member just joined or was promoted): retry.
      if (toStrataError(err).httpStatus === 503) ctx.set('Retry-After', '5');
      throw err;
    }
  });
  route(router, 'get', '/servers/:uuid', { summary: 'One server', params: serverParams, response: serverAnswer }, async (ctx) => {
    const uuid = ctx.params['uuid'] ?? '';
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.servers.get(uuid);
  });
  return router;
}
