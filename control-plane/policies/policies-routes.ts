// GET|POST /api/v2/policies, GET|PUT|DELETE /api/v2/policies/{UUID} (spec 4.10,
// wire-conventions §7). Route pattern: params and body (400) → auth.require (401/403) →
// PoliciesService. Writes need a cluster write role; reads need a cluster role or a role in a
// project the policy is visible to.
//
// Enforcement (docs/policies.md "Enforcement"): a policy's `state` is Active only while every
// volume it is in effect for reports it enforced; answers carrying policies also say it in a
// header, `X-Strata-QoS-Enforced: true|false` (true: every policy in the answer is Active),
// which leaves the spec's bodies untouched. Which volume enforces what is the Strata extension
// GET /api/v2/policies/{UUID}/enforcement.
//
// GET /api/v2/policies/?name=X (trailing slash, empty UUID) addresses one policy, as the by-name
// lookups of volumes do (wire-conventions §4); without a UUID or name it is the list.
import Router from '@koa/router';
import { z } from 'zod';
import type { Context } from 'koa';
import type { Authenticator } from '../auth/authenticator.js';
import { permissions } from '../auth/permissions.js';
import { readJsonBody } from '../http/body.js';
import { ifMatch } from '../http/etag.js';
import { readScopeOf } from '../projects/read-scope.js';
import { emptyAnswer, route } from '../http/routes.js';
import { createPolicyBody, policyAnswer, policyEnforcementAnswer, policyListAnswer, policyParams, policyQuery, policyWithEtagAnswer, updatePolicyBody, parseCreatePolicy, parsePolicyQuery, parseUpdatePolicy, type PolicyLookup } from './policies-schema.js';
import type { PoliciesService } from './policies-service.js';

export const QOS_ENFORCEMENT_HEADER = 'X-Strata-QoS-Enforced';

/** The header for an answer carrying these policies. */
function enforcedHeader(ctx: Context, policies: readonly { state: string }[]): void {
  ctx.set(QOS_ENFORCEMENT_HEADER, policies.every((p) => p.state === 'Active') ? 'true' : 'false');
}

export interface PoliciesRoutesDeps {
  readonly auth: Authenticator;
  readonly policies: PoliciesService;
}

export function createPoliciesRoutes(deps: PoliciesRoutesDeps): Router {
  const router = new Router({ prefix: '/api/v2' });

  const readerScope = async (ctx: Context, lookup: PolicyLookup) => {
    const permission = lookup.projectName === undefined ? permissions.authenticated : permissions.projectRead(lookup.projectName);
    return readScopeOf(await deps.auth.require(ctx.headers, permission));
  };

  route(router, 'get', '/policies', { summary: 'List policies', trailingSlash: 'One policy by UUID or name (?UUID=, ?name=); without either, the list', query: policyQuery, response: z.union([policyListAnswer, policyWithEtagAnswer]) }, async (ctx) => {
    const lookup = parsePolicyQuery(ctx.query);
    const scope = await readerScope(ctx, lookup);
    if (ctx.path.endsWith('/') && (lookup.UUID !== undefined || lookup.name !== undefined)) {
      const policy = await deps.policies.get(scope, lookup);
      ctx.set('ETag', `"${policy.ETag}"`);
      enforcedHeader(ctx, [policy]);
      ctx.body = policy;
      return;
    }
    const policies = await deps.policies.list(scope, lookup);
    enforcedHeader(ctx, policies);
    ctx.body = { policies };
  });
  route(router, 'post', '/policies', { summary: 'Create a QoS policy', body: createPolicyBody, response: policyAnswer }, async (ctx) => {
    const input = parseCreatePolicy(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    const { ETag, ...policy } = await deps.policies.create(input);
    ctx.set('ETag', `"${ETag}"`);
    enforcedHeader(ctx, [policy]);
    ctx.body = policy;
  });
  route(router, 'get', '/policies/:uuid', { summary: 'One policy', params: policyParams, query: policyQuery.omit({ UUID: true }), response: policyWithEtagAnswer }, async (ctx) => {
    const lookup = parsePolicyQuery(ctx.query, ctx.params['uuid']);
    const scope = await readerScope(ctx, lookup);
    const policy = await deps.policies.get(scope, lookup);
    ctx.set('ETag', `"${policy.ETag}"`);
    enforcedHeader(ctx, [policy]);
    ctx.body = policy;
  });
  route(router, 'get', '/policies/:uuid/enforcement', { summary: 'Whether each volume the policy is in effect for enforces it (Strata extension)', params: policyParams, response: policyEnforcementAnswer }, async (ctx) => {
    const { UUID } = parsePolicyQuery({}, ctx.params['uuid']);
    const scope = await readerScope(ctx, {});
    const volumes = await deps.policies.enforcement(scope, UUID!);
    ctx.set(QOS_ENFORCEMENT_HEADER, volumes.every((v) => v.state === 'Enforced') ? 'true' : 'false');
    ctx.body = { volumes };
  });
  route(router, 'put', '/policies/:uuid', { summary: 'Update a policy (If-Match)', params: policyParams, body: updatePolicyBody, response: emptyAnswer }, async (ctx) => {
    const { UUID } = parsePolicyQuery({}, ctx.params['uuid']);
    const input = parseUpdatePolicy(await readJsonBody(ctx));
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    const etag = await deps.policies.update(UUID!, input, ifMatch(ctx.headers));
    ctx.set('ETag', `"${etag}"`);
    ctx.body = {};
  });
  route(router, 'delete', '/policies/:uuid', { summary: 'Delete a policy (If-Match)', params: policyParams, response: emptyAnswer }, async (ctx) => {
    const { UUID } = parsePolicyQuery({}, ctx.params['uuid']);
    await deps.auth.require(ctx.headers, permissions.clusterWrite);
    await deps.policies.delete(UUID!, ifMatch(ctx.headers));
    ctx.body = {};
  });
  return router;
}
