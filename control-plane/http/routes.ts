// Route definitions: every /api/v2 route is registered through `route()` with its schemas (path
// parameters, query, body, response) in one place. The router runs the path-parameter schema
// before the handler (a malformed identifier never reaches a lookup: 400, or 404 where the spec
// answers 404 for the path), and the handlers parse query and body with the same schema objects
// the definition names. The OpenAPI document (control-plane/openapi/) is generated from these
// definitions by walking the routers' own routing tables, so a route without a definition
// cannot be served undocumented: the generator refuses it.
import type Router from '@koa/router';
import type { Context, Next } from 'koa';
import { z } from 'zod';
import { errors } from '../../lib/errors.js';
import { parseInput } from './lenient.js';

export type RouteMethod = 'get' | 'post' | 'put' | 'delete';

/** A path parameter schema object: one schema per `:name` in the path. */
export type ParamsSchema = z.ZodObject<Record<string, z.ZodType<unknown, string>>>;

export interface RouteSchemas {
  /** One line for the document. */
  readonly summary: string;
  /** Path parameters (required when the path has any); checked before the handler runs. */
  readonly params?: ParamsSchema;
  /**
   * What a malformed path parameter answers: a 400 naming the field (the default), or, where the
   * spec lists only 404 for the path (nodes/{UUID}, nvmeDevices/{serial}, connectedHosts/{hostNQN}),
   * the 404 of an object that does not exist, naming this kind of object.
   */
  readonly malformedParamIsNotFound?: string;
  /** Query parameters (an object schema; every key is one parameter). */
  readonly query?: z.ZodObject;
  /** The JSON request body. */
  readonly body?: z.ZodType;
  /**
   * On a router that is not strict about trailing slashes, the path with a trailing slash reaches
   * this route too; where that form means something of its own (one object by name, `…/?name=X`),
   * its summary here documents it as an operation of its own.
   */
  readonly trailingSlash?: string;
  /** The 200 answer: a JSON schema, or a file (`binary`: the media types it may have). */
  readonly response: z.ZodType | { readonly binary: readonly string[] };
}

export interface RouteDefinition extends RouteSchemas {
  readonly method: RouteMethod;
}

/** `{}`: the answer of writes that return nothing. */
export const emptyAnswer = z.object({});

type Layer = Router['stack'][number];
const definitions = new WeakMap<Layer, RouteDefinition>();

/** Registers `handler` for `method path` on `router`, with its schemas. */
export function route(router: Router, method: RouteMethod, path: string, schemas: RouteSchemas, handler: (ctx: Context, next: Next) => Promise<unknown>): void {
  const params = schemas.params;
  router[method](path, async (ctx: Context, next: Next) => {
    if (params) ctx.params = { ...ctx.params, ...parseParams(params, ctx.params as Record<string, string>, schemas.malformedParamIsNotFound) };
    return handler(ctx, next);
  });
  const layer = router.stack[router.stack.length - 1];
  if (!layer) throw new Error(`route ${method} ${path} was not registered`);
  definitions.set(layer, { ...schemas, method });
}

/** The definition a routing-table entry was registered with (undefined: registered without one). */
export function definitionOf(layer: Layer): RouteDefinition | undefined {
  return definitions.get(layer);
}

function parseParams(schema: ParamsSchema, raw: Record<string, string>, notFoundKind: string | undefined): Record<string, unknown> {
  const input = Object.fromEntries(Object.keys(schema.shape).map((key) => [key, raw[key] ?? '']));
  if (notFoundKind === undefined) return parseInput(schema, input);
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const key = String(result.error.issues[0]?.path[0] ?? Object.keys(schema.shape)[0] ?? '');
  throw errors.notFound(notFoundKind, String(input[key] ?? ''));
}
