// Authentication (wire-conventions §6): a bearer JWT, RS256, whose header `kid` is
// "<project>:<credential>" naming the public key that must verify it; `exp` is mandatory.
// The same token is accepted in an `api_key` header, and as the password of HTTP basic
// authentication (the user name is ignored), for clients that can only send those.
import { importSPKI, jwtVerify, decodeProtectedHeader, errors as joseErrors, type CryptoKey, type KeyObject } from 'jose';
import type { IncomingHttpHeaders } from 'node:http';
import { errors } from '../../lib/errors.js';
import type { CredentialStore } from './credentials-store.js';
import { authorize, grantableRoles, type Permission, type Principal } from './permissions.js';

const CLOCK_TOLERANCE_SECONDS = 30;

export class Authenticator {
  /** Imported keys by "<project>:<name>", valid while the stored record's revision is unchanged. */
  private readonly keyCache = new Map<string, { revision: string; key: CryptoKey | KeyObject }>();

  constructor(private readonly credentials: CredentialStore) {}

  /** Verifies the request's token; throws UNAUTHENTICATED (401) for anything but a valid token. */
  async authenticate(headers: IncomingHttpHeaders): Promise<Principal> {
    const token = tokenFromHeaders(headers);
    let kid: string | undefined;
    try {
      const header = decodeProtectedHeader(token);
      if (header.alg !== 'RS256') throw errors.unauthenticated('token must be signed with RS256');
      kid = header.kid;
    } catch (err) {
      if (err instanceof Error && err.name === 'StrataError') throw err;
      throw errors.unauthenticated('malformed token');
    }
    if (!kid || !/^[^:]+:[^:]+$/.test(kid)) throw errors.unauthenticated('token header kid must be "<project>:<credential>"');
    const [project, name] = kid.split(':') as [string, string];
    const key = await this.publicKey(project, name);
    let payload;
    try {
      ({ payload } = await jwtVerify(token, key, {
        algorithms: ['RS256'],
        requiredClaims: ['exp'],
        clockTolerance: CLOCK_TOLERANCE_SECONDS,
      }));
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw errors.unauthenticated('token expired');
      if (err instanceof joseErrors.JWTClaimValidationFailed) throw errors.unauthenticated(`token claim invalid: ${err.message}`);
      throw errors.unauthenticated('token signature cannot be verified');
    }
    const claimed = Array.isArray(payload['roles']) ? payload['roles'].filter((r): r is string => typeof r === 'string') : [];
    return {
      subject: typeof payload.sub === 'string' ? payload.sub : '',
      credentialProject: project,
      credentialName: name,
      roles: grantableRoles(project, claimed),
    };
  }

  /** Authenticates, then authorizes: 401 before 403. */
  async require(headers: IncomingHttpHeaders, permission: Permission): Promise<Principal> {
    const principal = await this.authenticate(headers);
    authorize(principal, permission);
    return principal;
  }

  private async publicKey(project: string, name: string): Promise<CryptoKey | KeyObject> {
    const stored = await this.credentials.get(project, name);
    const cacheKey = `${project}:${name}`;
    if (!stored) {
      this.keyCache.delete(cacheKey);
      throw errors.unauthenticated(`unknown credential ${cacheKey}`);
    }
    const cached = this.keyCache.get(cacheKey);
    if (cached && cached.revision === stored.revision) return cached.key;
    try {
      const key = await importSPKI(stored.record.payload, 'RS256');
      this.keyCache.set(cacheKey, { revision: stored.revision, key });
      return key;
    } catch {
      throw errors.unauthenticated(`credential ${cacheKey} holds no usable RS256 public key`);
    }
  }
}

function tokenFromHeaders(headers: IncomingHttpHeaders): string {
  const authorization = headers.authorization;
  if (authorization) {
    const [scheme, value] = splitOnce(authorization.trim(), ' ');
    if (/^bearer$/i.test(scheme) && value) return value.trim();
    if (/^basic$/i.test(scheme) && value) {
      const decoded = Buffer.from(value.trim(), 'base64').toString('utf8');
      const password = splitOnce(decoded, ':')[1];
      if (password) return password;
      throw errors.unauthenticated('basic authentication must carry the token as the password');
    }
    throw errors.unauthenticated('Authorization header must be "Bearer <token>" or "Basic <credentials>"');
  }
  const apiKey = headers['api_key'] ?? headers['api-key'];
  if (typeof apiKey === 'string' && apiKey.trim() !== '') {
    return apiKey.replace(/^bearer\s+/i, '').trim();
  }
  throw errors.unauthenticated('authentication required');
}

function splitOnce(text: string, separator: string): [string, string | undefined] {
  const at = text.indexOf(separator);
  return at < 0 ? [text, undefined] : [text.slice(0, at), text.slice(at + 1)];
}
