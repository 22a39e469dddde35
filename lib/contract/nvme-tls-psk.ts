// TLS pre-shared keys of NVMe/TCP (NVMe/TCP Transport Specification 3.6.1), as nvme-cli makes
// and takes them. An operator holds a configured PSK `NVMeTLSkey-1:<hh>:<base64 key and CRC-32>:`
// (`nvme gen-tls-key`; hh 01 = SHA-256 with a 32-byte key, 02 = SHA-384 with 48 bytes). The
// kernel never sees that key: each end keeps, in its `.nvme` keyring, TLS PSKs derived from it for
// one host and one subsystem, as keys of type `psk` described by their PSK identity; the target's
// tlshd looks up the identity the host presents. Two identity versions are in use and a target
// must hold both:
//   version 0 `NVMe0R<hh> <host NQN> <subsystem NQN>`: `nvme check-tls-key --insert` then
//     `nvme connect --tls` (Linux 6.12's host looks these up by itself);
//   version 1 `NVMe1R<hh> <host NQN> <subsystem NQN> <digest>`: `nvme connect --tls-key=...`.
// The derivation is libnvme 1.13's (nvme-cli 2.13, Debian 13; src/nvme/linux.c derive_nvme_keys):
//   retained = HKDF(configured, info = len (16 bits, little endian) "tls13 " "HostNQN" <host NQN>)
//   digest   = base64(HMAC(retained, "<host NQN> <subsystem NQN> NVMe-over-Fabrics"))       (version 1)
//   TLS PSK  = HKDF(retained, info = len "tls13 " "nvme-tls-psk" <identity> | "<hh> " <digest>)
// (HKDF-Extract with an empty salt, then Expand; the hash is the key's). libnvme 1.16 moved to
// RFC 8446's HkdfLabel and kept this one as its compatibility variant (docs/nvme-tcp-tls.md).
import { createHmac, hkdfSync, randomBytes } from 'node:crypto';
import { formatNvmeKeyString, parseNvmeKeyString } from './nvme-key-string.js';

const PREFIX = 'NVMeTLSkey-1';
const KEY_LENGTHS: Readonly<Record<string, readonly number[]>> = { '01': [32], '02': [48] };
const DIGEST: Readonly<Record<string, 'sha256' | 'sha384'>> = { '01': 'sha256', '02': 'sha384' };
const FORM = 'NVMeTLSkey-1:<01|02>:<base64 key and CRC-32>: (as nvme gen-tls-key prints it)';

export interface ConfiguredPsk {
  /** '01' (SHA-256) or '02' (SHA-384). */
  readonly hash: string;
  readonly key: Buffer;
}

/** Why `psk` is not a configured TLS PSK, or undefined when it is one. Never repeats the key. */
export function tlsPskProblem(psk: string): string | undefined {
  const parsed = parseNvmeKeyString(PREFIX, KEY_LENGTHS, psk, FORM);
  return typeof parsed === 'string' ? parsed : undefined;
}

export function parseTlsPsk(psk: string): ConfiguredPsk {
  const parsed = parseNvmeKeyString(PREFIX, KEY_LENGTHS, psk, FORM);
  if (typeof parsed === 'string') throw new Error(`not a TLS PSK: ${parsed}`);
  return parsed;
}

/** A fresh configured PSK (SHA-256, 32 bytes), as `nvme gen-tls-key` makes one. */
export function randomTlsPsk(): string {
  return formatNvmeKeyString(PREFIX, '01', randomBytes(32));
}

export interface DerivedTlsPsk {
  /** The key's description in the keyring. */
  readonly identity: string;
  /** The key's payload. */
  readonly psk: Buffer;
}

/** The TLS PSKs of one host and subsystem, identity versions 0 and 1. */
export function deriveTlsPsks(configured: ConfiguredPsk, hostNQN: string, subsystemNQN: string): DerivedTlsPsk[] {
  const digest = DIGEST[configured.hash]!;
  const retained = hkdf(digest, configured.key, ['HostNQN', hostNQN]);
  const v0 = `NVMe0R${configured.hash} ${hostNQN} ${subsystemNQN}`;
  const mac = createHmac(digest, retained).update(`${hostNQN} ${subsystemNQN} NVMe-over-Fabrics`).digest('base64');
  const v1 = `NVMe1R${configured.hash} ${hostNQN} ${subsystemNQN} ${mac}`;
  return [
    { identity: v0, psk: hkdf(digest, retained, ['nvme-tls-psk', v0]) },
    { identity: v1, psk: hkdf(digest, retained, ['nvme-tls-psk', `${configured.hash} `, mac]) },
  ];
}

/** libnvme 1.13's HKDF: the info is the output length (16 bits, little endian), "tls13 " and the parts, unframed. */
function hkdf(digest: string, ikm: Buffer, parts: readonly string[]): Buffer {
  const length = Buffer.alloc(2);
  length.writeUInt16LE(ikm.length);
  const info = Buffer.concat([length, Buffer.from('tls13 '), ...parts.map((p) => Buffer.from(p))]);
  return Buffer.from(hkdfSync(digest, ikm, Buffer.alloc(0), info, ikm.length));
}
