// Lenient wire input (wire-conventions §1, §2, §8), as zod schemas every resource reuses:
// `null` means "not given", numbers may arrive as strings, enums as names or numbers, sizes in
// any of the accepted forms (lib/contract/size.ts), booleans in the spellings clients send.
// Validation failures become one 400 naming each bad field.
import { z } from 'zod';
import { parseSize } from '../../lib/contract/size.js';
import { UUID_PATTERN, uuidSchema } from '../../lib/contract/uuid.js';
import { StrataError, errors } from '../../lib/errors.js';

/** `null` (and absence) mean "not given". */
export function optional<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => (v === null ? undefined : v), schema.optional());
}

/** An integer that may arrive as a JSON number or a decimal string. */
export function integer(options: { min?: number; max?: number } = {}) {
  return z.preprocess(
    (v) => (typeof v === 'string' && /^\s*-?\d+\s*$/.test(v) ? Number(v) : v),
    z.number({ error: 'must be an integer' }).int('must be an integer')
      .min(options.min ?? Number.MIN_SAFE_INTEGER, `must be at least ${options.min}`)
      .max(options.max ?? Number.MAX_SAFE_INTEGER, `must be at most ${options.max}`),
  );
}

/** A boolean: true/false, "true"/"True"/"false"/"1"/"0". */
export const boolean = z.preprocess((v) => {
  if (typeof v === 'string') {
    const lower = v.trim().toLowerCase();
    if (lower === 'true' || lower === '1') return true;
    if (lower === 'false' || lower === '0') return false;
  }
  return v;
}, z.boolean({ error: 'must be a boolean' }));

/**
 * An enum given by name or by its number (protobuf style: the index in `names`).
 * `aliases` adds accepted inputs (e.g. 4096 for sectorSize_4K).
 */
export function enumeration<const T extends readonly [string, ...string[]]>(names: T, aliases: Record<string, T[number]> = {}) {
  return z.preprocess((v) => {
    if (typeof v === 'number' && Number.isInteger(v)) return aliases[String(v)] ?? names[v] ?? v;
    if (typeof v === 'string') {
      if (v in aliases) return aliases[v];
      if (/^\d+$/.test(v)) return aliases[v] ?? names[Number(v)] ?? v;
      const exact = names.find((n) => n === v) ?? names.find((n) => n.toLowerCase() === v.toLowerCase());
      return exact ?? v;
    }
    return v;
  }, z.enum(names, { error: `must be one of ${names.join(', ')}` }));
}

/** Compression input: true/True/enable/enabled/false/False/disable/disabled/"" (§8). */
export const compression = z.preprocess((v) => {
  if (typeof v === 'boolean') return v;
  if (typeof v !== 'string') return v;
  const lower = v.trim().toLowerCase();
  if (['true', 'enable', 'enabled'].includes(lower)) return true;
  if (['false', 'disable', 'disabled', ''].includes(lower)) return false;
  return v;
}, z.boolean({ error: 'must be one of true, enable, enabled, false, disable, disabled' }));

export const size = z.unknown().transform((v, ctx) => {
  try {
    return parseSize(v);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});

/** Names: 1 to 253 of a-z A-Z 0-9 - _ . (spec §8: volume names, label keys and values). */
export const NAME_PATTERN = /^[A-Za-z0-9._-]{1,253}$/;
/** What the OpenAPI document says of a name field whose schema checks NAME_PATTERN in a refinement. */
export const NAME_DOC = { pattern: NAME_PATTERN.source, description: '1 to 253 characters from a-z, A-Z, 0-9, hyphen, underscore, period' } as const;
export const name = z.string({ error: 'must be a string' }).regex(NAME_PATTERN, 'must be 1 to 253 characters from a-z, A-Z, 0-9, hyphen, underscore, period');

/** A UUID, lower-cased as every stored UUID is (the one schema of lib/contract/uuid.ts). */
export const uuid = uuidSchema;

/**
 * An identifier field where "" and null count as not given (protobuf clients send "" for unset
 * strings), otherwise of the given type: every identifier is bounded (issue 17).
 */
export function optionalIdentifier<T extends z.ZodType<unknown, string>>(schema: T) {
  // A preprocess (not a transform) so that the OpenAPI document shows the identifier's own type.
  return z.preprocess((v) => (v === null || v === '' ? undefined : v), schema.optional());
}

/** A path or query identifier: a UUID (lower-cased) or a name; anything else is a 400 naming the field. */
export function checkIdentifier(field: string, value: string, kind: 'UUID' | 'name'): string {
  if (kind === 'UUID') {
    if (!UUID_PATTERN.test(value)) throw errors.invalid(`invalid request: ${field} must be a UUID`);
    return value.toLowerCase();
  }
  if (!NAME_PATTERN.test(value)) throw errors.invalid(`invalid request: ${field} must be 1 to 253 characters from a-z, A-Z, 0-9, hyphen, underscore, period`);
  return value;
}

/** Validates `input` against `schema`; a failure is one 400 listing every bad field. */
export function parseInput<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const problems = result.error.issues.map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : 'body'} ${issue.message}`);
  throw new StrataError('INVALID_ARGUMENT', `invalid request: ${problems.join('; ')}`, {
    details: result.error.issues.map((i) => ({ field: i.path.join('.'), message: i.message })),
  });
}
