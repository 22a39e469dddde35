// probeKernelCapabilities on fixture trees shaped like Debian 13's 6.12 and Debian 12's 6.1.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { CAPABILITY_PROBE_HOST, probeKernelCapabilities } from './kernel-capabilities.js';

describe('kernel capabilities, read from the running kernel', () => {
  const dirs: string[] = [];
  after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
  const tree = (files: Record<string, string>, dirsToMake: string[] = []): string => {
    const root = mkdtempSync(join(tmpdir(), 'strata-kcap-'));
    dirs.push(root);
    for (const d of dirsToMake) mkdirSync(join(root, d), { recursive: true });
    for (const [path, content] of Object.entries(files)) {
      mkdirSync(join(root, path, '..'), { recursive: true });
      writeFileSync(join(root, path), content);
    }
    return root;
  };

  test('6.12: nvmet host dhchap_key, nvmet-tcp TLS parameter, ublk and dm-vdo in the kernel’s module lists', async () => {
    const root = tree(
      {
        'sys/module/nvmet_tcp/parameters/tls_handshake_timeout': '10\n',
        'nvmet/hosts/nqn.2014-08.org.nvmexpress:uuid:1/dhchap_key': '\n',
        'modules/modules.order': 'kernel/drivers/block/ublk_drv.ko\nkernel/drivers/md/dm-vdo/dm-vdo.ko\n',
        'proc/1/comm': 'init\n',
        'proc/812/comm': 'tlshd\n',
        'proc/self/comm': 'tlshd\n',
      },
      ['nvmet/subsystems', 'nvmet/ports'],
    );
    assert.deepEqual(await probeKernelCapabilities({ sysfsRoot: join(root, 'sys'), nvmetRoot: join(root, 'nvmet'), modulesDir: join(root, 'modules'), procRoot: join(root, 'proc') }), {
      nvmetInBandAuth: true,
      nvmeTcpTls: true,
      tlshd: true,
      ublk: true,
      dmVdo: true,
    });
  });

  test('6.1: no dhchap attributes (the probe host entry is removed again), no TLS parameter, no such modules', async () => {
    const root = tree({ 'sys/module/nvmet_tcp/parameters/.keep': '', 'modules/modules.order': 'kernel/drivers/nvme/target/nvmet.ko\n', 'proc/1/comm': 'init\n', 'proc/2/comm': 'tlshd-helper\n' }, ['nvmet/hosts']);
    assert.deepEqual(await probeKernelCapabilities({ sysfsRoot: join(root, 'sys'), nvmetRoot: join(root, 'nvmet'), modulesDir: join(root, 'modules'), procRoot: join(root, 'proc') }), {
      nvmetInBandAuth: false,
      nvmeTcpTls: false,
      tlshd: false,
      ublk: false,
      dmVdo: false,
    });
    assert.equal(existsSync(join(root, 'nvmet', 'hosts', CAPABILITY_PROBE_HOST)), false, 'probe entry removed');
  });

  test('a loaded or built-in module counts (sysfs module/<name>); no nvmet at all means no in-band authentication', async () => {
    const root = tree({ 'sys/module/ublk_drv/refcnt': '0\n', 'modules/modules.builtin': 'kernel/drivers/md/dm-vdo/dm-vdo.ko\n' });
    assert.deepEqual(await probeKernelCapabilities({ sysfsRoot: join(root, 'sys'), nvmetRoot: undefined, modulesDir: join(root, 'modules'), procRoot: join(root, 'proc') }), {
      nvmetInBandAuth: false,
      nvmeTcpTls: false,
      tlshd: false,
      ublk: true,
      dmVdo: true,
    });
  });
});
