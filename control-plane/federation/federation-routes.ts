// Cluster federation (spec 4.3, §7): listed by the spec as reserved and currently unavailable.
// Every route authenticates first (401 is the one error every row lists), then validates its
// input (400 where the row lists it), then answers 500 INTERNAL with a message saying the
// federation service is unavailable (§7: "federation operations report an internal error of
// the federation service").
//
// Two rows list no 500. GET /api/v2/clusters answers the truth, `{clusters: []}`: no cluster is
// attached. GET /api/v2/cf-service-credentials has no truthful answer (there is no federation
// key, and an empty one would be imported by a federation client as if it were real), so it
// answers 500 like the others; §4 allows 500 on every route.
//
// Roles: reads need a cluster role, attach/detach cluster write, login any valid token.
import Router from '@koa/router';
import { isIP } from 'node:net';
import type { Context } from 'koa';
import { StrataError, errors } from '../../lib/errors.js';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions, type Permission } from '../auth/permissions.js';
import { queryValue, readJsonBody } from '../http/body.js';
import { z } from 'zod';
import { uuidSchema } from '../../lib/contract/uuid.js';
import { route } from '../http/routes.js';

export const FEDERATION_UNAVAILABLE = 'the cluster federation service is unavailable: cluster federation is reserved for future use and not offered by this release';

export interface FederationRoutesDeps {
  readonly auth: Authenticator;
}

const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** `<host>:<port>`: a hostname, an IPv4 address or a bracketed IPv6 address, and a port 1..65535. */
export function isHostPort(value: string): boolean {
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(value);
  if (!match) return false;
  const port = Number(match[3]);
  if (port < 1 || port > 65535) return false;
  if (match[1] !== undefined) return isIP(match[1]) === 6;
  return isIP(match[2]!) === 4 || HOSTNAME.test(match[2]!);
}

function unavailable(): StrataError {
  return new StrataError('FEDERATION_UNAVAILABLE', FEDERATION_UNAVAILABLE);
}

/** Every federation route but GET /clusters answers 500 (FEDERATION_UNAVAILABLE); the 200 shapes are the spec's. */
const cidParams = z.object({ cid: uuidSchema });
const workflowParams = z.object({ workflowId: uuidSchema });

export function createFederationRoutes(deps: FederationRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  const authorize = (ctx: Context, permission: Permission) => deps.auth.require(ctx.headers, permission);

  route(router, 'get', '/cf-service-credentials', { summary: 'Federation: service credentials (unavailable: 500)', response: z.object({ pubKeyId: z.string(), pubKey: z.string() }) }, async (ctx) => {
    await authorize(ctx, permissions.clusterRead);
    throw unavailable();
  });
  route(router, 'post', '/cflogin', { summary: 'Federation: login (unavailable: 500)', body: z.object({}), response: z.object({ tokenType: z.string(), expiresIn: z.number(), idToken: z.string() }) }, async (ctx) => {
    await authorize(ctx, permissions.authenticated);
    await readJsonBody(ctx);
    throw unavailable();
  });
  route(router, 'get', '/clusters', { summary: 'Federation: attached clusters (none)', response: z.object({ clusters: z.array(z.unknown()) }) }, async (ctx) => {
    await authorize(ctx, permissions.clusterRead);
    ctx.body = { clusters: [] };
  });
  route(router, 'post', '/clusters', { summary: 'Federation: attach a cluster (unavailable: 500)', body: z.object({ apiEndpoint: z.string().meta({ description: '<host>:<port>' }) }), response: z.object({ workflowId: z.string() }) }, async (ctx) => {
    await authorize(ctx, permissions.clusterWrite);
    const body = await readJsonBody(ctx);
    const apiEndpoint = body['apiEndpoint'];
    if (typeof apiEndpoint !== 'string' || !isHostPort(apiEndpoint.trim())) {
      throw errors.invalid('invalid request: apiEndpoint is required, in the form <host>:<port>');
    }
    throw unavailable();
  });
  route(router, 'delete', '/clusters/:cid', { summary: 'Federation: detach a cluster (unavailable: 500)', params: cidParams, response: z.object({}) }, async (ctx) => {
    await authorize(ctx, permissions.clusterWrite);
    throw unavailable();
  });
  route(router, 'get', '/workflows', { summary: 'Federation: workflows (unavailable: 500)', query: z.object({ pageSize: z.string().optional(), nextPageToken: z.string().optional() }), response: z.object({ workflows: z.array(z.unknown()), nextPageToken: z.string() }) }, async (ctx) => {
    await authorize(ctx, permissions.clusterRead);
    const pageSize = queryValue(ctx.query, 'pageSize');
    if (pageSize !== undefined && !(/^\d{1,10}$/.test(pageSize.trim()) && Number(pageSize) <= 2_147_483_647)) {
      throw errors.invalid('query parameter pageSize must be a non-negative integer');
    }
    queryValue(ctx.query, 'nextPageToken'); // a repeated token is a 400 like any repeated parameter
    throw unavailable();
  });
  route(router, 'get', '/workflows/:workflowId', { summary: 'Federation: one workflow (unavailable: 500)', params: workflowParams, response: z.object({ workflow: z.unknown() }) }, async (ctx) => {
    await authorize(ctx, permissions.clusterRead);
    throw unavailable();
  });
  return router;
}
