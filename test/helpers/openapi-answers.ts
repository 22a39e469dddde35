// Every answer the shared test HTTP clients receive is checked against the OpenAPI document
// (docs/openapi.json, which `npm run build` writes from the routes' schemas): a 200 JSON answer
// against its operation's schema, any other status against the JSON error body. A route family's
// suite thereby proves its real answers match the document (issue 16 item 3).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { packageRoot } from '../../lib/paths.js';

export type OpenApiOperation = {
  responses: Record<string, { content?: Record<string, { schema: object }> }>;
  parameters?: { name: string; in: string; schema: Record<string, unknown> }[];
  requestBody?: { content: Record<string, { schema: { properties?: Record<string, Record<string, unknown>> } }> };
};
export type OpenApiDocument = { openapi: string; paths: Record<string, Record<string, OpenApiOperation>>; components: { schemas: { Error: object } } };

let loaded: OpenApiDocument | undefined;
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
const compiled = new Map<object, ValidateFunction>();

function load(): OpenApiDocument {
  loaded ??= JSON.parse(readFileSync(join(packageRoot, 'docs', 'openapi.json'), 'utf8')) as OpenApiDocument;
  return loaded;
}

/**
 * The template of `document` a concrete path matches for `method`: the one with the fewest
 * parameters (`/volumes/` before `/volumes/{uuid}`), as the routers pick the literal route.
 */
export function templateOf(document: OpenApiDocument, path: string, method: string): string | undefined {
  const candidates = Object.keys(document.paths).filter((t) => document.paths[t]![method] && new RegExp(`^${t.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(path));
  return candidates.sort((a, b) => (a.match(/\{/g)?.length ?? 0) - (b.match(/\{/g)?.length ?? 0))[0];
}

function validator(schema: object): ValidateFunction {
  let validate = compiled.get(schema);
  if (!validate) compiled.set(schema, (validate = ajv.compile(schema)));
  return validate;
}

/**
 * Asserts that an answer matches the document. Returns the operation's template when a 200 JSON
 * answer was validated against its schema (undefined otherwise). `path` may carry a query.
 */
export function checkAnswer(method: string, path: string, answer: { status: number; contentType: string | null; body: unknown }, document: OpenApiDocument = load()): string | undefined {
  const verb = method.toLowerCase();
  const bare = path.split('?')[0]!.split('#')[0]!;
  if (verb === 'head' || !bare.startsWith('/api/')) return undefined;
  const json = (answer.contentType ?? '').startsWith('application/json');
  if (answer.status !== 200) {
    // Every failure is the JSON error body (docs/errors.md), whatever the route.
    if (answer.status >= 400) {
      const validate = validator(document.components.schemas.Error);
      assert.ok(json && validate(answer.body), `${method} ${path} ${answer.status}: not the JSON error body of the document: ${JSON.stringify(answer.body)?.slice(0, 300)}`);
    }
    return undefined;
  }
  const template = templateOf(document, bare, verb);
  assert.ok(template, `${method} ${bare} answered 200 but is not in the OpenAPI document`);
  if (!json) return undefined;
  const schema = document.paths[template]![verb]!.responses['200']?.content?.['application/json']?.schema;
  assert.ok(schema, `${method} ${template}: the document gives no JSON answer`);
  const validate = validator(schema);
  assert.ok(validate(answer.body), `${method} ${path}: the answer does not match the OpenAPI document: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(answer.body)?.slice(0, 600)}`);
  return template;
}
