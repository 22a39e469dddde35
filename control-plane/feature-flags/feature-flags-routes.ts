// GET /api/v2/featureFlags, GET /api/v2/featureFlags/{name}, POST /api/v2/featureFlags/{name}/
// enable|disable (spec 4.6, wire-conventions §7). Route pattern: params and body (400) →
// auth.require (401/403) → FeatureFlagsService. Reads need a cluster role, changes cluster
// write. An unknown name is 400, as the spec lists (not 404).
import Router from '@koa/router';
import { errors } from '../../lib/errors.js';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { z } from 'zod';
import { readJsonBody } from '../http/body.js';
import { emptyAnswer, route } from '../http/routes.js';
import { FEATURE_FLAG_NAMES, type FeatureFlagName } from '../volumes/volume-dependencies.js';
import type { FeatureFlagsService } from './feature-flags-service.js';

export interface FeatureFlagsRoutesDeps {
  readonly auth: Authenticator;
  readonly flags: FeatureFlagsService;
}

/** A flag name, case-insensitively; anything else is a 400 naming the valid ones. */
export function parseFlagName(raw: string | undefined): FeatureFlagName {
  const value = (raw ?? '').trim().toLowerCase();
  const name = FEATURE_FLAG_NAMES.find((n) => n === value);
  if (!name) throw errors.invalid(`unknown feature flag "${(raw ?? '').slice(0, 100)}"; valid names: ${FEATURE_FLAG_NAMES.join(', ')}`);
  return name;
}

/** The path's flag name: one of FEATURE_FLAG_NAMES, any case (the router checks it first). */
const flagParams = z.object({
  name: z.string().refine((v) => (FEATURE_FLAG_NAMES as readonly string[]).includes(v.trim().toLowerCase()), `unknown feature flag; valid names: ${FEATURE_FLAG_NAMES.join(', ')}`)
    .meta({ description: `one of ${FEATURE_FLAG_NAMES.join(', ')} (any case)` }),
});
const flagAnswer = z.object({ name: z.enum(FEATURE_FLAG_NAMES), enabled: z.boolean() });

export function createFeatureFlagsRoutes(deps: FeatureFlagsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  route(router, 'get', '/featureFlags', { summary: 'Every feature flag, keyed by name (spec 4.6)', response: z.object({ featureFlags: z.record(z.enum(FEATURE_FLAG_NAMES), flagAnswer) }) }, async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { featureFlags: await deps.flags.list() };
  });
  route(router, 'get', '/featureFlags/:name', { summary: 'One feature flag', params: flagParams, response: flagAnswer }, async (ctx) => {
    const name = parseFlagName(ctx.params['name']);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.flags.get(name);
  });
  for (const action of ['enable', 'disable'] as const) {
    route(router, 'post', `/featureFlags/:name/${action}`, { summary: `${action === 'enable' ? 'Enable' : 'Disable'} a feature flag (an empty JSON object)`, params: flagParams, body: z.object({}), response: emptyAnswer }, async (ctx) => {
      const name = parseFlagName(ctx.params['name']);
      await readJsonBody(ctx); // an empty JSON object; its content is ignored, but it must be JSON
      const principal = await deps.auth.require(ctx.headers, permissions.clusterWrite);
      await deps.flags.set(name, action === 'enable', principal.subject);
      ctx.body = {};
    });
  }
  return router;
}
