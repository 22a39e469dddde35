// The TLS PSKs an agent keeps in the .nvme keyring: one pair per (admitted host with a PSK,
// volume subsystem in configfs), nothing of other clusters or of replication legs touched, all
// gone when TLS is no longer required. /proc/keys lines as read in a 6.12 lab guest.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { volumeNqnPrefix } from '../../../lib/contract/nqn.js';
import { deriveTlsPsks, parseTlsPsk, randomTlsPsk } from '../../../lib/contract/nvme-tls-psk.js';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { parseProcKeys, subsystemOfIdentity, TlsPskKeyring, type Keyring, type KeyringKey } from './tls-keyring.js';

const PREFIX = volumeNqnPrefix('nqn.2024-01.io.strata:cluster:c1');
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000002';
const H3 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000003';

class FakeKeyring implements Keyring {
  keys: (KeyringKey & { payload?: Buffer })[] = [{ serial: '0x138712e5', type: 'keyring', description: '.nvme' }];
  private next = 1;
  async list() {
    return this.keys.map(({ serial, type, description }) => ({ serial, type, description }));
  }
  async add(keyring: string, description: string, payload: Buffer) {
    assert.equal(keyring, '0x138712e5');
    this.keys = this.keys.filter((k) => k.description !== description);
    this.keys.push({ serial: `0x${(this.next++).toString(16)}`, type: 'psk', description, payload });
  }
  async unlink(keyring: string, serial: string) {
    assert.equal(keyring, '0x138712e5');
    this.keys = this.keys.filter((k) => k.serial !== serial);
  }
  psks() {
    return this.keys.filter((k) => k.type === 'psk').map((k) => k.description).sort();
  }
}

describe('TLS PSKs in the .nvme keyring', () => {
  const root = mkdtempSync(join(tmpdir(), 'strata-tls-keyring-'));
  after(() => rmSync(root, { recursive: true, force: true }));
  const subsystem = (nqn: string, anyHost: boolean, hosts: string[]) => {
    mkdirSync(join(root, 'subsystems', nqn, 'allowed_hosts'), { recursive: true });
    writeFileSync(join(root, 'subsystems', nqn, 'attr_allow_any_host'), anyHost ? '1\n' : '0\n');
    for (const h of hosts) mkdirSync(join(root, 'subsystems', nqn, 'allowed_hosts', h));
  };

  it('parses /proc/keys as the kernel writes it', () => {
    const keys = parseProcKeys(
      [
        '138712e5 I------     3 perm 1f1f0000     0     0 keyring   .nvme: 1',
        `3e47cd89 I--Q---     1 perm 3b010000     0     0 psk       NVMe0R01 ${H1} ${PREFIX}v1: 32`,
        `09385211 I--Q---     1 perm 3b010000     0     0 psk       NVMe1R01 ${H1} ${PREFIX}v1 vyfng46dVIoz2YS7f4j25e9/e8hMDVOJWV0NHHRYUjY=: 32`,
        '',
      ].join('\n'),
    );
    assert.deepEqual(keys, [
      { serial: '0x138712e5', type: 'keyring', description: '.nvme' },
      { serial: '0x3e47cd89', type: 'psk', description: `NVMe0R01 ${H1} ${PREFIX}v1` },
      { serial: '0x09385211', type: 'psk', description: `NVMe1R01 ${H1} ${PREFIX}v1 vyfng46dVIoz2YS7f4j25e9/e8hMDVOJWV0NHHRYUjY=` },
    ]);
    assert.equal(subsystemOfIdentity(keys[2]!.description), `${PREFIX}v1`);
    assert.equal(subsystemOfIdentity('.nvme'), undefined);
  });

  it('keeps one pair of keys per admitted host with a PSK and volume subsystem, and only those', async () => {
    const k1 = randomTlsPsk();
    const k2 = randomTlsPsk();
    subsystem(`${PREFIX}v1`, false, [H1, H3]);
    subsystem(`${PREFIX}v2`, true, []);
    subsystem(`${PREFIX}v1:rep:n2`, false, [H1]);
    subsystem('nqn.2024-01.io.strata:cluster:other:vol:v9', false, [H1]);
    const fake = new FakeKeyring();
    const foreign = `NVMe0R01 ${H1} nqn.2024-01.io.strata:cluster:other:vol:v9`;
    fake.keys.push({ serial: '0x77', type: 'psk', description: foreign });
    let psks: Map<string, string> | undefined = new Map([[H1, k1], [H2, k2]]);
    const keyring = new TlsPskKeyring({ psks: () => psks, subsystemPrefix: () => PREFIX, nvmetRoot: root, keyring: fake, logger: silentLogger() });
    await keyring.sync();
    const pairs = (host: string, psk: string, nqn: string) => deriveTlsPsks(parseTlsPsk(psk), host, nqn).map((d) => d.identity);
    assert.deepEqual(fake.psks(), [...pairs(H1, k1, `${PREFIX}v1`), ...pairs(H1, k1, `${PREFIX}v2`), ...pairs(H2, k2, `${PREFIX}v2`), foreign].sort());
    const payload = fake.keys.find((k) => k.description === pairs(H1, k1, `${PREFIX}v1`)[1])!.payload!;
    assert.deepEqual(payload, deriveTlsPsks(parseTlsPsk(k1), H1, `${PREFIX}v1`)[1]!.psk);

    // Rotation replaces the keys; a host without a PSK any more loses them.
    const k1b = randomTlsPsk();
    psks = new Map([[H1, k1b]]);
    await keyring.sync();
    assert.deepEqual(fake.psks(), [...pairs(H1, k1b, `${PREFIX}v1`), ...pairs(H1, k1b, `${PREFIX}v2`), foreign].sort());
    // TLS no longer required: every key of this cluster goes, the other cluster's stays.
    psks = undefined;
    await keyring.sync();
    assert.deepEqual(fake.psks(), [foreign]);
  });
});
