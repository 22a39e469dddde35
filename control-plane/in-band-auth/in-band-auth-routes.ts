// In-band authentication (docs/in-band-auth.md):
//   POST|GET /api/v2/projects/{p}/trustedHosts, GET|DELETE /api/v2/projects/{p}/trustedHosts/{name}
//   GET|PUT /api/v2/projects/{p}/trustedHostSecrets/{name}   (the secrets: read one, rotate)
//   GET /api/v2/hosts                                        (every trusted host; cluster read)
//   POST /api/v2/cluster/inBandAuth/enable|disable           (cluster write; also the feature flag)
// Route pattern: params and body (400) → auth.require (401/403) → InBandAuthService. Trusted hosts
// are the project admin's (reads too: the list says which hosts may connect); their secrets are
// never in a list.
import Router from '@koa/router';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import type { FeatureFlagsService } from '../feature-flags/feature-flags-service.js';
import { parsePathName } from '../projects/projects-schema.js';
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

export function createInBandAuthRoutes(deps: InBandAuthRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  const project = (raw: string | undefined) => parsePathName(raw, 'project');
  const hostName = (raw: string | undefined) => parsePathName(raw, 'trusted host');

  router.get('/projects/:project/trustedHosts', async (ctx) => {
    const p = project(ctx.params['project']);
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    ctx.body = { trustedHosts: await deps.inBandAuth.list(p) };
  });
  router.post('/projects/:project/trustedHosts', async (ctx) => {
    const p = project(ctx.params['project']);
    const input = parseCreate(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    ctx.body = await deps.inBandAuth.create(p, input);
  });
  router.get('/projects/:project/trustedHosts/:name', async (ctx) => {
    const [p, name] = [project(ctx.params['project']), hostName(ctx.params['name'])];
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    ctx.body = await deps.inBandAuth.get(p, name);
  });
  router.delete('/projects/:project/trustedHosts/:name', async (ctx) => {
    const [p, name] = [project(ctx.params['project']), hostName(ctx.params['name'])];
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    await deps.inBandAuth.delete(p, name, ifMatch(ctx.headers));
    ctx.body = {};
  });
  router.get('/projects/:project/trustedHostSecrets/:name', async (ctx) => {
    const [p, name] = [project(ctx.params['project']), hostName(ctx.params['name'])];
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    ctx.body = await deps.inBandAuth.secrets(p, name);
  });
  router.put('/projects/:project/trustedHostSecrets/:name', async (ctx) => {
    const [p, name] = [project(ctx.params['project']), hostName(ctx.params['name'])];
    const input = parseSecrets(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.projectWrite(p));
    await deps.inBandAuth.rotate(p, name, input, ifMatch(ctx.headers));
    ctx.body = {};
  });
  router.get('/hosts', async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { hosts: await deps.inBandAuth.list() };
  });
  for (const action of ['enable', 'disable'] as const) {
    router.post(`/cluster/inBandAuth/${action}`, async (ctx) => {
      await readJsonBody(ctx);
      const principal = await deps.auth.require(ctx.headers, permissions.clusterWrite);
      await deps.flags.set('in-band-authentication', action === 'enable', principal.subject);
      ctx.body = {};
    });
  }
  return router;
}
