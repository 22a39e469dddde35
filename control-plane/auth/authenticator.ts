// Authentication (wire-conventions §6): a bearer JWT, RS256, whose header `kid` is
// "<project>:<credential>" naming the public key that must verify it; `exp` is mandatory.
// The same token is accepted in an `api_key` header, and as the password of HTTP basic
// authentication (the user name is ignored), for clients that can only send those.
import { importSPKI, jwtVerify, decodeProtectedHeader, errors as joseErrors, type CryptoKey, type KeyObject } from 'jose';
import type { IncomingHttpHeaders } from 'node:http';
import { errors } from '../../lib/errors.js';
import type { CredentialLookup } from './credentials-store.js';
import { authorize, grantableRoles, type Permission, type Principal } from './permissions.js';

const CLOCK_TOLERANCE_SECONDS = 30;
/** Verified tokens remembered (clients send the same token on every request). */
const VERIFIED_TOKENS_MAX = 10_000;

interface VerifiedToken {
  readonly principal: Principal;
  /** The credential's revision when the signature was verified: any change forgets the token. */
  readonly credentialRevision: string;
  /** exp plus the clock tolerance, in ms since the epoch. */
  readonly validUntilMs: number;
}

export class Authenticator {
  /** Imported keys by "<project>:<name>", valid while the stored record's revision is unchanged. */
  private readonly keyCache = new Map<string, { revision: string; key: CryptoKey | KeyObject }>();
  /**
   * Tokens whose RS256 signature was verified, by token text: an RSA verification per request
   * costs more than the rest of a GET. A hit still needs the credential, unchanged, and an
   * unexpired token, so deleting or replacing a credential locks its tokens out as before.
   */
  private readonly verified = new Map<string, VerifiedToken>();
  /**
   * The principal of each request already authenticated, by its headers object: the HTTP app
   * authenticates every request before its route (401 first), and the route's own call then
   * gets the same principal without a second lookup.
   */
  private readonly byRequest = new WeakMap<IncomingHttpHeaders, Principal>();

  constructor(private readonly credentials: CredentialLookup) {}

  /** Verifies the request's token; throws UNAUTHENTICATED (401) for anything but a valid token. */
  async authenticate(headers: IncomingHttpHeaders): Promise<Principal> {
    const known = this.byRequest.get(headers);
    if (known) return known;
    const principal = await this.verify(headers);
    this.byRequest.set(headers, principal);
    return principal;
  }

  private async verify(headers: IncomingHttpHeaders): Promise<Principal> {
    const token = tokenFromHeaders(headers);
    const remembered = this.verified.get(token);
    if (remembered) {
      const { credentialProject, credentialName } = remembered.principal;
      const credential = this.credentials.credential(credentialProject, credentialName);
      if (credential?.revision === remembered.credentialRevision && Date.now() <= remembered.validUntilMs) return remembered.principal;
      this.verified.delete(token);
    }
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
      ({ payload } = await jwtVerify(token, key.key, {
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
    const principal: Principal = {
      subject: typeof payload.sub === 'string' ? payload.sub : '',
      credentialProject: project,
      credentialName: name,
      roles: grantableRoles(project, claimed),
    };
    this.remember(token, principal, key.revision, (payload.exp ?? 0) * 1000 + CLOCK_TOLERANCE_SECONDS * 1000);
    return principal;
  }

  private remember(token: string, principal: Principal, credentialRevision: string, validUntilMs: number): void {
    // Oldest first out: a Map iterates in insertion order.
    if (this.verified.size >= VERIFIED_TOKENS_MAX) this.verified.delete(this.verified.keys().next().value!);
    this.verified.set(token, { principal, credentialRevision, validUntilMs });
  }

  /** Authenticates, then authorizes: 401 before 403. */
  async require(headers: IncomingHttpHeaders, permission: Permission): Promise<Principal> {
    const principal = await this.authenticate(headers);
    authorize(principal, permission);
    return principal;
  }

  private async publicKey(project: string, name: string): Promise<{ key: CryptoKey | KeyObject; revision: string }> {
    const stored = this.credentials.credential(project, name);
    const cacheKey = `${project}:${name}`;
    if (!stored) {
      this.keyCache.delete(cacheKey);
      throw errors.unauthenticated(`unknown credential ${cacheKey}`);
    }
    const cached = this.keyCache.get(cacheKey);
    if (cached && cached.revision === stored.revision) return cached;
    try {
      const imported = { revision: stored.revision, key: await importSPKI(stored.record.payload, 'RS256') };
      this.keyCache.set(cacheKey, imported);
      return imported;
    } catch {
      throw errors.unauthenticated(`credential ${cacheKey} holds no usable RS256 public key`);
    }
  }
}

export function tokenFromHeaders(headers: IncomingHttpHeaders): string {
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
