// In-band authentication (docs/in-band-auth.md):
//   POST|GET /api/v2/projects/{p}/trustedHosts, GET|DELETE /api/v2/projects/{p}/trustedHosts/{name}
//   GET|PUT /api/v2/projects/{p}/trustedHostSecrets/{name}   (the secrets: read one, rotate)
//   GET /api/v2/hosts                                        (every trusted host; cluster read)
//   POST /api/v2/cluster/inBandAuth/enable|disable           (cluster write; also the feature flag)
// Route pattern: params and body (400) → auth.require (401/403) → InBandAuthService. Trusted hosts
// are the project admin's (reads too: the list says which hosts may connect); their secrets are
// never in a list.
import Router from '@koa/router';
import { z } from 'zod';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import type { FeatureFlagsService } from '../feature-flags/feature-flags-service.js';
import { emptyAnswer, route } from '../http/routes.js';
import { hostNqnSchema } from '../../lib/contract/nqn.js';
import { objectName, parsePathName } from '../projects/projects-schema.js';
import { checkHostNqn, checkSecret, type InBandAuthService, type SecretsInput, type TrustedHostInput } from './in-band-auth-service.js';

export interface InBandAuthRoutesDeps {
  readonly auth: Authenticator;
  readonly inBandAuth: InBandAuthService;
  /** Enable/disable go through the flag, which delegates to the service and records the event. */
  readonly flags: FeatureFlagsService;
}

const given = (body: Record<string, unknown>, field: string): unknown => (body[field] === null ? undefined : body[field]);

function parseCreate(body: Record<string, unknown>): TrustedHostInput {
  const name = parsePathName(typeof body['name'] === 'string' ? body['name'] : undefined, 'trusted host');
  const hostNQN = checkHostNqn(given(body, 'hostNQN'));
  const secret = checkSecret('secret', given(body, 'secret'));
  const ctrl = given(body, 'ctrlSecret');
  return { name, hostNQN, secret, ...(ctrl === undefined || ctrl === '' ? {} : { ctrlSecret: checkSecret('ctrlSecret', ctrl) }) };
}

function parseSecrets(body: Record<string, unknown>): SecretsInput {
  const secret = checkSecret('secret', given(body, 'secret'));
  const ctrl = given(body, 'ctrlSecret');
  if (ctrl === undefined) return { secret };
  if (ctrl === '') return { secret, ctrlSecret: '' };
  return { secret, ctrlSecret: checkSecret('ctrlSecret', ctrl) };
}

// ---- schemas of the route definitions (the OpenAPI document; the parsers above check the values) ----

const projectParams = z.object({ project: objectName });
const hostParams = z.object({ project: objectName, name: objectName });
const trustedHostBody = z.object({ name: objectName, hostNQN: hostNqnSchema, secret: z.string(), ctrlSecret: z.string().optional() });
const secretsBody = z.object({ secret: z.string(), ctrlSecret: z.string().optional() });
const trustedHostAnswer = z.object({
  UUID: z.string(),
  name: z.string(),
  projectName: z.string(),
  hostNQN: z.string(),
  hasSecret: z.boolean(),
  hasCtrlSecret: z.boolean(),
  secretUpdatedAt: z.string(),
  creationTime: z.string(),
  ETag: z.string(),
});
const secretsAnswer = z.object({ name: z.string(), hostNQN: z.string(), secret: z.string(), ctrlSecret: z.string() });

export function createInBandAuthRoutes(deps: InBandAuthRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  const project = (raw: string | undefined) => parsePathName(raw, 'project');
  const hostName = (raw: string | undefined) => parsePathName(raw, 'trusted host');

  route(router, 'get', '/projects/:project/trustedHosts', { summary: "A project's trusted hosts (in-band authentication; no secrets)", params: projectParams, response: z.object({ trustedHosts: z.array(trustedHostAnswer) }) }, async (ctx) => {
    const p = project(ctx.params['project']);
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    ctx.body = { trustedHosts: await deps.inBandAuth.list(p) };
  });
  route(router, 'post', '/projects/:project/trustedHosts', { summary: 'Trust a host: its NQN and DH-HMAC-CHAP secret(s)', params: projectParams, body: trustedHostBody, response: trustedHostAnswer }, async (ctx) => {
    const p = project(ctx.params['project']);
    const input = parseCreate(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    ctx.body = await deps.inBandAuth.create(p, input);
  });
  route(router, 'get', '/projects/:project/trustedHosts/:name', { summary: 'One trusted host (no secrets)', params: hostParams, response: trustedHostAnswer }, async (ctx) => {
    const [p, name] = [project(ctx.params['project']), hostName(ctx.params['name'])];
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    ctx.body = await deps.inBandAuth.get(p, name);
  });
  route(router, 'delete', '/projects/:project/trustedHosts/:name', { summary: 'Stop trusting a host', params: hostParams, response: emptyAnswer }, async (ctx) => {
    const [p, name] = [project(ctx.params['project']), hostName(ctx.params['name'])];
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    await deps.inBandAuth.delete(p, name, ifMatch(ctx.headers));
    ctx.body = {};
  });
  route(router, 'get', '/projects/:project/trustedHostSecrets/:name', { summary: "A trusted host's secrets (one host at a time; never in a list)", params: hostParams, response: secretsAnswer }, async (ctx) => {
    const [p, name] = [project(ctx.params['project']), hostName(ctx.params['name'])];
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    ctx.body = await deps.inBandAuth.secrets(p, name);
  });
  route(router, 'put', '/projects/:project/trustedHostSecrets/:name', { summary: "Rotate a trusted host's secrets (connected hosts stay connected)", params: hostParams, body: secretsBody, response: emptyAnswer }, async (ctx) => {
    const [p, name] = [project(ctx.params['project']), hostName(ctx.params['name'])];
    const input = parseSecrets(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    await deps.inBandAuth.rotate(p, name, input, ifMatch(ctx.headers));
    ctx.body = {};
  });
  route(router, 'get', '/hosts', { summary: 'Every trusted host of every project (no secrets)', response: z.object({ hosts: z.array(trustedHostAnswer) }) }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { hosts: await deps.inBandAuth.list() };
  });
  for (const action of ['enable', 'disable'] as const) {
    route(router, 'post', `/cluster/inBandAuth/${action}`, { summary: `${action === 'enable' ? 'Enable' : 'Disable'} in-band authentication on every volume (the in-band-authentication feature flag)`, body: z.object({}), response: emptyAnswer }, async (ctx) => {
      await readJsonBody(ctx);
      const principal = await deps.auth.require(ctx.headers, permissions.clusterWrite);
      await deps.flags.set('in-band-authentication', action === 'enable', principal.subject);
      ctx.body = {};
    });
  }
  return router;
}
