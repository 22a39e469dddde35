// Secrets sealed to one server (in-band authentication, docs/security.md): X25519 between a fresh
// ephemeral key and the server's published public key, HKDF-SHA256 to an AES-256-GCM key, the
// associated data binding the box to its server. The control plane seals, the server's agent
// opens with the private key it keeps in its state directory: etcd only ever holds the box.
import { createCipheriv, createDecipheriv, createPrivateKey, createPublicKey, diffieHellman, generateKeyPairSync, hkdfSync, randomBytes, type KeyObject } from 'node:crypto';

export interface SealedBox {
  /** The ephemeral X25519 public key, SPKI DER, base64. */
  readonly epk: string;
  readonly iv: string;
  readonly tag: string;
  readonly data: string;
}

const INFO = Buffer.from('strata sealed box v1');

function boxKey(privateKey: KeyObject, publicKey: KeyObject, salt: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', diffieHellman({ privateKey, publicKey }), salt, INFO, 32));
}

/** A new X25519 key pair: the public key as SPKI DER base64 (what is published), the private as PKCS#8 PEM. */
export function newBoxKeyPair(): { publicKey: string; privateKeyPem: string } {
  const { publicKey, privateKey } = generateKeyPairSync('x25519');
  return { publicKey: publicKey.export({ type: 'spki', format: 'der' }).toString('base64'), privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
}

/** The published public key of a private key (PEM). */
export function boxPublicKeyOf(privateKeyPem: string): string {
  return createPublicKey(createPrivateKey(privateKeyPem)).export({ type: 'spki', format: 'der' }).toString('base64');
}

export function seal(recipientPublicKey: string, plaintext: Buffer, associatedData: string): SealedBox {
  const recipient = createPublicKey({ key: Buffer.from(recipientPublicKey, 'base64'), format: 'der', type: 'spki' });
  const ephemeral = generateKeyPairSync('x25519');
  const epk = ephemeral.publicKey.export({ type: 'spki', format: 'der' });
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', boxKey(ephemeral.privateKey, recipient, epk), iv);
  cipher.setAAD(Buffer.from(associatedData));
  const data = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return { epk: epk.toString('base64'), iv: iv.toString('base64'), tag: cipher.getAuthTag().toString('base64'), data: data.toString('base64') };
}

/** Opens a box sealed to this private key; throws when it was not, or was altered. */
export function open(privateKeyPem: string, box: SealedBox, associatedData: string): Buffer {
  const epk = Buffer.from(box.epk, 'base64');
  const decipher = createDecipheriv('aes-256-gcm', boxKey(createPrivateKey(privateKeyPem), createPublicKey({ key: epk, format: 'der', type: 'spki' }), epk), Buffer.from(box.iv, 'base64'));
  decipher.setAAD(Buffer.from(associatedData));
  decipher.setAuthTag(Buffer.from(box.tag, 'base64'));
  return Buffer.concat([decipher.update(Buffer.from(box.data, 'base64')), decipher.final()]);
}
