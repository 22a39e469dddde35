// UUIDs as every part of Strata reads them: 8-4-4-4-12 hex digits, either case on input; the
// canonical (stored, compared, written into NQNs and file names) form is lower case.
import { createHash } from 'node:crypto';
import { z } from 'zod';

/**
 * A UUID inside other text, both cases spelt out: the one spelling of the pattern. A JSON Schema
 * pattern (the OpenAPI document) has no flags, and a reader that finds UUIDs in a message needs
 * it unanchored.
 */
export const UUID_TEXT = '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}';

/** Any-case UUID text. */
export const UUID_PATTERN = new RegExp(`^${UUID_TEXT}$`);

/**
 * THE UUID schema of every API input (path, query, body): any-case text in, the canonical
 * lower-case form out. 36 characters, so every UUID field is bounded; the OpenAPI document
 * carries its pattern and `format: uuid`.
 */
export const uuidSchema = z
  .string({ error: 'must be a string' })
  .regex(UUID_PATTERN, 'must be a UUID')
  .transform((v) => v.toLowerCase())
  .meta({ format: 'uuid', description: 'a UUID (8-4-4-4-12 hex digits, either case)' });

/** What the OpenAPI document says of a UUID field: for a composed schema that ends in uuidSchema. */
export const UUID_DOC = { format: 'uuid', pattern: UUID_PATTERN.source, description: 'a UUID (8-4-4-4-12 hex digits, either case)' } as const;

export function isUuid(value: unknown): boolean {
  return typeof value === 'string' && UUID_PATTERN.test(value);
}

/** A UUID in its canonical lower-case form (what the control plane writes). */
export function isCanonicalUuid(value: unknown): boolean {
  return isUuid(value) && value === (value as string).toLowerCase();
}

/**
 * A UUID derived from a name (the same name gives the same UUID, in the version 4 layout): for
 * identities the kernel wants stable and Strata does not store, such as a replica's namespace
 * UUID or a host NQN's host ID.
 */
export function uuidFromName(name: string): string {
  const h = createHash('sha256').update(name).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
