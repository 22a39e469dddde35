// TLS PSKs of NVMe/TCP: the configured key's format and the per-host, per-subsystem derivation,
// against what Debian 13's nvme-cli 2.13 (libnvme 1.13) did with the same keys in a 6.12 lab guest.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { crc32 } from 'node:zlib';
import { dhchapSecretProblem, randomDhchapSecret } from './dhchap.js';
import { deriveTlsPsks, parseTlsPsk, randomTlsPsk, tlsPskProblem } from './nvme-tls-psk.js';

// `nvme gen-tls-key --hmac=1` in the guest.
const KEY = 'NVMeTLSkey-1:01:QwDxpnUS1xtxLVCaPmq68ilclXYIBjo4kYgLHSY3vgv+UYcj:';
const OTHER = 'NVMeTLSkey-1:01:sIpwlCnl15zo1pOG4agNw+pVwD+TsCzYLDkBSIqlK7XM+FTb:';
const HOST = 'nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555';
const SUBSYSTEM = 'nqn.2024-01.io.strata:probe:vol:1';

describe('lib/contract/nvme-tls-psk', () => {
  it('accepts what nvme gen-tls-key prints and refuses anything else without repeating the key', () => {
    assert.equal(tlsPskProblem(KEY), undefined);
    assert.equal(tlsPskProblem(randomTlsPsk()), undefined);
    assert.match(tlsPskProblem('NVMeTLSkey-1:03:' + KEY.split(':')[2] + ':')!, /not of the form/);
    assert.match(tlsPskProblem(KEY.replace('Qw', 'Rw'))!, /CRC-32/);
    assert.match(tlsPskProblem(KEY.replace(':01:', ':02:'))!, /32 bytes does not fit hash 02/);
    assert.match(tlsPskProblem(randomDhchapSecret())!, /not of the form NVMeTLSkey-1/);
    for (const bad of ['', 'NVMeTLSkey-1:01::', KEY.slice(0, -1)]) assert.ok(tlsPskProblem(bad));
    assert.ok(!tlsPskProblem(KEY.replace('Qw', 'Rw'))!.includes(KEY.split(':')[2]!));
  });

  it('DH-HMAC-CHAP secrets still parse through the shared key-string parser', () => {
    assert.equal(dhchapSecretProblem(randomDhchapSecret()), undefined);
    assert.match(dhchapSecretProblem(KEY)!, /not of the form DHHC-1/);
    assert.match(dhchapSecretProblem(randomDhchapSecret().replace(':00:', ':02:'))!, /fit transformation 02/);
  });

  it('derives the identities nvme-cli 2.13 presents and the keys its handshakes succeeded with', () => {
    const [v0, v1] = deriveTlsPsks(parseTlsPsk(KEY), HOST, SUBSYSTEM);
    assert.equal(v0!.identity, `NVMe0R01 ${HOST} ${SUBSYSTEM}`);
    // The digest nvme-cli 2.13 put in the identity of `nvme connect --tls-key=KEY` (keyring, /proc/keys).
    assert.equal(v1!.identity, `NVMe1R01 ${HOST} ${SUBSYSTEM} vyfng46dVIoz2YS7f4j25e9/e8hMDVOJWV0NHHRYUjY=`);
    // Inserted on the target by keyctl: the TLS 1.3 handshakes with nvme-cli 2.13's own keys
    // (`--tls-key`, version 1; `check-tls-key --insert` + `--tls`, version 0) succeeded.
    assert.equal(v0!.psk.toString('hex'), 'ba9489158f3d264517f33996319ea4778fefeaaa31e462cddb771324261c039d');
    assert.equal(v1!.psk.toString('hex'), '24d414881fd1338b46041741d098edecf8de5f68a1b0f3a2c5e5cb6e289232b4');
    const [, otherV1] = deriveTlsPsks(parseTlsPsk(OTHER), HOST, SUBSYSTEM);
    assert.equal(otherV1!.identity.split(' ')[3], 'Xz6Hl2g2d9Bp9IjlQ/gAOusTE3u8LELT7pgooahjLLk=');
  });

  it('a SHA-384 key gives 48-byte PSKs named 02', () => {
    const key = parseTlsPsk('NVMeTLSkey-1:02:' + Buffer.concat([Buffer.alloc(48, 7), crcOf(Buffer.alloc(48, 7))]).toString('base64') + ':');
    const derived = deriveTlsPsks(key, HOST, SUBSYSTEM);
    assert.deepEqual(derived.map((d) => [d.identity.slice(0, 8), d.psk.length]), [['NVMe0R02', 48], ['NVMe1R02', 48]]);
  });
});

function crcOf(key: Buffer): Buffer {
  const out = Buffer.alloc(4);
  out.writeUInt32LE(crc32(key) >>> 0);
  return out;
}
