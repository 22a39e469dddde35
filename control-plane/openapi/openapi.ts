// The OpenAPI 3.1 document of /api/v2, generated from the routers' own routing tables and the
// zod schemas each route was defined with (control-plane/http/routes.ts): the schemas the routes
// validate with are the schemas the document shows. A route registered without a definition
// makes generation fail, so nothing is served undocumented. Inputs are shown as the API reads
// them (`io: input`: the canonical form; the lenient spellings of wire-conventions §1, §2, §8 —
// null for "not given", numbers as strings, enums by number — are also accepted), answers as it
// writes them.
import type Router from '@koa/router';
import { z } from 'zod';
import { definitionOf, type RouteDefinition } from '../http/routes.js';

export const OPENAPI_PATH = '/api/v2/openapi.json';

type JsonSchema = Record<string, unknown>;

/** The JSON error body of wire-conventions §3 (lib/errors.ts `toWire`). */
export const errorBody = z.object({
  error: z.string(),
  code: z.number().int().meta({ description: 'the gRPC status code (not the HTTP status)' }),
  message: z.string(),
  details: z.array(z.unknown()).optional(),
});

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const out = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as JsonSchema;
  delete out['$schema'];
  return out;
}

/** `/api/v2/volumes/:uuid` → `/api/v2/volumes/{uuid}`. */
export function openApiPath(template: string): string {
  return template.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

function operationId(method: string, path: string): string {
  const words = path.replace(/^\/api\/v2\/?/, '').split('/').map((part) => {
    if (part === '') return 'ByQuery';
    const param = /^:(.+)$/.exec(part);
    const word = param ? `By${param[1]}` : part;
    return word.charAt(0).toUpperCase() + word.slice(1);
  });
  return method + words.join('');
}

function operation(definition: RouteDefinition, path: string): JsonSchema {
  const parameters: JsonSchema[] = [];
  const pathParams = [...path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]!);
  const shape = definition.params?.shape ?? {};
  for (const name of pathParams) {
    const schema = shape[name];
    if (!schema) throw new Error(`route ${definition.method.toUpperCase()} ${path}: path parameter ${name} has no schema`);
    parameters.push({ name, in: 'path', required: true, schema: jsonSchema(schema, 'input') });
  }
  if (definition.query) {
    const query = jsonSchema(definition.query, 'input') as { properties?: Record<string, JsonSchema>; required?: string[] };
    for (const [name, schema] of Object.entries(query.properties ?? {})) {
      parameters.push({ name, in: 'query', required: (query.required ?? []).includes(name), schema });
    }
  }
  const response = definition.response;
  const ok = 'binary' in response
    ? { description: 'OK', content: Object.fromEntries(response.binary.map((type) => [type, { schema: { type: 'string', contentMediaType: type } }])) }
    : { description: 'OK', content: { 'application/json': { schema: jsonSchema(response as z.ZodType, 'output') } } };
  return {
    operationId: operationId(definition.method, path),
    summary: definition.summary,
    tags: [path.replace(/^\/api\/v2\//, '').split('/')[0]],
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(definition.body ? { requestBody: { required: false, content: { 'application/json': { schema: jsonSchema(definition.body, 'input') } } } } : {}),
    responses: {
      '200': ok,
      default: { description: 'An error: the JSON error body (docs/errors.md)', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } },
    },
  };
}

export interface OpenApiInfo {
  readonly version: string;
}

/** The document of every route of `routers` (throws for a route registered without a definition). */
export function openApiDocument(routers: readonly Router[], info: OpenApiInfo): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const router of routers) {
    for (const layer of router.stack) {
      const path = String(layer.path);
      // router.use() middleware is no route; /healthz and the like are not the API.
      if (layer.methods.length === 0 || !path.startsWith('/api/v2/')) continue;
      const definition = definitionOf(layer);
      if (!definition) throw new Error(`route ${layer.methods.join(',')} ${path} has no definition (register it with route(), control-plane/http/routes.ts)`);
      const item = (paths[openApiPath(path)] ??= {});
      if (item[definition.method]) throw new Error(`route ${definition.method.toUpperCase()} ${path} is defined twice`);
      item[definition.method] = operation(definition, path);
      if (definition.trailingSlash !== undefined) {
        const slashItem = (paths[`${openApiPath(path)}/`] ??= {});
        slashItem[definition.method] = operation({ ...definition, summary: definition.trailingSlash }, `${path}/`);
      }
    }
  }
  const sorted = Object.fromEntries(Object.entries(paths).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return {
    openapi: '3.1.0',
    info: {
      title: 'Strata management REST API',
      version: info.version,
      description: 'LightOS-compatible cluster management API (docs/api.md). Generated from the routes\' zod schemas; do not edit by hand.',
    },
    servers: [{ url: '/' }],
    security: [{ bearerAuth: [] }],
    paths: sorted,
    components: {
      securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
      schemas: { Error: jsonSchema(errorBody, 'output') },
    },
  };
}
