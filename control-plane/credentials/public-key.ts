// Turns an uploaded payload into the SPKI PEM the Authenticator verifies tokens with, or says
// why it cannot. Accepted: an RSA public key as SPKI ("PUBLIC KEY") or PKCS#1 ("RSA PUBLIC
// KEY") PEM, either as text or base64-encoded (the reference API's payload is protobuf bytes).
// Refused: private keys (a public key is all the cluster needs, and a private key sent here
// has leaked), certificates, non-RSA keys, and RSA keys shorter than 2048 bits (jose refuses to
// verify RS256 with them, so tokens signed with such a key could never get in).
import { createPublicKey, type KeyObject } from 'node:crypto';
import { importSPKI } from 'jose';
import { errors } from '../../lib/errors.js';

export const MIN_RSA_BITS = 2048;
export const MAX_RSA_BITS = 16384;

const PEM_BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----[\s\S]*?-----END \1-----/g;

export async function normalizeRsaPublicKey(payload: string): Promise<string> {
  const pem = pemText(payload);
  const blocks = [...pem.matchAll(PEM_BLOCK)];
  if (blocks.length !== 1) throw invalid(blocks.length === 0 ? 'it holds no PEM block' : 'it holds more than one PEM block');
  const label = blocks[0]![1]!;
  if (/PRIVATE KEY/.test(label)) throw invalid('it is a private key; upload the public key only (and replace this key pair: its private half has left its owner)');
  if (label !== 'PUBLIC KEY' && label !== 'RSA PUBLIC KEY') throw invalid(`a "${label}" block is not accepted; give a "PUBLIC KEY" or "RSA PUBLIC KEY" block`);
  let key: KeyObject;
  try {
    key = createPublicKey({ key: blocks[0]![0], format: 'pem' });
  } catch {
    throw invalid('the PEM block does not decode to a public key');
  }
  if (key.asymmetricKeyType !== 'rsa') throw invalid(`it is a ${key.asymmetricKeyType ?? 'non-RSA'} key; RS256 needs an RSA key`);
  const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
  if (bits < MIN_RSA_BITS || bits > MAX_RSA_BITS) throw invalid(`an RS256 key must have ${MIN_RSA_BITS} to ${MAX_RSA_BITS} bits; this one has ${bits}`);
  const spki = key.export({ type: 'spki', format: 'pem' }).toString();
  try {
    await importSPKI(spki, 'RS256'); // what the Authenticator will do with it
  } catch {
    throw invalid('it cannot be used to verify RS256 signatures');
  }
  return spki;
}

function pemText(payload: string): string {
  if (payload.includes('-----BEGIN')) return payload;
  const compact = payload.replace(/\s+/g, '');
  if (/^[A-Za-z0-9+/]+={0,2}$/.test(compact)) {
    const decoded = Buffer.from(compact, 'base64').toString('utf8');
    if (decoded.includes('-----BEGIN')) return decoded;
  }
  throw invalid('it is neither PEM text nor base64-encoded PEM');
}

function invalid(reason: string) {
  return errors.invalid(`invalid request: payload is not a usable RS256 public key: ${reason}`);
}
