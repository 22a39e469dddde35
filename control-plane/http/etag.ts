// ETags (wire-conventions §5): a record's ETag is its etcd key's mod_revision. Clients send it
// back in If-Match; absent means no check; a stale one is 412 (gRPC 9).
import type { IncomingHttpHeaders } from 'node:http';

/** The ETag the client expects, or undefined for no check. Accepts `"x"`, `W/"x"`, `x`, `*`. */
export function ifMatch(headers: IncomingHttpHeaders): string | undefined {
  const raw = headers['if-match'];
  if (raw === undefined) return undefined;
  const value = raw.trim().replace(/^W\//, '').replace(/^"(.*)"$/, '$1');
  return value === '' || value === '*' ? undefined : value;
}
