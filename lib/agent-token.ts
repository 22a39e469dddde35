// Agent tokens: how an agent proves to a control plane's gRPC port that it belongs to the cluster
// (docs/agent-auth.md). Whoever can read the cluster's etcd is trusted — agents already hold
// etcd credentials for membership — so the proof is derived from a secret kept in etcd
// (`/strata/agent-secret`): a short-lived HS256 JWT naming the agent's server and nodes, audience
// the cluster UUID. The gRPC port is reachable by more than etcd is (it must be open to every
// server); the token makes reaching it not enough.
//
// Both daemons use this module: agents sign, control planes verify. Either creates the secret the
// first time it needs one, in a transaction guarded by "the key does not exist", so concurrent
// starters agree on one secret and no install step has to make it.
import { SignJWT, decodeProtectedHeader, errors as joseErrors, jwtVerify } from 'jose';
import { UUID_PATTERN } from './contract/uuid.js';
import { errors } from './errors.js';
import type { AgentSecret } from './records.js';

/** The gRPC metadata key carrying `Bearer <agent token>` on the Session call. */
export const AGENT_TOKEN_METADATA_KEY = 'authorization';
/** JWT header `typ`: an agent token cannot pass for an API token, nor the other way round. */
export const AGENT_TOKEN_TYPE = 'strata-agent+jwt';
export const AGENT_TOKEN_ISSUER = 'strata-agent';
/** What agents ask for: long enough that renewals are rare, short enough that a leaked token soon dies. */
export const AGENT_TOKEN_LIFETIME_SECONDS = 300;
/** A token is refused this long after it was issued, whatever its `exp` says. */
export const AGENT_TOKEN_MAX_AGE_SECONDS = 900;

const ALGORITHM = 'HS256';

/** What a verified agent token says. */
export interface AgentTokenClaims {
  readonly serverUUID: string;
  readonly nodeUUIDs: readonly string[];
  readonly clusterUUID: string;
  /** The id of the secret that signed it (current or previous). */
  readonly secretId: string;
  readonly issuedAtMs: number;
  /** When the token stops being valid (exp, capped at the maximum age), without clock tolerance. */
  readonly expiresAtMs: number;
}

export interface SignedAgentToken {
  readonly token: string;
  readonly expiresAtMs: number;
}

// The secret's record (read, created once, rotated) is kept by lib/etcd/agent-secret-store.ts.
export { newAgentSecret } from './etcd/agent-secret-store.js';

export async function signAgentToken(
  secret: AgentSecret,
  claims: { clusterUUID: string; serverUUID: string; nodeUUIDs: readonly string[]; lifetimeSeconds?: number; now?: Date },
): Promise<SignedAgentToken> {
  const issuedAt = Math.floor((claims.now ?? new Date()).getTime() / 1000);
  const expiresAt = issuedAt + (claims.lifetimeSeconds ?? AGENT_TOKEN_LIFETIME_SECONDS);
  const token = await new SignJWT({ nodes: [...claims.nodeUUIDs] })
    .setProtectedHeader({ alg: ALGORITHM, typ: AGENT_TOKEN_TYPE, kid: secret.id })
    .setIssuer(AGENT_TOKEN_ISSUER)
    .setSubject(claims.serverUUID)
    .setAudience(claims.clusterUUID)
    .setIssuedAt(issuedAt)
    .setExpirationTime(expiresAt)
    .sign(keyBytes(secret));
  return { token, expiresAtMs: expiresAt * 1000 };
}

/** The id of the secret a token claims to be signed with; UNAUTHENTICATED when it is no agent token. */
export function agentTokenSecretId(token: string): string {
  let header;
  try {
    header = decodeProtectedHeader(token);
  } catch {
    throw errors.unauthenticated('malformed agent token');
  }
  if (header.alg !== ALGORITHM || header.typ !== AGENT_TOKEN_TYPE) {
    throw errors.unauthenticated(`not an agent token (alg ${String(header.alg)}, typ ${String(header.typ)})`);
  }
  if (typeof header.kid !== 'string' || header.kid === '') throw errors.unauthenticated('agent token names no secret (kid)');
  return header.kid;
}

/**
 * Verifies signature, type, issuer, audience (the cluster), issue time and expiry, each with
 * `clockToleranceSeconds` of skew; throws UNAUTHENTICATED with a reason that never quotes the
 * token or the secret.
 */
export async function verifyAgentToken(
  token: string,
  secret: AgentSecret,
  options: { clusterUUID: string; clockToleranceSeconds: number; now?: Date },
): Promise<AgentTokenClaims> {
  const key = keyBytes(secret);
  let payload;
  try {
    ({ payload } = await jwtVerify(token, key, {
      algorithms: [ALGORITHM],
      typ: AGENT_TOKEN_TYPE,
      issuer: AGENT_TOKEN_ISSUER,
      audience: options.clusterUUID,
      clockTolerance: options.clockToleranceSeconds,
      maxTokenAge: AGENT_TOKEN_MAX_AGE_SECONDS,
      requiredClaims: ['sub', 'exp', 'iat'],
      ...(options.now ? { currentDate: options.now } : {}),
    }));
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) throw errors.unauthenticated('agent token expired');
    if (err instanceof joseErrors.JWTClaimValidationFailed) throw errors.unauthenticated(`agent token claim invalid: ${err.message}`);
    if (err instanceof joseErrors.JWSSignatureVerificationFailed) throw errors.unauthenticated('agent token signature does not verify');
    throw errors.unauthenticated('malformed agent token');
  }
  const serverUUID = payload.sub ?? '';
  const nodes = payload['nodes'];
  if (!UUID_PATTERN.test(serverUUID)) throw errors.unauthenticated('agent token subject must be a server UUID');
  if (!Array.isArray(nodes) || !nodes.every((n): n is string => typeof n === 'string' && UUID_PATTERN.test(n))) {
    throw errors.unauthenticated('agent token claim nodes must be a list of node UUIDs');
  }
  const issuedAtMs = (payload.iat ?? 0) * 1000;
  return {
    serverUUID,
    nodeUUIDs: nodes,
    clusterUUID: options.clusterUUID,
    secretId: secret.id,
    issuedAtMs,
    expiresAtMs: Math.min((payload.exp ?? 0) * 1000, issuedAtMs + AGENT_TOKEN_MAX_AGE_SECONDS * 1000),
  };
}

function keyBytes(secret: AgentSecret): Uint8Array {
  const bytes = Buffer.from(secret.key, 'base64url');
  // A short key would make HS256 guessable; ours are 32 bytes, anything else is corruption.
  if (bytes.length < 32) throw errors.internal(`agent secret ${secret.id} is shorter than 32 bytes`);
  return bytes;
}
