// POST|GET /api/v2/projects/{p}/credentials, GET|DELETE /api/v2/projects/{p}/credentials/{name}
// (wire-conventions §6). Route pattern: params and body (400) → auth.require (401/403) →
// CredentialsService.
//
// Permission: the project's admin (or a cluster admin), for reads too: who may sign in to a
// project is the admin's business. Credentials of the `system` project need a cluster admin:
// a system credential can mint any role, cluster-admin included.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { SYSTEM_PROJECT, permissions, type Permission } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { parsePathName } from '../projects/projects-schema.js';
import { emptyAnswer, route } from '../http/routes.js';
import { createCredentialBody, credentialAnswer, credentialListAnswer, credentialParams, credentialsParams, parseCreateCredential, parseCredentialName } from './credentials-schema.js';
import type { CredentialsService } from './credentials-service.js';

export interface CredentialsRoutesDeps {
  readonly auth: Authenticator;
  readonly credentials: CredentialsService;
}

export function credentialsPermission(project: string): Permission {
  return project === SYSTEM_PROJECT ? permissions.clusterWrite : permissions.projectWrite(project);
}

export function createCredentialsRoutes(deps: CredentialsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/projects/:project/credentials', { summary: 'A project\'s credentials (wire-conventions §6)', params: credentialsParams, response: credentialListAnswer }, async (ctx) => {
    const project = parsePathName(ctx.params['project'], 'project');
    await deps.auth.require(ctx.headers, credentialsPermission(project));
    ctx.body = { credentials: await deps.credentials.list(project) };
  });
  route(router, 'post', '/projects/:project/credentials', { summary: 'Add a credential (an RS256 public key)', params: credentialsParams, body: createCredentialBody, response: credentialAnswer }, async (ctx) => {
    const project = parsePathName(ctx.params['project'], 'project');
    const input = parseCreateCredential(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, credentialsPermission(project));
    const { credential, etag } = await deps.credentials.create(project, input);
    ctx.set('ETag', `"${etag}"`);
    ctx.body = credential;
  });
  route(router, 'get', '/projects/:project/credentials/:name', { summary: 'One credential', params: credentialParams, response: credentialAnswer }, async (ctx) => {
    const project = parsePathName(ctx.params['project'], 'project');
    const name = parseCredentialName(ctx.params['name']);
    await deps.auth.require(ctx.headers, credentialsPermission(project));
    const { credential, etag } = await deps.credentials.get(project, name);
    ctx.set('ETag', `"${etag}"`);
    ctx.body = credential;
  });
  route(router, 'delete', '/projects/:project/credentials/:name', { summary: 'Delete a credential (If-Match)', params: credentialParams, response: emptyAnswer }, async (ctx) => {
    const project = parsePathName(ctx.params['project'], 'project');
    const name = parseCredentialName(ctx.params['name']);
    await deps.auth.require(ctx.headers, credentialsPermission(project));
    await deps.credentials.delete(project, name, ifMatch(ctx.headers));
    ctx.body = {};
  });
  return router;
}
