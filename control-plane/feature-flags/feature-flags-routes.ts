// GET /api/v2/featureFlags, GET /api/v2/featureFlags/{name}, POST /api/v2/featureFlags/{name}/
// enable|disable (spec 4.6, wire-conventions §7). Route pattern: params and body (400) →
// auth.require (401/403) → FeatureFlagsService. Reads need a cluster role, changes cluster
// write. An unknown name is 400, as the spec lists (not 404).
import Router from '@koa/router';
import { errors } from '../../lib/errors.js';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
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

export function createFeatureFlagsRoutes(deps: FeatureFlagsRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });
  router.get('/featureFlags', async (ctx) => {
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = { featureFlags: await deps.flags.list() };
  });
  router.get('/featureFlags/:name', async (ctx) => {
    const name = parseFlagName(ctx.params['name']);
    await deps.auth.require(ctx.headers, permissions.clusterRead);
    ctx.body = await deps.flags.get(name);
  });
  for (const action of ['enable', 'disable'] as const) {
    router.post(`/featureFlags/:name/${action}`, async (ctx) => {
      const name = parseFlagName(ctx.params['name']);
      await readJsonBody(ctx); // an empty JSON object; its content is ignored, but it must be JSON
      const principal = await deps.auth.require(ctx.headers, permissions.clusterWrite);
      await deps.flags.set(name, action === 'enable', principal.subject);
      ctx.body = {};
    });
  }
  return router;
}
