// GET /api/v2/events and GET /api/v2/projects/{projectName}/events (spec 4.5).
// Route pattern: params (400, 501) → auth.require (401/403) → EventsService (404 project).
// Permissions: the project-scoped route, and the unscoped route with projectName, need read
// access to that project (a project's viewer reads its project's events either way); the
// unscoped route without projectName lists cluster-wide events and needs cluster read.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { route } from '../http/routes.js';
import { eventPageAnswer, eventsParams, eventsQuery, parseEventsQuery } from './events-schema.js';
import type { EventsService } from './events-service.js';

export interface EventsRoutesDeps {
  readonly auth: Authenticator;
  readonly events: EventsService;
}

export function createEventsRoutes(deps: EventsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/events', { summary: 'The cluster event log (spec 4.5)', query: eventsQuery, response: eventPageAnswer }, async (ctx) => {
    const query = parseEventsQuery(ctx.query);
    await deps.auth.require(ctx.headers, query.projectName !== undefined ? permissions.projectRead(query.projectName) : permissions.clusterRead);
    ctx.body = await deps.events.list(query);
  });
  route(router, 'get', '/projects/:projectName/events', { summary: 'A project\'s events', params: eventsParams, query: eventsQuery.omit({ projectName: true }), response: eventPageAnswer }, async (ctx) => {
    const projectName = ctx.params['projectName'] ?? '';
    const query = parseEventsQuery(ctx.query, projectName);
    await deps.auth.require(ctx.headers, permissions.projectRead(projectName));
    ctx.body = await deps.events.list(query);
  });
  return router;
}
