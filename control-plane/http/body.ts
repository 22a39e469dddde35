// Request input: the JSON body (size-limited, must be an object) and lenient value parsing
// shared by every route (wire-conventions §1: null means "not given", numbers may be strings,
// unknown keys are ignored).
import type { Context } from 'koa';
import { StrataError, errors, quote } from '../../lib/errors.js';

export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * `application/json` and the `+json` types (`application/merge-patch+json`), any parameters.
 * No Content-Type at all is read as JSON: clients that send a JSON body without one keep working.
 */
const JSON_MEDIA_TYPE = /^application\/(?:[a-z0-9.!#$&^_-]+\+)?json\s*(?:;.*)?$/i;

/** Refuses (415) a body declared as anything but JSON, before a byte of it is read. */
function checkMediaType(ctx: Context): void {
  const type = ctx.request.headers['content-type'];
  if (type === undefined || JSON_MEDIA_TYPE.test(type.trim())) return;
  // A request that declares no body (GET-style POSTs such as enable/disable) may carry any type.
  const length = ctx.request.headers['content-length'];
  if (length !== undefined && length.trim() === '0' && ctx.request.headers['transfer-encoding'] === undefined) return;
  throw new StrataError('UNSUPPORTED_MEDIA_TYPE', `request body must be JSON (Content-Type application/json), not ${quote(type)}`);
}

/** Reads the body as a JSON object. An empty body is `{}`. */
export async function readJsonBody(ctx: Context): Promise<Record<string, unknown>> {
  checkMediaType(ctx);
  const declared = Number(ctx.request.headers['content-length'] ?? 0);
  if (declared > MAX_BODY_BYTES) throw new StrataError('BODY_TOO_LARGE', `request body exceeds ${MAX_BODY_BYTES} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new StrataError('BODY_TOO_LARGE', `request body exceeds ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8').trim();
  if (text === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new StrataError('INVALID_JSON', 'request body is not valid JSON');
  }
  if (parsed === null) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new StrataError('INVALID_JSON', 'request body must be a JSON object');
  }
  return parsed as Record<string, unknown>;
}

/** Query values: a repeated name gives an array; clients also send comma-separated lists. */
export function queryList(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const items = Array.isArray(value) ? value : [value];
  return items.flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v.length > 0);
}

/** A single query value; an empty string counts as absent. A repeated name is a 400. */
export function queryValue(query: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const value = query[name];
  if (Array.isArray(value)) throw errors.invalid(`query parameter ${name} given more than once`);
  return value === undefined || value === '' ? undefined : value;
}

/** Parses a lenient boolean (`true`, `"true"`, `"True"`, `"1"`...). */
export function parseBoolean(name: string, value: unknown): boolean | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value === 'boolean') return value;
  if (typeof value === 'string') {
    const v = value.toLowerCase();
    if (['true', '1', 'yes'].includes(v)) return true;
    if (['false', '0', 'no'].includes(v)) return false;
  }
  throw errors.invalid(`${name} must be a boolean`);
}
