// UUIDs as every part of Strata reads them: 8-4-4-4-12 hex digits, either case on input; the
// canonical (stored, compared, written into NQNs and file names) form is lower case.
import { createHash } from 'node:crypto';

/** Any-case UUID text. */
export const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

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
