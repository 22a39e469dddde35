// TLS on NVMe/TCP (docs/nvme-tcp-tls.md; a Strata extension, no LightOS counterpart):
//   GET /api/v2/cluster/nvmeTcpTls                    ({mode}: Required or Disabled; cluster read)
//   POST /api/v2/cluster/nvmeTcpTls/enable|disable    (cluster write)
//   POST|GET /api/v2/tlsHosts, GET|DELETE /api/v2/tlsHosts/{name}   (hosts and their PSKs; no PSK in answers)
//   GET|PUT /api/v2/tlsHostPSKs/{name}                (the PSK: read one, rotate; cluster write)
// Route pattern: params and body (400) → auth.require (401/403) → NvmeTcpTlsService.
import Router from '@koa/router';
import { z } from 'zod';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { emptyAnswer, route } from '../http/routes.js';
import { hostNqnSchema } from '../../lib/contract/nqn.js';
import { checkHostNqn } from '../in-band-auth/in-band-auth-service.js';
import { objectName, parsePathName } from '../projects/projects-schema.js';
import { checkPsk, type NvmeTcpTlsService } from './nvme-tcp-tls-service.js';

export interface NvmeTcpTlsRoutesDeps {
  readonly auth: Authenticator;
  readonly tls: NvmeTcpTlsService;
}

const given = (body: Record<string, unknown>, field: string): unknown => (body[field] === null ? undefined : body[field]);

const hostParams = z.object({ name: objectName });
const tlsHostAnswer = z.object({
  UUID: z.string(),
  name: z.string(),
  hostNQN: z.string(),
  hasPSK: z.boolean(),
  pskUpdatedAt: z.string(),
  creationTime: z.string(),
  ETag: z.string(),
});

export function createNvmeTcpTlsRoutes(deps: NvmeTcpTlsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  const hostName = (raw: string | undefined) => parsePathName(raw, 'TLS host');

  route(router, 'get', '/cluster/nvmeTcpTls', { summary: 'Whether volume ports require TLS on NVMe/TCP (a Strata extension)', response: z.object({ mode: z.enum(['Required', 'Disabled']) }) }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { mode: await deps.tls.mode() };
  });
  for (const action of ['enable', 'disable'] as const) {
    route(router, 'post', `/cluster/nvmeTcpTls/${action}`, { summary: `${action === 'enable' ? 'Require' : 'Stop requiring'} TLS (PSK per host) on every volume port`, body: z.object({}), response: emptyAnswer }, async (ctx) => {
      await readJsonBody(ctx);
      const principal = await deps.auth.require(ctx.headers, permissions.clusterWrite);
      await deps.tls.setRequired(action === 'enable', principal.subject);
      ctx.body = {};
    });
  }
  route(router, 'get', '/tlsHosts', { summary: 'Hosts that may connect over TLS (no PSKs)', response: z.object({ tlsHosts: z.array(tlsHostAnswer) }) }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { tlsHosts: await deps.tls.list() };
  });
  route(router, 'post', '/tlsHosts', { summary: 'A host that may connect over TLS: its NQN and configured PSK', body: z.object({ name: objectName, hostNQN: hostNqnSchema, psk: z.string() }), response: tlsHostAnswer }, async (ctx) => {
    const body = await readJsonBody(ctx);
    const input = {
      name: parsePathName(typeof body['name'] === 'string' ? body['name'] : undefined, 'TLS host'),
      hostNQN: checkHostNqn(given(body, 'hostNQN')),
      psk: checkPsk(given(body, 'psk')),
    };
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    ctx.body = await deps.tls.create(input);
  });
  route(router, 'get', '/tlsHosts/:name', { summary: 'One TLS host (no PSK)', params: hostParams, response: tlsHostAnswer }, async (ctx) => {
    const name = hostName(ctx.params['name']);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.tls.get(name);
  });
  route(router, 'delete', '/tlsHosts/:name', { summary: 'Remove a TLS host (its keys leave every node)', params: hostParams, response: emptyAnswer }, async (ctx) => {
    const name = hostName(ctx.params['name']);
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    await deps.tls.delete(name, ifMatch(ctx.headers));
    ctx.body = {};
  });
  route(router, 'get', '/tlsHostPSKs/:name', { summary: "A TLS host's PSK (one host at a time; never in a list)", params: hostParams, response: z.object({ name: z.string(), hostNQN: z.string(), psk: z.string() }) }, async (ctx) => {
    const name = hostName(ctx.params['name']);
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    ctx.body = await deps.tls.psk(name);
  });
  route(router, 'put', '/tlsHostPSKs/:name', { summary: "Rotate a TLS host's PSK", params: hostParams, body: z.object({ psk: z.string() }), response: emptyAnswer }, async (ctx) => {
    const name = hostName(ctx.params['name']);
    const psk = checkPsk(given(await readJsonBody(ctx), 'psk'));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    await deps.tls.rotate(name, psk, ifMatch(ctx.headers));
    ctx.body = {};
  });
  return router;
}
