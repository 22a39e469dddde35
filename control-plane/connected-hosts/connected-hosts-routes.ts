// GET /api/v2/connectedHosts and GET /api/v2/connectedHosts/{hostNQN} (spec 4.7): cluster read.
// Route pattern: params (400) → auth.require (401/403) → ConnectedHostsService (404).
// The hostNQN query of the list is ignored, as the spec says: all hosts are returned.
// Identifiers are typed: the path's host NQN is at most 223 bytes (NVMe's NQN limit) and the
// volumeUUID query a UUID; a malformed one is the 404 the spec gives for an absent one.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { z } from 'zod';
import { NQN_MAX_BYTES } from '../../lib/contract/nqn.js';
import { uuidSchema } from '../../lib/contract/uuid.js';
import { errors } from '../../lib/errors.js';
import { queryValue } from '../http/body.js';
import { optional } from '../http/lenient.js';
import { route } from '../http/routes.js';
import type { ConnectedHostsService } from './connected-hosts-service.js';

export interface ConnectedHostsRoutesDeps {
  readonly auth: Authenticator;
  readonly connectedHosts: ConnectedHostsService;
}

/** A host NQN as the path carries it: 1 to 223 bytes (NVMe base 2.0, 4.5). */
const hostNqnParam = z.string().min(1).refine((v) => Buffer.byteLength(v, 'utf8') <= NQN_MAX_BYTES, `must be at most ${NQN_MAX_BYTES} bytes`).meta({ maxLength: NQN_MAX_BYTES });
const listQuery = z.object({
  volumeUUID: optional(uuidSchema),
  hostNQN: optional(z.string().meta({ description: 'ignored: every host is returned (spec 4.7)' })),
});
const connectedHostAnswer = z.object({
  hostNQN: z.string(),
  iPAddress: z.string(),
  hostname: z.string(),
  volumeUUIDs: z.array(z.string()),
  connectedNodesUUID: z.array(z.string()),
  unconnectedNodesUUID: z.array(z.string()),
  hostNQNSource: z.enum(['acl', 'discovery', 'unknown']).meta({ description: 'Strata extension: how the host NQN is known (docs/datapath.md)' }),
});

export function createConnectedHostsRoutes(deps: ConnectedHostsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/connectedHosts', { summary: 'List connected hosts (spec 4.7)', query: listQuery, response: z.object({ connectedHosts: z.array(connectedHostAnswer) }) }, async (ctx) => {
    const raw = queryValue(ctx.query, 'volumeUUID');
    const typed = listQuery.shape.volumeUUID.safeParse(raw);
    if (!typed.success) throw errors.notFound('volume', raw ?? '');
    const volumeUUID = typed.data;
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { connectedHosts: await deps.connectedHosts.list(volumeUUID === undefined ? {} : { volumeUUID }) };
  });
  route(router, 'get', '/connectedHosts/:hostNQN', { summary: 'One connected host', params: z.object({ hostNQN: hostNqnParam }), malformedParamIsNotFound: 'connected host', response: connectedHostAnswer }, async (ctx) => {
    const hostNQN = ctx.params['hostNQN'] ?? '';
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.connectedHosts.get(hostNQN);
  });
  return router;
}
