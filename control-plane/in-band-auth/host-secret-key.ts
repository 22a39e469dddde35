// The key trusted hosts' DH-HMAC-CHAP secrets are encrypted with in etcd (docs/security.md): 32
// random bytes in the control plane's state directory (`host-secrets.key`, mode 0600), created by
// the first control plane that starts without one, never written to etcd. etcd holds only its id
// (the first 16 hex digits of its SHA-256), so a control plane whose file differs (another key, or
// a new control plane not given the file) refuses secret operations with 503 instead of writing
// secrets nobody else can read. AES-256-GCM; the associated data binds a ciphertext to its record.
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { errors } from '../../lib/errors.js';
import { writeFileAtomic } from '../../lib/files.js';
import type { SecretCiphertext } from '../../lib/records.js';

export const HOST_SECRET_KEY_FILE = 'host-secrets.key';

export class HostSecretKey {
  readonly kid: string;

  private constructor(private readonly key: Buffer, readonly path: string) {
    this.kid = createHash('sha256').update(key).digest('hex').slice(0, 16);
  }

  /** Reads the state directory's key, creating it when absent. */
  static load(stateDir: string): HostSecretKey {
    mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    const path = join(stateDir, HOST_SECRET_KEY_FILE);
    if (!existsSync(path)) writeFileAtomic(path, randomBytes(32).toString('base64') + '\n', 0o600);
    const key = Buffer.from(readFileSync(path, 'utf8').trim(), 'base64');
    if (key.length !== 32) throw new Error(`${path}: not a 32-byte key in base64`);
    return new HostSecretKey(key, path);
  }

  encrypt(plaintext: string, associatedData: string): SecretCiphertext {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(associatedData));
    const data = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return { kid: this.kid, iv: iv.toString('base64'), tag: cipher.getAuthTag().toString('base64'), data: data.toString('base64') };
  }

  decrypt(ciphertext: SecretCiphertext, associatedData: string): string {
    if (ciphertext.kid !== this.kid) throw this.otherKey(ciphertext.kid);
    const decipher = createDecipheriv('aes-256-gcm', this.key, Buffer.from(ciphertext.iv, 'base64'));
    decipher.setAAD(Buffer.from(associatedData));
    decipher.setAuthTag(Buffer.from(ciphertext.tag, 'base64'));
    return Buffer.concat([decipher.update(Buffer.from(ciphertext.data, 'base64')), decipher.final()]).toString('utf8');
  }

  /** 503: the cluster's secrets are sealed with another key than this control plane's file. */
  otherKey(kid: string) {
    return errors.unavailable(
      `this control plane's host-secret key (${this.path}, id ${this.kid}) is not the cluster's (id ${kid}): copy host-secrets.key from a control plane that has it (docs/security.md)`,
    );
  }
}
