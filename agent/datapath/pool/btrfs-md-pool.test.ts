// Decisions of the md + btrfs pool bring-up, against a fake sysfs and a scripted command runner
// (the real mdadm/mkfs/mount run in the QEMU e2e test, kernel.e2e.ts).
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { createFakeSysfs } from '../../../test/helpers/sysfs-fixture.js';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { arrayNameOf, exportedName, prepareBtrfsMdPool, raidLevelOf } from './btrfs-md-pool.js';
import { PoolError, type CommandRunner } from './storage-pool.js';

const NODE = 'abcdef01-2345-4678-8901-234567890abc';
const NAME = arrayNameOf(NODE);

describe('md + btrfs pool', () => {
  const sysfs = createFakeSysfs();
  after(() => sysfs.cleanup());
  for (const [i, serial] of ['D1', 'D2', 'D3', 'J1'].entries()) {
    sysfs.addController({ name: `nvme${i}`, serial, pciAddress: `0000:0${i}:00.0`, namespaces: [{ name: `nvme${i}n1`, sectors: 1000 }] });
  }
  sysfs.write('block/md127/md/level', 'raid5\n');
  const mountPoint = join(sysfs.root, 'pool');

  /** A runner answering from a table keyed by "command arg1 arg2 ..."; records every call. */
  function scripted(answers: Record<string, string | { code: number; stderr?: string }>) {
    const calls: string[] = [];
    const run: CommandRunner = async (command, args) => {
      const line = [command, ...args].join(' ');
      calls.push(line);
      const answer = Object.entries(answers).find(([prefix]) => line.startsWith(prefix))?.[1];
      if (answer === undefined) throw Object.assign(new Error(`unexpected command: ${line}`), { code: 99 });
      if (typeof answer === 'string') return { stdout: answer, stderr: '' };
      throw Object.assign(new Error(`${command} exited ${answer.code}`), { code: answer.code, stderr: answer.stderr ?? '' });
    };
    return { run, calls };
  }
  const options = (run: CommandRunner, dataSerials = ['D1', 'D2', 'D3'], journalSerial = 'J1', ec = true) => ({
    nodeUUID: NODE,
    devices: { dataSerials, journalSerial, ec },
    mountPoint,
    sysfsRoot: sysfs.root,
    mountsPath: sysfs.mountsPath,
    run,
    logger: silentLogger(),
  });

  it('picks the RAID level from the device count and ec', () => {
    assert.deepEqual(raidLevelOf({ dataSerials: ['a'], journalSerial: '', ec: false }), { level: '1', force: true });
    assert.deepEqual(raidLevelOf({ dataSerials: ['a', 'b'], journalSerial: '', ec: false }), { level: '0', force: false });
    assert.deepEqual(raidLevelOf({ dataSerials: ['a', 'b', 'c'], journalSerial: '', ec: true }), { level: '5', force: false });
    assert.deepEqual(raidLevelOf({ dataSerials: ['a', 'b', 'c', 'd'], journalSerial: '', ec: true }), { level: '6', force: false });
    assert.throws(() => raidLevelOf({ dataSerials: ['a', 'b'], journalSerial: '', ec: true }), PoolError);
    assert.throws(() => raidLevelOf({ dataSerials: [], journalSerial: '', ec: false }), PoolError);
    assert.equal(exportedName('MD_LEVEL=raid5\nMD_NAME=host:strata-abcdef01\n'), 'strata-abcdef01');
    assert.equal(exportedName('MD_NAME=strata-x\n'), 'strata-x');
    assert.equal(exportedName('MD_LEVEL=raid5\n'), undefined);
  });

  it('creates raid5 with the write journal and btrfs on blank devices, then mounts it', async () => {
    const { run, calls } = scripted({
      'mdadm --detail': { code: 1 },
      'mdadm --examine': { code: 1 },
      'blkid -p -o value -s TYPE /dev/nvme': { code: 2 },
      'mdadm --create': '',
      [`blkid -p -o value -s TYPE /dev/md/${NAME}`]: { code: 2 },
      'mkfs.btrfs': '',
      mount: '',
    });
    const result = await prepareBtrfsMdPool(options(run));
    assert.deepEqual(result, { mdDevice: `/dev/md/${NAME}`, level: 'raid5', created: true, mounted: true });
    assert.ok(
      calls.includes(
        `mdadm --create /dev/md/${NAME} --run --metadata=1.2 --level=5 --raid-devices=3 --name=${NAME} --write-journal /dev/nvme3n1 /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1`,
      ),
      calls.join('\n'),
    );
    assert.ok(calls.includes(`mkfs.btrfs -q -L ${NAME} /dev/md/${NAME}`));
    assert.ok(calls.includes(`mount -t btrfs /dev/md/${NAME} ${mountPoint}`));
  });

  it('assembles an array whose members carry its superblocks; uses a running one as is', async () => {
    const ours = `MD_LEVEL=raid5\nMD_NAME=otherhost:${NAME}\n`;
    const assemble = scripted({ 'mdadm --detail': { code: 1 }, 'mdadm --examine': ours, 'mdadm --assemble': '', blkid: 'btrfs\n', mount: '' });
    assert.equal((await prepareBtrfsMdPool(options(assemble.run))).created, false);
    assert.ok(assemble.calls.some((c) => c.startsWith(`mdadm --assemble /dev/md/${NAME} --run /dev/nvme0n1`)));
    assert.ok(!assemble.calls.some((c) => c.startsWith('mdadm --create') || c.startsWith('mkfs')));

    writeFileSync(sysfs.mountsPath, `proc /proc proc rw 0 0\n/dev/md127 ${mountPoint} btrfs rw 0 0\n`);
    const running = scripted({ 'mdadm --detail --export /dev/md127': `MD_NAME=h:${NAME}\n`, blkid: 'btrfs\n' });
    assert.deepEqual(await prepareBtrfsMdPool(options(running.run)), { mdDevice: '/dev/md127', level: 'raid5', created: false, mounted: false });
    assert.ok(!running.calls.some((c) => c.startsWith('mount') || c.startsWith('mdadm --assemble')));
    writeFileSync(sysfs.mountsPath, 'proc /proc proc rw 0 0\n');
  });

  it('assembles from the listed devices that carry its superblock; the others wait for the growth steps', async () => {
    // D3 was added to the node after the array was created (blank), D2 belongs to another array:
    // neither is touched here (pool-growth.ts adds D3 and reports D2 Failed).
    const partial = scripted({
      'mdadm --detail': { code: 1 },
      'mdadm --examine --export /dev/nvme0n1': `MD_NAME=h:${NAME}\n`,
      'mdadm --examine --export /dev/nvme1n1': 'MD_NAME=h:someone-else\n',
      'mdadm --examine --export /dev/nvme3n1': `MD_NAME=h:${NAME}\n`,
      'mdadm --examine': { code: 1 },
      'mdadm --assemble': '',
      blkid: 'btrfs\n',
      mount: '',
    });
    const result = await prepareBtrfsMdPool(options(partial.run));
    assert.equal(result.created, false);
    assert.ok(partial.calls.includes(`mdadm --assemble /dev/md/${NAME} --run /dev/nvme0n1 /dev/nvme3n1`), partial.calls.join('\n'));
    assert.ok(!partial.calls.some((c) => c.startsWith('mdadm --create') || c.startsWith('mkfs') || c.includes('nvme2n1') && !c.startsWith('mdadm --examine')));
  });

  it('refuses devices that hold anything else, or belong to another array, or are missing', async () => {
    const foreignFs = scripted({ 'mdadm --detail': { code: 1 }, 'mdadm --examine': { code: 1 }, 'blkid -p -o value -s TYPE /dev/nvme1n1': 'ext4\n', blkid: { code: 2 } });
    await assert.rejects(prepareBtrfsMdPool(options(foreignFs.run)), /nvme1n1 holds data \(ext4\)/);
    assert.ok(!foreignFs.calls.some((c) => c.startsWith('mdadm --create')));

    const foreignArrays = scripted({
      'mdadm --detail': { code: 1 },
      'mdadm --examine --export /dev/nvme0n1': 'MD_NAME=h:someone-else\n',
      'mdadm --examine': { code: 1 },
    });
    await assert.rejects(prepareBtrfsMdPool(options(foreignArrays.run)), /not one array of its own/);
    assert.ok(!foreignArrays.calls.some((c) => c.startsWith('mdadm --create') || c.startsWith('mdadm --assemble')));

    const notBtrfs = scripted({ 'mdadm --detail': { code: 1 }, 'mdadm --examine': `MD_NAME=${NAME}\n`, 'mdadm --assemble': '', blkid: 'xfs\n' });
    await assert.rejects(prepareBtrfsMdPool(options(notBtrfs.run)), /holds xfs, not btrfs/);

    await assert.rejects(prepareBtrfsMdPool(options(scripted({}).run, ['D1', 'GONE'], '', false)), /GONE is not present/);
  });
});
