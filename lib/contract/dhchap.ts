// DH-HMAC-CHAP secrets in the NVMe representation (`DHHC-1:<hh>:<base64>:`, NVMe Base
// Specification 8.13.5.8; what `nvme gen-dhchap-key` prints and what nvmet's `dhchap_key` and
// nvme-cli's `--dhchap-secret` take): hh is the transformation hash (00 none, 01 SHA-256, 02
// SHA-384, 03 SHA-512), the base64 holds the key (32, 48 or 64 bytes; with a hash, its length)
// followed by the CRC-32 of the key, little endian. One parser for the API and the agent.
import { randomBytes } from 'node:crypto';
import { formatNvmeKeyString, parseNvmeKeyString } from './nvme-key-string.js';

const KEY_LENGTHS: Readonly<Record<string, readonly number[]>> = { '00': [32, 48, 64], '01': [32], '02': [48], '03': [64] };

/** Why `secret` is not a DH-HMAC-CHAP secret, or undefined when it is one. */
export function dhchapSecretProblem(secret: string): string | undefined {
  const parsed = parseNvmeKeyString('DHHC-1', KEY_LENGTHS, secret, 'DHHC-1:<00|01|02|03>:<base64 key and CRC-32>: (as nvme gen-dhchap-key prints it)');
  return typeof parsed === 'string' ? parsed.replace(/fit hash/, 'fit transformation') : undefined;
}

/** A fresh random secret (no transformation, 32 bytes). */
export function randomDhchapSecret(): string {
  return formatNvmeKeyString('DHHC-1', '00', randomBytes(32));
}
