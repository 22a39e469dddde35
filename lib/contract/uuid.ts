// UUIDs as every part of Strata reads them: 8-4-4-4-12 hex digits, either case on input; the
// canonical (stored, compared, written into NQNs and file names) form is lower case.

/** Any-case UUID text. */
export const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: unknown): boolean {
  return typeof value === 'string' && UUID_PATTERN.test(value);
}

/** A UUID in its canonical lower-case form (what the control plane writes). */
export function isCanonicalUuid(value: unknown): boolean {
  return isUuid(value) && value === (value as string).toLowerCase();
}
