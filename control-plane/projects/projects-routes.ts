// POST|GET /api/v2/projects, GET|PUT|DELETE /api/v2/projects/{name} (wire-conventions §7).
// Route pattern: params and body (400) → auth.require (401/403) → ProjectsService.
// Permissions: create, update and delete need a cluster write role; GET of one project needs
// read access to it; the list shows a project token only its own projects.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { emptyAnswer, route } from '../http/routes.js';
import { createProjectBody, projectAnswer, projectListAnswer, projectParams, updateProjectBody, parseCreateProject, parsePathName, parseUpdateProject } from './projects-schema.js';
import type { ProjectsService } from './projects-service.js';
import { readScopeOf } from './read-scope.js';

export interface ProjectsRoutesDeps {
  readonly auth: Authenticator;
  readonly projects: ProjectsService;
}

export function createProjectsRoutes(deps: ProjectsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/projects', { summary: 'List the projects the caller may read', response: projectListAnswer }, async (ctx) => {
    const principal = await deps.auth.require(ctx.headers, permissions.authenticated);
    ctx.body = { projects: await deps.projects.list(readScopeOf(principal)) };
  });
  route(router, 'post', '/projects', { summary: 'Create a project', body: createProjectBody, response: projectAnswer }, async (ctx) => {
    const input = parseCreateProject(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    const project = await deps.projects.create(input);
    ctx.set('ETag', `"${project.ETag}"`);
    ctx.body = project;
  });
  route(router, 'get', '/projects/:name', { summary: 'One project', params: projectParams, response: projectAnswer }, async (ctx) => {
    const name = parsePathName(ctx.params['name'], 'project');
    await deps.auth.require(ctx.headers, permissions.projectRead(name));
    const project = await deps.projects.get(name);
    ctx.set('ETag', `"${project.ETag}"`);
    ctx.body = project;
  });
  route(router, 'put', '/projects/:name', { summary: 'Update a project (If-Match)', params: projectParams, body: updateProjectBody, response: emptyAnswer }, async (ctx) => {
    const name = parsePathName(ctx.params['name'], 'project');
    const input = parseUpdateProject(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    const etag = await deps.projects.update(name, input, ifMatch(ctx.headers));
    ctx.set('ETag', `"${etag}"`);
    ctx.body = {};
  });
  route(router, 'delete', '/projects/:name', { summary: 'Delete a project (If-Match)', params: projectParams, response: emptyAnswer }, async (ctx) => {
    const name = parsePathName(ctx.params['name'], 'project');
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    await deps.projects.delete(name, ifMatch(ctx.headers));
    ctx.body = {};
  });
  return router;
}
