// ETags (wire-conventions §5): a record's ETag is its etcd key's mod_revision. Clients send it
// back in If-Match; absent means no check; a stale one is 412 (gRPC 9). Comparison is strong
// (RFC 9110 §13.1.1): a weak tag `W/"x"` or the empty tag `""` never matches, so the write is
// refused with 412 instead of going through unchecked. A header that is not an entity tag is 400.
import type { IncomingHttpHeaders } from 'node:http';
import { StrataError, quote } from '../../lib/errors.js';

/** A quoted entity tag (optionally weak), or the bare ETag value clients copy from a record. */
const ENTITY_TAG = /^(W\/)?"([\x21\x23-\x7e\x80-\xff]*)"$/;
const BARE_TAG = /^[\x21\x23-\x2b\x2d-\x7e]+$/;

/**
 * The ETag the client expects, or undefined for no check (no If-Match, or `*`). Accepts `"x"`
 * and the bare `x`; a weak or empty tag gives a value no ETag equals (412). More than one tag,
 * or anything else, is 400 INVALID_PRECONDITION.
 */
export function ifMatch(headers: IncomingHttpHeaders): string | undefined {
  const raw = headers['if-match'];
  if (raw === undefined) return undefined;
  const value = raw.trim();
  if (value === '*') return undefined;
  if (value.includes(',')) throw new StrataError('INVALID_PRECONDITION', 'If-Match must carry one ETag (a list is not supported)');
  const tagged = ENTITY_TAG.exec(value);
  if (tagged) return tagged[1] === undefined && tagged[2] !== '' ? tagged[2] : value;
  if (BARE_TAG.test(value)) return value;
  throw new StrataError('INVALID_PRECONDITION', `If-Match "${quote(value)}" is not an ETag: send the record's ETag, as is or in double quotes`);
}
