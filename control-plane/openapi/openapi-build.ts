// The control plane's OpenAPI document without a running control plane (the build writes it to
// docs/openapi.json; tests compare it with the served one): the routers of
// control-plane/resources.ts over inert dependencies. Registering a route reads none of them and
// nothing here is started, so the routing tables are exactly the served ones.
import type Router from '@koa/router';
import { buildResources, type ResourceContext } from '../resources.js';
import { API_VERSION } from '../version/version-routes.js';
import { openApiDocument } from './openapi.js';

/** A value every property, call and construction of which gives another such value. */
function inert(): never {
  const target = function inertValue() {};
  return new Proxy(target, {
    get: (_target, key) => (key === Symbol.toPrimitive ? () => '' : key === 'then' ? undefined : inert()),
    apply: () => inert(),
    construct: () => inert(),
  }) as never;
}

/** The routers the control plane serves (never to be run: their services are inert). */
export function controlPlaneRouters(): Router[] {
  return buildResources(inert() as ResourceContext).routers;
}

export function openApiDocumentOfControlPlane(): Record<string, unknown> {
  return openApiDocument(controlPlaneRouters(), { version: API_VERSION });
}
