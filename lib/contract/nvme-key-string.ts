// The NVMe representation of a key as a string, `<prefix>:<hh>:<base64>:`, shared by DH-HMAC-CHAP
// secrets (`DHHC-1`, dhchap.ts) and TLS PSKs (`NVMeTLSkey-1`, nvme-tls-psk.ts): hh names a hash,
// the base64 holds the key followed by the CRC-32 of the key, little endian (NVMe Base
// Specification 8.13.5.8; NVMe/TCP Transport Specification 3.6.1.5).
import { crc32 } from 'node:zlib';

export interface NvmeKeyString {
  readonly hash: string;
  readonly key: Buffer;
}

/**
 * The key of `value`, or why it is not one: `lengths` gives the key lengths each hash field
 * allows; `form` is what the message shows as the expected shape.
 */
export function parseNvmeKeyString(prefix: string, lengths: Readonly<Record<string, readonly number[]>>, value: string, form: string): NvmeKeyString | string {
  const match = new RegExp(`^${prefix}:([0-9]{2}):([A-Za-z0-9+/]+={0,2}):$`).exec(value);
  if (!match || !lengths[match[1]!]) return `not of the form ${form}`;
  const [, hash, b64] = match as unknown as [string, string, string];
  const bytes = Buffer.from(b64, 'base64');
  if (bytes.toString('base64') !== b64) return 'its key is not valid base64';
  const key = bytes.subarray(0, Math.max(0, bytes.length - 4));
  if (!lengths[hash]!.includes(key.length)) return `a key of ${key.length} bytes does not fit hash ${hash} (${lengths[hash]!.join(', ')} bytes)`;
  if (bytes.readUInt32LE(bytes.length - 4) !== crc32(key) >>> 0) return 'its CRC-32 does not match its key';
  return { hash, key };
}

/** `<prefix>:<hash>:<base64 of key and its CRC-32>:` */
export function formatNvmeKeyString(prefix: string, hash: string, key: Buffer): string {
  const crc = Buffer.alloc(4);
  crc.writeUInt32LE(crc32(key) >>> 0);
  return `${prefix}:${hash}:${Buffer.concat([key, crc]).toString('base64')}:`;
}
