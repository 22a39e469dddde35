// The cluster CA and the certificates it issues (docs/security.md). Keys are P-256, made by
// Node's crypto; certificates are signed by the `openssl` program (execFile, argument arrays):
// Node can verify X.509 but cannot create it. Private keys go to openssl through a 0700 temp
// directory that is removed at once.
import { execFile } from 'node:child_process';
import { X509Certificate, createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * The name every control plane's certificate carries, and that agents verify (gRPC's target
 * name override): agents reach control planes through addresses the certificate cannot know
 * (NAT, forwarded ports), and only the cluster CA issues certificates with it.
 */
export const CONTROL_PLANE_TLS_NAME = 'strata-control-plane';

/** PEM certificate and its PEM (PKCS#8) private key. */
export interface CertificateAndKey {
  readonly certificate: string;
  readonly privateKey: string;
}

export const CA_VALIDITY_DAYS = 3650;
export const SERVER_VALIDITY_DAYS = 397;

function newPrivateKey(): string {
  return generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
}

async function withTempDir<T>(work: (dir: string) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'strata-tls-'));
  try {
    return await work(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function openssl(args: string[]): Promise<string> {
  try {
    return (await run('openssl', args, { maxBuffer: 1024 * 1024 })).stdout;
  } catch (err) {
    const e = err as Error & { code?: string; stderr?: string };
    if (e.code === 'ENOENT') throw new Error('cannot run openssl (install Debian\'s openssl package): it signs the cluster\'s certificates');
    throw new Error(`openssl ${args[0]} failed: ${(e.stderr ?? e.message).trim()}`);
  }
}

/** A new self-signed CA for the cluster `clusterUUID`. */
export async function createCertificateAuthority(clusterUUID: string): Promise<CertificateAndKey> {
  const privateKey = newPrivateKey();
  const certificate = await withTempDir(async (dir) => {
    writeFileSync(join(dir, 'ca.key'), privateKey, { mode: 0o600 });
    return openssl([
      'req', '-x509', '-new', '-key', join(dir, 'ca.key'), '-sha256', '-days', String(CA_VALIDITY_DAYS),
      '-subj', `/O=Strata/CN=Strata cluster CA ${clusterUUID}`,
      '-addext', 'basicConstraints=critical,CA:TRUE,pathlen:0',
      '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
    ]);
  });
  return { certificate, privateKey };
}

/** A server certificate signed by `ca` for these names (IP addresses and DNS names). */
export async function issueServerCertificate(ca: CertificateAndKey, commonName: string, names: readonly string[], days = SERVER_VALIDITY_DAYS): Promise<CertificateAndKey> {
  const privateKey = newPrivateKey();
  const san = [...new Set(names)].map((n) => (isIP(n) !== 0 ? `IP:${n}` : `DNS:${n}`)).join(',');
  const certificate = await withTempDir(async (dir) => {
    writeFileSync(join(dir, 'ca.key'), ca.privateKey, { mode: 0o600 });
    writeFileSync(join(dir, 'ca.pem'), ca.certificate);
    writeFileSync(join(dir, 'server.key'), privateKey, { mode: 0o600 });
    return openssl([
      'req', '-x509', '-new', '-key', join(dir, 'server.key'), '-CA', join(dir, 'ca.pem'), '-CAkey', join(dir, 'ca.key'),
      '-sha256', '-days', String(days), '-subj', `/O=Strata/CN=${commonName.replace(/[/=+,]/g, '_')}`,
      '-addext', 'basicConstraints=critical,CA:FALSE',
      '-addext', 'keyUsage=critical,digitalSignature',
      '-addext', 'extendedKeyUsage=serverAuth,clientAuth',
      '-addext', `subjectAltName=${san}`,
    ]);
  });
  return { certificate, privateKey };
}

/** Whether `certificate` was signed by `caCertificate`'s key (and is within its validity). */
export function signedBy(certificate: string, caCertificate: string): boolean {
  try {
    const cert = new X509Certificate(certificate);
    const now = Date.now();
    return cert.verify(new X509Certificate(caCertificate).publicKey) && Date.parse(cert.validFrom) <= now && now <= Date.parse(cert.validTo);
  } catch {
    return false;
  }
}

/** Throws unless `pair` is a certificate with the private key that matches it. */
export function checkPair(pair: CertificateAndKey, what: string): void {
  const cert = new X509Certificate(pair.certificate);
  if (!cert.checkPrivateKey(createPrivateKey(pair.privateKey))) throw new Error(`${what}: the private key does not belong to the certificate`);
}
