// Snapshot routes, project-scoped only (wire-conventions §4, §7):
//   POST   /api/v2/projects/{p}/snapshots             create (project write)
//   GET    /api/v2/projects/{p}/snapshots             list {snapshots: [...]} (project read)
//   GET    /api/v2/projects/{p}/snapshots/?Name=X     one snapshot by name (trailing slash)
//   GET    /api/v2/projects/{p}/snapshots/{UUID}      one snapshot
//   DELETE /api/v2/projects/{p}/snapshots/{UUID}      {} (project write; If-Match honoured)
//   DELETE /api/v2/projects/{p}/snapshots/?name=X     {} by name (lower-case n)
// Route pattern: params (400) → auth.require (401/403) → SnapshotService.
import Router from '@koa/router';
import type { Context } from 'koa';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { emptyAnswer, route } from '../http/routes.js';
import {
  createSnapshotBody, parseCreateSnapshot, parseDeleteAddress, parseGetAddress, parseListQuery, parseProjectParam, snapshotAnswer, snapshotCollectionAnswer,
  snapshotDeleteQuery, snapshotGetQuery, snapshotListQuery, snapshotParams, snapshotsParams,
} from './snapshot-schema.js';
import type { SnapshotService } from './snapshot-service.js';

export interface SnapshotRoutesDeps {
  readonly auth: Authenticator;
  readonly snapshots: SnapshotService;
}

const COLLECTION = '/projects/:project/snapshots';
const ITEM = '/projects/:project/snapshots/:uuid';

/** `…/snapshots/` (trailing slash, empty identifier) addresses one snapshot by name. */
const isByName = (ctx: Context) => ctx.path.endsWith('/');

export function createSnapshotRoutes(deps: SnapshotRoutesDeps): Router {
  // Not strict: COLLECTION matches with and without the trailing slash; handlers tell them apart.
  const router = new Router({ prefix: '/api/v2' });

  route(router, 'post', COLLECTION, { summary: 'Create a snapshot of a volume', params: snapshotsParams, body: createSnapshotBody, response: snapshotAnswer }, async (ctx) => {
    const project = parseProjectParam(ctx.params['project']);
    const input = parseCreateSnapshot(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.projectWrite(project));
    ctx.body = await deps.snapshots.create(project, input);
  });

  route(router, 'get', COLLECTION, { summary: 'List snapshots', trailingSlash: 'One snapshot by name (?Name=, capital N)', params: snapshotsParams, query: snapshotListQuery, response: snapshotCollectionAnswer }, async (ctx) => {
    const project = parseProjectParam(ctx.params['project']);
    if (isByName(ctx)) {
      const address = parseGetAddress(undefined, ctx.query);
      await deps.auth.require(ctx.headers, permissions.projectRead(project));
      ctx.body = await deps.snapshots.get(project, address);
      return;
    }
    const filter = parseListQuery(ctx.query);
    await deps.auth.require(ctx.headers, permissions.projectRead(project));
    ctx.body = { snapshots: await deps.snapshots.list(project, filter) };
  });

  route(router, 'get', ITEM, { summary: 'One snapshot', params: snapshotParams, query: snapshotGetQuery, response: snapshotAnswer }, async (ctx) => {
    const project = parseProjectParam(ctx.params['project']);
    const address = parseGetAddress(ctx.params['uuid'], ctx.query);
    await deps.auth.require(ctx.headers, permissions.projectRead(project));
    ctx.body = await deps.snapshots.get(project, address);
  });

  const remove = async (ctx: Context, uuid: string | undefined) => {
    const project = parseProjectParam(ctx.params['project']);
    const address = parseDeleteAddress(uuid, ctx.query);
    const expected = ifMatch(ctx.headers);
    await deps.auth.require(ctx.headers, permissions.projectWrite(project));
    await deps.snapshots.delete(project, address, expected);
    ctx.body = {};
  };
  // With or without the trailing slash, a DELETE on the collection addresses one snapshot by name.
  route(router, 'delete', COLLECTION, { summary: 'Delete a snapshot by name (?name=, lower-case n)', trailingSlash: 'Delete a snapshot by name (?name=, lower-case n)', params: snapshotsParams, query: snapshotDeleteQuery, response: emptyAnswer }, async (ctx) => remove(ctx, undefined));
  route(router, 'delete', ITEM, { summary: 'Delete a snapshot (If-Match)', params: snapshotParams, query: snapshotDeleteQuery, response: emptyAnswer }, async (ctx) => remove(ctx, ctx.params['uuid']));

  return router;
}
