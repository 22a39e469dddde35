// Signing tokens with a private key (the installation's root key, or a test's own key pair).
import { SignJWT, importPKCS8, type CryptoKey, type KeyObject } from 'jose';
import { randomUUID } from 'node:crypto';

export interface TokenRequest {
  readonly kid: string;
  readonly subject: string;
  readonly roles: readonly string[];
  readonly ttlSeconds: number;
  readonly issuer?: string;
}

export async function importPrivateKey(pem: string): Promise<CryptoKey | KeyObject> {
  return importPKCS8(pem, 'RS256');
}

export async function signToken(privateKey: CryptoKey | KeyObject, request: TokenRequest): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ roles: [...request.roles] })
    .setProtectedHeader({ alg: 'RS256', kid: request.kid, typ: 'JWT' })
    .setSubject(request.subject)
    .setIssuer(request.issuer ?? 'strata')
    .setIssuedAt(now)
    .setNotBefore(now - 60)
    .setExpirationTime(now + request.ttlSeconds)
    .setJti(randomUUID())
    .sign(privateKey);
}
