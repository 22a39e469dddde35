// DH-HMAC-CHAP secrets in the NVMe representation (`DHHC-1:<hh>:<base64>:`, NVMe Base
// Specification 8.13.5.8; what `nvme gen-dhchap-key` prints and what nvmet's `dhchap_key` and
// nvme-cli's `--dhchap-secret` take): hh is the transformation hash (00 none, 01 SHA-256, 02
// SHA-384, 03 SHA-512), the base64 holds the key (32, 48 or 64 bytes; with a hash, its length)
// followed by the CRC-32 of the key, little endian. One parser for the API and the agent.
import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';

const KEY_LENGTHS: Readonly<Record<string, readonly number[]>> = { '00': [32, 48, 64], '01': [32], '02': [48], '03': [64] };

/** Why `secret` is not a DH-HMAC-CHAP secret, or undefined when it is one. */
export function dhchapSecretProblem(secret: string): string | undefined {
  const match = /^DHHC-1:(0[0-3]):([A-Za-z0-9+/]+={0,2}):$/.exec(secret);
  if (!match) return 'not of the form DHHC-1:<00|01|02|03>:<base64 key and CRC-32>: (as nvme gen-dhchap-key prints it)';
  const [, hash, b64] = match as unknown as [string, string, string];
  const bytes = Buffer.from(b64, 'base64');
  if (bytes.toString('base64') !== b64) return 'its key is not valid base64';
  const key = bytes.subarray(0, bytes.length - 4);
  if (!KEY_LENGTHS[hash]!.includes(key.length)) return `a key of ${key.length} bytes does not fit transformation ${hash} (${KEY_LENGTHS[hash]!.join(', ')} bytes)`;
  if (bytes.readUInt32LE(bytes.length - 4) !== crc32(key) >>> 0) return 'its CRC-32 does not match its key';
  return undefined;
}

/** A fresh random secret (no transformation, 32 bytes). */
export function randomDhchapSecret(): string {
  const key = randomBytes(32);
  const crc = Buffer.alloc(4);
  crc.writeUInt32LE(crc32(key) >>> 0);
  return `DHHC-1:00:${Buffer.concat([key, crc]).toString('base64')}:`;
}
