// GET|POST /api/v2/adminEndpoints, GET|PUT|DELETE /api/v2/adminEndpoints/{port} (spec 4.2).
// Route pattern: params and body (400) → auth.require (401/403) → AdminEndpointsService.
// Reads need a cluster role, changes cluster write.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { queryValue, readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { emptyAnswer, route } from '../http/routes.js';
import {
  adminEndpointAnswer, adminEndpointListAnswer, adminEndpointListQuery, adminEndpointParams, createAdminEndpointBody,
  parseCreateAdminEndpoint, parsePort, parseUpdateAdminEndpoint, updateAdminEndpointBody,
} from './admin-endpoints-schema.js';
import type { AdminEndpointsService } from './admin-endpoints-service.js';

export interface AdminEndpointsRoutesDeps {
  readonly auth: Authenticator;
  readonly adminEndpoints: AdminEndpointsService;
}

export function createAdminEndpointsRoutes(deps: AdminEndpointsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/adminEndpoints', { summary: 'List admin endpoints (spec 4.2)', query: adminEndpointListQuery, response: adminEndpointListAnswer }, async (ctx) => {
    const raw = queryValue(ctx.query, 'port');
    // proto3 semantics: port 0 is "not given", i.e. no filter.
    const port = raw === undefined || raw.trim() === '0' ? undefined : parsePort(raw, 'query parameter port');
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { adminEndpoints: await deps.adminEndpoints.list(port) };
  });
  route(router, 'post', '/adminEndpoints', { summary: 'Create an admin endpoint', body: createAdminEndpointBody, response: adminEndpointAnswer }, async (ctx) => {
    const input = parseCreateAdminEndpoint(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    const endpoint = await deps.adminEndpoints.create(input);
    ctx.set('ETag', `"${endpoint.ETag}"`);
    ctx.body = endpoint;
  });
  route(router, 'get', '/adminEndpoints/:port', { summary: 'One admin endpoint', params: adminEndpointParams, response: adminEndpointAnswer }, async (ctx) => {
    const port = parsePort(ctx.params['port']);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    const endpoint = await deps.adminEndpoints.get(port);
    ctx.set('ETag', `"${endpoint.ETag}"`);
    ctx.body = endpoint;
  });
  route(router, 'put', '/adminEndpoints/:port', { summary: 'Replace an admin endpoint\'s addresses', params: adminEndpointParams, body: updateAdminEndpointBody, response: adminEndpointAnswer }, async (ctx) => {
    const port = parsePort(ctx.params['port']);
    const ips = parseUpdateAdminEndpoint(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    const endpoint = await deps.adminEndpoints.update(port, ips, ifMatch(ctx.headers));
    ctx.set('ETag', `"${endpoint.ETag}"`);
    ctx.body = endpoint;
  });
  route(router, 'delete', '/adminEndpoints/:port', { summary: 'Delete an admin endpoint', params: adminEndpointParams, response: emptyAnswer }, async (ctx) => {
    const port = parsePort(ctx.params['port']);
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    await deps.adminEndpoints.delete(port, ifMatch(ctx.headers));
    ctx.body = {};
  });
  return router;
}
