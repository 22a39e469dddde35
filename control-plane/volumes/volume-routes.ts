// Volume routes (spec 4.11, wire-conventions §1, §4, §5): every route both unscoped
// (/api/v2/volumes…, projectName in body or query) and project-scoped
// (/api/v2/projects/{projectName}/volumes…, the path wins). A trailing slash with an empty id
// addresses one volume by name (`…/volumes/?name=X`): the router is strict about trailing
// slashes so that `/volumes` (a list) and `/volumes/` (one volume) stay different routes.
// Pattern: authentication (401, before any route: http/app.ts) → parameters (400) → permission
// on the project (403) → service. Where the request names no project (an unscoped UUID), a
// caller who may not read the volume's project gets the 404 an absent UUID gets: a tenant learns
// nothing about other projects' volumes (docs/api.md, "Order of checks").
import Router from '@koa/router';
import type { Context } from 'koa';
import { errors, toStrataError } from '../../lib/errors.js';
import type { Authenticator } from '../auth/authenticator.js';
import { DEFAULT_PROJECT, authorize, isAllowed, permissions, type Access } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { emptyAnswer, route, type RouteSchemas } from '../http/routes.js';
import {
  createVolumeSchema, listQuerySchema, parseCreateVolume, parseListQuery, parsePathProject, parsePathUuid, parseRollback, parseTargetQuery, parseUpdateVolume,
  rollbackSchema, targetQuerySchema, updateVolumeSchema, volumeAnswer, volumeConnectionAnswer, volumeListAnswer, volumePathParams,
} from './volume-schema.js';
import type { ProjectGuard, VolumeService, VolumeTarget } from './volume-service.js';

export interface VolumeRoutesDeps {
  readonly auth: Authenticator;
  readonly volumes: VolumeService;
}

const UNSCOPED = '/volumes';
const SCOPED = '/projects/:projectName/volumes';
/**
 * Retry-After of a create refused with 503 (no node Active, a clone's snapshot still Creating,
 * etcd away): an agent whose lease lapsed registers again as soon as etcd answers, so seconds.
 */
const CREATE_RETRY_AFTER_SECONDS = 2;

export function createVolumeRoutes(deps: VolumeRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2', strict: true });
  const both = (suffix: string) => [UNSCOPED + suffix, SCOPED + suffix];
  /** The definition of one of the paths: its path parameters follow from the path. */
  const on = (path: string, schemas: Omit<RouteSchemas, 'params'>): RouteSchemas => ({ ...schemas, params: volumePathParams(path) });
  const byQuery = targetQuerySchema;

  const guardOf = async (ctx: Context, access: Access, target: VolumeTarget): Promise<ProjectGuard> => {
    const principal = await deps.auth.authenticate(ctx.headers);
    return (project) => {
      // Called with the stored volume's project only when the request named none (resolve()).
      if (target.projectName === undefined && target.UUID !== undefined && !isAllowed(principal, permissions.projectRead(project))) {
        throw errors.notFound('volume', target.UUID);
      }
      authorize(principal, access === 'read' ? permissions.projectRead(project) : permissions.projectWrite(project));
    };
  };

  // ---- create ----
  for (const path of [...both(''), ...both('/')]) {
    route(router, 'post', path, on(path, { summary: 'Create a volume (spec 2.15)', body: createVolumeSchema, response: volumeAnswer }), async (ctx) => {
      const pathProject = projectOf(ctx);
      const body = parseCreateVolume(await readJsonBody(ctx), pathProject);
      await deps.auth.require(ctx.headers, permissions.projectWrite(body.projectName ?? DEFAULT_PROJECT));
      try {
        ctx.body = await deps.volumes.create(body);
      } catch (err) {
        // The error mapper writes the JSON body and status; the header set here stays with them.
        if (toStrataError(err).httpStatus === 503) ctx.set('Retry-After', String(CREATE_RETRY_AFTER_SECONDS));
        throw err;
      }
    });
  }

  // ---- list: projectName is mandatory unless the caller has a cluster role (spec §5.5) ----
  for (const path of both('')) {
    route(router, 'get', path, on(path, { summary: 'List volumes', query: listQuerySchema, response: volumeListAnswer }), async (ctx) => {
      const query = parseListQuery(ctx.query, projectOf(ctx));
      const principal = await deps.auth.authenticate(ctx.headers);
      if (query.projectName !== undefined) authorize(principal, permissions.projectRead(query.projectName));
      else if (!isAllowed(principal, permissions.clusterRead)) throw errors.invalid('invalid request: projectName is required unless the caller has a cluster role');
      ctx.body = { volumes: await deps.volumes.list(query) };
    });
  }

  // ---- one volume: by UUID, or by name with an empty id ----
  for (const path of both('/:uuid')) {
    route(router, 'get', path, on(path, { summary: 'One volume', query: byQuery, response: volumeAnswer }), async (ctx) => {
      const target = byUuid(ctx);
      ctx.body = await deps.volumes.get(target, await guardOf(ctx, 'read', target));
    });
  }
  for (const path of both('/')) {
    route(router, 'get', path, on(path, { summary: 'One volume by name (?name=)', query: byQuery, response: volumeAnswer }), async (ctx) => {
      const target = targetOf(ctx);
      ctx.body = await deps.volumes.get(target, await guardOf(ctx, 'read', target));
    });
  }

  // ---- connection info for hosts (a Strata extension; docs/volumes.md) ----
  for (const path of both('/:uuid/connection')) {
    route(router, 'get', path, on(path, { summary: 'How hosts connect to a volume (Strata extension)', query: byQuery, response: volumeConnectionAnswer }), async (ctx) => {
      const target = byUuid(ctx);
      ctx.body = await deps.volumes.connection(target, await guardOf(ctx, 'read', target));
    });
  }

  // ---- update ----
  for (const path of both('/:uuid')) {
    route(router, 'put', path, on(path, { summary: 'Update a volume (If-Match)', query: byQuery, body: updateVolumeSchema, response: emptyAnswer }), async (ctx) => {
      const body = parseUpdateVolume(await readJsonBody(ctx));
      const target = byUuid(ctx, body.projectName);
      await deps.volumes.update(target, body, await guardOf(ctx, 'write', target), ifMatch(ctx.headers));
      ctx.body = {};
    });
  }
  for (const path of [...both(''), ...both('/')]) {
    route(router, 'put', path, on(path, { summary: 'Update a volume by name or UUID in the query or body (If-Match)', query: byQuery, body: updateVolumeSchema, response: emptyAnswer }), async (ctx) => {
      const body = parseUpdateVolume(await readJsonBody(ctx));
      const target = targetOf(ctx, body);
      await deps.volumes.update(target, body, await guardOf(ctx, 'write', target), ifMatch(ctx.headers));
      ctx.body = {};
    });
  }

  // ---- delete ----
  for (const path of both('/:uuid')) {
    route(router, 'delete', path, on(path, { summary: 'Delete a volume (If-Match)', query: byQuery, response: emptyAnswer }), async (ctx) => {
      const target = byUuid(ctx);
      await deps.volumes.delete(target, await guardOf(ctx, 'write', target), ifMatch(ctx.headers));
      ctx.body = {};
    });
  }
  for (const path of [...both(''), ...both('/')]) {
    route(router, 'delete', path, on(path, { summary: 'Delete a volume by name (?name=) (If-Match)', query: byQuery, response: emptyAnswer }), async (ctx) => {
      const target = targetOf(ctx);
      await deps.volumes.delete(target, await guardOf(ctx, 'write', target), ifMatch(ctx.headers));
      ctx.body = {};
    });
  }

  // ---- rollback ----
  for (const path of both('/:uuid/rollback')) {
    route(router, 'put', path, on(path, { summary: 'Roll a volume back to a snapshot (If-Match)', query: byQuery, body: rollbackSchema, response: emptyAnswer }), async (ctx) => {
      const body = parseRollback(await readJsonBody(ctx));
      const target = byUuid(ctx, body.projectName);
      await deps.volumes.rollback(target, { UUID: body.srcSnapshotUUID, name: body.srcSnapshotName }, await guardOf(ctx, 'write', target), ifMatch(ctx.headers));
      ctx.body = {};
    });
  }

  return router;
}

/** The project of a project-scoped path, undefined on unscoped paths. */
function projectOf(ctx: Context): string | undefined {
  const raw = (ctx.params as Record<string, string | undefined>)['projectName'];
  return raw === undefined ? undefined : parsePathProject(raw);
}

/** `…/volumes/{UUID}`: the path's UUID (a name elsewhere is ignored), project path > body > query. */
function byUuid(ctx: Context, bodyProject?: string): VolumeTarget {
  const UUID = parsePathUuid((ctx.params as Record<string, string | undefined>)['uuid']);
  const query = parseTargetQuery(ctx.query);
  return { UUID, projectName: projectOf(ctx) ?? bodyProject ?? query.projectName };
}

/** `…/volumes/?name=X` (or a UUID in the query/body): identity fields, body before query. */
function targetOf(ctx: Context, body: { UUID?: string | undefined; name?: string | undefined; projectName?: string | undefined } = {}): VolumeTarget {
  const query = parseTargetQuery(ctx.query);
  const target: VolumeTarget = {
    UUID: body.UUID ?? query.UUID,
    name: body.name ?? query.name,
    projectName: projectOf(ctx) ?? body.projectName ?? query.projectName,
  };
  if (target.UUID === undefined && target.name === undefined) throw errors.invalid('invalid request: give the volume UUID (in the path) or its name (?name=)');
  return target;
}
