// GET /api/v2/nodes and GET /api/v2/nodes/{UUID} (spec 4.8): cluster read.
// POST /api/v2/nodes/{UUID}/stop|start|restart|replace: node commands, system administrators
// only (cluster write); If-Match: the node's ETag (docs/node-operations.md).
// Route pattern: params and body (400) → auth.require (401/403) → NodesService / NodeCommandsService.
import Router from '@koa/router';
import { z } from 'zod';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { emptyAnswer, route } from '../http/routes.js';
import type { NodeCommandsService } from './node-commands-service.js';
import {
  nodeAnswer,
  nodeListAnswer,
  nodeListQuery,
  nodeParams,
  parseNodeListQuery,
  parseReplaceNode,
  parseRestartNode,
  parseStopNode,
  replaceSchema,
  restartSchema,
  stopSchema,
} from './nodes-schema.js';
import type { NodesService } from './nodes-service.js';

export interface NodesRoutesDeps {
  readonly auth: Authenticator;
  readonly nodes: NodesService;
  /** Absent (tests of the reads alone): the command routes answer the JSON 404. */
  readonly commands?: NodeCommandsService;
}

export function createNodesRoutes(deps: NodesRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/nodes', { summary: 'List nodes (spec 4.8)', query: nodeListQuery, response: nodeListAnswer }, async (ctx) => {
    const filter = parseNodeListQuery(ctx.query);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { nodes: await deps.nodes.list(filter) };
  });
  route(router, 'get', '/nodes/:uuid', { summary: 'One node', params: nodeParams, malformedParamIsNotFound: 'node', response: nodeAnswer }, async (ctx) => {
    const uuid = ctx.params['uuid'] ?? '';
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.nodes.get(uuid);
  });
  const commands = deps.commands;
  if (!commands) return router;
  // Each command: the path's UUID and the body (400), then cluster write (401/403), then the service.
  const command = <T>(
    verb: string,
    body: z.ZodType,
    parse: (body: Record<string, unknown>) => T,
    run: (uuid: string, input: T, etag: string | undefined) => Promise<void>,
  ) =>
    route(router, 'post', `/nodes/:uuid/${verb}`, { summary: `Node ${verb} (spec 4.8; docs/node-operations.md)`, params: nodeParams, body, response: emptyAnswer }, async (ctx) => {
      const uuid = (ctx.params['uuid'] ?? '').toLowerCase();
      const input = parse(await readJsonBody(ctx));
      await deps.auth.require(ctx.headers, permissions.clusterWrite);
      await run(uuid, input, ifMatch(ctx.headers));
      ctx.body = {};
    });
  command('stop', stopSchema, parseStopNode, (uuid, input, etag) => commands.stop(uuid, input, etag));
  // start takes an empty object; anything in it is ignored.
  command('start', z.object({}), () => undefined, (uuid, _input, etag) => commands.start(uuid, etag));
  command('restart', restartSchema, parseRestartNode, (uuid, input, etag) => commands.restart(uuid, input, etag));
  command('replace', replaceSchema, parseReplaceNode, (uuid, input, etag) => commands.replace(uuid, input, etag));
  return router;
}
