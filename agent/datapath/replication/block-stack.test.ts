// The parts of the block stack that decide without the kernel: how tables compare, and the fence
// (a read-only loop device of 4 KiB sectors under every device that serves nothing) made once,
// found again by its backing file, and grown for a larger volume.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { BlockStack, REPLICATED_BLOCK_BYTES, sameTable } from './block-stack.js';

describe('device-mapper tables', () => {
  it('flakey compares by device, offset and intervals, whatever features the kernel prints back', () => {
    const wanted = '0 131072 flakey 7:0 0 0 1';
    assert.ok(sameTable('0 131072 flakey 7:0 0 0 1 2 error_reads error_writes', wanted), '6.12 prints the default as features');
    assert.ok(sameTable('0 131072 flakey 7:0 0 0 1 0 ', wanted), '6.1 prints a zero feature count');
    assert.ok(!sameTable('0 131072 flakey 7:1 0 0 1 0', wanted), 'another device');
    assert.ok(!sameTable('0 262144 flakey 7:0 0 0 1 0', wanted), 'another size');
    assert.ok(!sameTable('0 131072 linear 9:127 0', wanted), 'another target');
  });

  it('other targets compare word for word', () => {
    assert.ok(sameTable('0 131072 linear 9:127 0\n', '0 131072 linear 9:127 0'));
    assert.ok(!sameTable('0 131072 linear 9:126 0', '0 131072 linear 9:127 0'));
  });
});

describe('the fence', () => {
  function fixture() {
    const root = mkdtempSync(join(tmpdir(), 'strata-fence-'));
    const sys = join(root, 'sys');
    const fenceFile = join(root, 'run', 'fence.img');
    mkdirSync(join(sys, 'block'), { recursive: true });
    const calls: string[][] = [];
    /** losetup as the kernel would answer: the next free loop device, shown in sysfs. */
    const run = async (command: string, args: readonly string[]) => {
      calls.push([command, ...args]);
      if (command === 'losetup' && args.includes('--find')) {
        const file = args[args.length - 1]!;
        mkdirSync(join(sys, 'block', 'loop4', 'loop'), { recursive: true });
        writeFileSync(join(sys, 'block', 'loop4', 'loop', 'backing_file'), `${file}\n`);
        writeFileSync(join(sys, 'block', 'loop4', 'dev'), '7:4\n');
        writeFileSync(join(sys, 'block', 'loop4', 'size'), `${statSync(file).size / 512}\n`);
        return { stdout: '/dev/loop4\n', stderr: '' };
      }
      return { stdout: '', stderr: '' };
    };
    const stack = new BlockStack({ run, sysfsRoot: sys, devRoot: '/dev', fenceFile, reconnectDelaySeconds: 1, keepAliveSeconds: 5 });
    return { stack, calls, fenceFile, sys };
  }

  it('is one read-only loop device of 4 KiB sectors over a sparse file, made once for every volume', async () => {
    const { stack, calls, fenceFile } = fixture();
    const [a, b] = await Promise.all([stack.fenceTable(64n << 20n), stack.fenceTable(128n << 20n)]);
    assert.equal(a, '0 131072 flakey 7:4 0 0 1');
    assert.equal(b, '0 262144 flakey 7:4 0 0 1');
    const attaches = calls.filter((c) => c[0] === 'losetup');
    assert.equal(attaches.length, 1, 'two volumes at once share one fence');
    assert.ok(attaches[0]!.includes('--read-only'));
    assert.ok(attaches[0]!.includes(`--sector-size=${REPLICATED_BLOCK_BYTES}`));
    assert.equal(statSync(fenceFile).size, 2 ** 40, 'sparse 1 TiB');
    assert.equal(statSync(fenceFile).blocks, 0);
  });

  it('a volume\'s loop device is found again by its file; one detached (or reused for another file) is not', async () => {
    const { stack, sys } = fixture();
    const file = join(sys, '..', 'v.raw');
    writeFileSync(file, Buffer.alloc(8192));
    assert.equal(await stack.ensureLoop(file, false), 'loop4');
    assert.equal(await stack.loopOf(file), 'loop4');
    writeFileSync(join(sys, 'block', 'loop4', 'loop', 'backing_file'), '/elsewhere.raw\n');
    assert.equal(await stack.loopOf(file), undefined, 'loop4 serves another file now');
    assert.equal(await stack.loopOf('/elsewhere.raw'), 'loop4');
    rmSync(join(sys, 'block', 'loop4'), { recursive: true });
    assert.equal(await stack.loopOf('/elsewhere.raw'), undefined, 'detached');
  });

  it('a volume\'s loop device found again takes its file\'s new size (a replica\'s, made before the volume grew), once', async () => {
    const { stack, sys, calls } = fixture();
    const file = join(sys, '..', 'grown.raw');
    writeFileSync(file, Buffer.alloc(8192));
    const laps: string[] = [];
    const lap = (step: string) => void laps.push(step);
    assert.equal(await stack.ensureLoop(file, false, lap), 'loop4');
    assert.equal(await stack.ensureLoop(file, false, lap), 'loop4');
    assert.ok(!calls.some((c) => c.includes('--set-capacity')), 'the size it has');
    writeFileSync(file, Buffer.alloc(16384));
    assert.equal(await stack.ensureLoop(file, false, lap), 'loop4');
    assert.deepEqual(calls.filter((c) => c.includes('--set-capacity')), [['losetup', '--set-capacity', '/dev/loop4']]);
    assert.deepEqual(laps, ['loopFind', 'loopAttach', 'loopFind', 'loopSize', 'loopFind', 'loopSize', 'loopGrow'], 'each step timed: made, found, found and grown');
  });

  it('is found again by its file, and grown for a volume larger than it', async () => {
    const { stack, calls, fenceFile, sys } = fixture();
    await stack.fenceTable(1n << 20n);
    const table = await stack.fenceTable(3n << 40n);
    assert.equal(table, `0 ${(3n << 40n) / 512n} flakey 7:4 0 0 1`);
    assert.equal(statSync(fenceFile).size, 2 ** 42, 'the next power of two');
    assert.deepEqual(calls.at(-1), ['losetup', '--set-capacity', '/dev/loop4']);
    assert.equal(readFileSync(join(sys, 'block', 'loop4', 'dev'), 'utf8'), '7:4\n');
  });

  it('stopServing loads the error target, and says why, when the fence cannot be made', async () => {
    const calls: string[][] = [];
    const run = async (command: string, args: readonly string[]) => {
      calls.push([command, ...args]);
      if (command === 'losetup') throw new Error('losetup: cannot find an unused loop device');
      if (command === 'dmsetup' && args[0] === 'table') throw new Error('No such device or address');
      return { stdout: '', stderr: '' };
    };
    const root = mkdtempSync(join(tmpdir(), 'strata-fence-'));
    mkdirSync(join(root, 'sys', 'block'), { recursive: true });
    const stack = new BlockStack({ run, sysfsRoot: join(root, 'sys'), devRoot: root, fenceFile: join(root, 'run', 'fence.img'), reconnectDelaySeconds: 1, keepAliveSeconds: 5 });
    const why = await stack.stopServing('v1', 64n << 20n);
    assert.match(why?.message ?? '', /unused loop device/);
    assert.ok(calls.some((c) => c[0] === 'dmsetup' && c[1] === 'create' && c.at(-1) === '0 131072 error'), JSON.stringify(calls));
  });
});

describe('device-mapper through its ioctls (the native addon)', () => {
  it('reads and reloads tables without a dmsetup process; an unchanged table is left alone', async () => {
    const root = mkdtempSync(join(tmpdir(), 'strata-dm-'));
    mkdirSync(join(root, 'mapper'), { recursive: true });
    writeFileSync(join(root, 'mapper', 'strata-v1'), '');
    const calls: string[][] = [];
    const run = async (command: string, args: readonly string[]) => {
      calls.push([command, ...args]);
      return { stdout: '', stderr: '' };
    };
    const tables = new Map([['strata-v1', '0 131072 flakey 7:4 0 0 1 2 error_reads error_writes\n']]);
    const reloads: string[][] = [];
    const dm = {
      dmTable: async (name: string) => tables.get(name) ?? '',
      dmReload: async (name: string, table: string) => {
        reloads.push([name, table]);
        tables.set(name, `${table}\n`);
      },
    };
    const stack = new BlockStack({ run, sysfsRoot: join(root, 'sys'), devRoot: root, fenceFile: join(root, 'fence.img'), reconnectDelaySeconds: 1, keepAliveSeconds: 5, ioctls: { ...dm, loopAttach: async () => 'loop9' } });
    await stack.ensureDm('v1', '0 131072 flakey 7:4 0 0 1');
    assert.deepEqual(reloads, [], 'the fence as 6.12 prints it back is the same table');
    await stack.ensureDm('v1', '0 131072 linear 9:127 0');
    assert.deepEqual(reloads, [['strata-v1', '0 131072 linear 9:127 0']]);
    assert.equal(await stack.dmTable('v1'), '0 131072 linear 9:127 0');
    assert.deepEqual(calls, [], 'no dmsetup process');
  });
});

describe('assembling a mirror', () => {
  const volume = '0b5c3f52-8e0a-4d5e-9a55-3f1b2c4d5e6f';
  const name = 'md_0b5c3f528e0a4d5e9a553f1b';
  function fixture(arrayState: string | undefined) {
    const root = mkdtempSync(join(tmpdir(), 'strata-md-'));
    const sys = join(root, 'sys');
    mkdirSync(join(sys, 'module', 'md_mod', 'parameters'), { recursive: true });
    writeFileSync(join(sys, 'module', 'md_mod', 'parameters', 'new_array'), '');
    for (const [leg, dev] of [['loop2', '7:2'], ['nvme3n1', '259:4']] as const) {
      mkdirSync(join(sys, 'block', leg, 'holders'), { recursive: true });
      writeFileSync(join(sys, 'block', leg, 'dev'), `${dev}\n`);
    }
    const md = join(sys, 'block', name, 'md');
    if (arrayState !== undefined) {
      mkdirSync(md, { recursive: true });
      writeFileSync(join(md, 'array_state'), `${arrayState}\n`);
    }
    const calls: string[][] = [];
    const run = async (command: string, args: readonly string[]) => {
      calls.push([command, ...args]);
      // mdadm starts md127 over the local leg.
      mkdirSync(join(sys, 'block', 'loop2', 'holders', 'md127'), { recursive: true });
      return { stdout: '', stderr: '' };
    };
    const stack = new BlockStack({ run, sysfsRoot: sys, devRoot: '/dev', fenceFile: join(root, 'fence.img'), reconnectDelaySeconds: 1, keepAliveSeconds: 5 });
    return { stack, calls, sys, md };
  }

  it('through md sysfs: a named array, metadata 1.2, every leg by device number, then active; no mdadm', async () => {
    const { stack, calls, sys, md } = fixture('clear');
    // The kernel would make the array the holder of its legs once active; the fixture does it up front.
    mkdirSync(join(sys, 'block', 'loop2', 'holders', name), { recursive: true });
    const result = await stack.assembleArray(volume, 'loop2', ['nvme3n1']);
    assert.deepEqual(result, { block: name });
    assert.equal(readFileSync(join(sys, 'module', 'md_mod', 'parameters', 'new_array'), 'utf8'), name);
    assert.equal(readFileSync(join(md, 'metadata_version'), 'utf8'), '1.2');
    assert.equal(readFileSync(join(md, 'new_dev'), 'utf8'), '259:4', 'the last leg written');
    assert.equal(readFileSync(join(md, 'array_state'), 'utf8'), 'active');
    assert.deepEqual(calls, []);
  });

  it('stops a mirror md started without the local leg (a stale local superblock), and refuses', async () => {
    const { stack, calls, sys } = fixture('clear');
    // The kernel kicked loop2 and runs the array over the remote leg alone.
    mkdirSync(join(sys, 'block', 'nvme3n1', 'holders', name), { recursive: true });
    await assert.rejects(stack.assembleArray(volume, 'loop2', ['nvme3n1']), /did not start the mirror over the local leg loop2/);
    assert.deepEqual(calls, [['mdadm', '--stop', `/dev/${name}`]]);
  });

  it('with mdadm, and says why, when md sysfs cannot (an array of that name runs, or none can be made)', async () => {
    for (const state of ['active', undefined]) {
      const { stack, calls } = fixture(state);
      const result = await stack.assembleArray(volume, 'loop2', ['nvme3n1']);
      assert.equal(result.block, 'md127');
      assert.match(result.fallback?.message ?? '', state ? /is active/ : /not there/);
      assert.deepEqual(calls[0]?.slice(0, 4), ['mdadm', '--assemble', '/dev/md/strata-0b5c3f528e0a4d5e9a553f1b', '--run']);
    }
  });
});

describe('cutting a mirror\'s remote legs off (a hand-over to the one copy left)', () => {
  function fixture(members: Record<string, string>) {
    const root = mkdtempSync(join(tmpdir(), 'strata-fail-'));
    const sys = join(root, 'sys');
    const md = join(sys, 'block', 'md127', 'md');
    for (const [member, state] of Object.entries(members)) {
      mkdirSync(join(md, `dev-${member}`), { recursive: true });
      writeFileSync(join(md, `dev-${member}`, 'state'), `${state}\n`);
    }
    const calls: string[][] = [];
    const run = async (command: string, args: readonly string[]) => {
      calls.push([command, ...args]);
      return { stdout: '', stderr: '' };
    };
    const stack = new BlockStack({ run, sysfsRoot: sys, devRoot: '/dev', fenceFile: join(root, 'fence.img'), reconnectDelaySeconds: 1, keepAliveSeconds: 5 });
    return { stack, md, calls, root };
  }

  it('marks every member but the local leg faulty through sysfs, and says so once md shows it; no command', async () => {
    const { stack, md, calls, root } = fixture({ loop2: 'in_sync', nvme3n1: 'in_sync,write_mostly', nvme4n1: 'faulty,write_mostly' });
    assert.equal(await stack.failLegsBut('md127', 'loop2'), true);
    assert.equal(readFileSync(join(md, 'dev-loop2', 'state'), 'utf8'), 'in_sync\n', 'the local leg untouched');
    assert.equal(readFileSync(join(md, 'dev-nvme3n1', 'state'), 'utf8'), 'faulty');
    assert.equal(readFileSync(join(md, 'dev-nvme4n1', 'state'), 'utf8'), 'faulty,write_mostly\n', 'already faulty: not written');
    assert.deepEqual(calls, []);
    rmSync(root, { recursive: true, force: true });
  });

  it('false when md does not show a member faulty (it refused), or the local leg is not a member', async () => {
    const refused = fixture({ loop2: 'in_sync', nvme3n1: 'in_sync,write_mostly' });
    // md refusing the write: the state file stays as it was (a directory here makes the write fail).
    rmSync(join(refused.md, 'dev-nvme3n1', 'state'));
    mkdirSync(join(refused.md, 'dev-nvme3n1', 'state'));
    assert.equal(await refused.stack.failLegsBut('md127', 'loop2'), false);
    const other = fixture({ loop5: 'in_sync', nvme3n1: 'in_sync,write_mostly' });
    assert.equal(await other.stack.failLegsBut('md127', 'loop2'), false);
    assert.equal(readFileSync(join(other.md, 'dev-nvme3n1', 'state'), 'utf8'), 'in_sync,write_mostly\n', 'nothing written');
    for (const f of [refused, other]) rmSync(f.root, { recursive: true, force: true });
  });
});

describe('bytes written through the host-path device', () => {
  const volume = '0b5c3f52-8e0a-4d5e-9a55-3f1b2c4d5e6f';
  // /sys/block/<dev>/stat: reads, read merges, read sectors, read ticks, writes, write merges,
  // write sectors (field 7), ...
  const stat = (writeSectors: number) => `     120        0     9600       40      300        0 ${String(writeSectors).padStart(8)}      900        0       50      940        0        0        0        0        7       10\n`;
  function fixture() {
    const root = mkdtempSync(join(tmpdir(), 'strata-written-'));
    const sys = join(root, 'sys');
    const bootIdFile = join(root, 'boot_id');
    writeFileSync(bootIdFile, 'f3a1c2d4-0000-4000-8000-000000000001\n');
    const dm = (block: string, name: string, dev: string, diskseq: number | undefined, writeSectors: number) => {
      mkdirSync(join(sys, 'block', block, 'dm'), { recursive: true });
      writeFileSync(join(sys, 'block', block, 'dm', 'name'), `${name}\n`);
      writeFileSync(join(sys, 'block', block, 'dev'), `${dev}\n`);
      if (diskseq !== undefined) writeFileSync(join(sys, 'block', block, 'diskseq'), `${diskseq}\n`);
      writeFileSync(join(sys, 'block', block, 'stat'), stat(writeSectors));
    };
    mkdirSync(join(sys, 'block', 'loop2', 'loop'), { recursive: true });
    const run = async () => ({ stdout: '', stderr: '' });
    const stack = new BlockStack({ run, sysfsRoot: sys, devRoot: '/dev', fenceFile: join(root, 'fence.img'), reconnectDelaySeconds: 1, keepAliveSeconds: 5, bootIdFile });
    return { stack, dm, sys, bootIdFile };
  }

  it('is field 7 of the stat of the dm device named strata-<volume>, × 512, with the instance it was counted by', async () => {
    const { stack, dm } = fixture();
    dm('dm-0', 'strata-other', '253:0', 11, 999);
    dm('dm-3', `strata-${volume}`, '253:3', 17, 16384);
    assert.deepEqual(await stack.writtenBytes(volume), { bytes: 16384n * 512n, device: 'f3a1c2d4-0000-4000-8000-000000000001/253:3/17' });
  });

  it('follows the device when it is made again (a new disk sequence, the same dm-N), and is undefined without one', async () => {
    const { stack, dm, sys } = fixture();
    assert.equal(await stack.writtenBytes(volume), undefined, 'no device');
    dm('dm-3', `strata-${volume}`, '253:3', 17, 2048);
    assert.equal((await stack.writtenBytes(volume))?.bytes, 2048n * 512n);
    // Removed, then made again: the kernel may give it the same minor, never the same diskseq.
    dm('dm-3', `strata-${volume}`, '253:3', 21, 8);
    assert.deepEqual(await stack.writtenBytes(volume), { bytes: 8n * 512n, device: 'f3a1c2d4-0000-4000-8000-000000000001/253:3/21' });
    // Another volume now holds dm-3, this one moved to dm-5: found again by name.
    dm('dm-3', 'strata-other', '253:3', 22, 5);
    dm('dm-5', `strata-${volume}`, '253:5', 23, 64);
    assert.deepEqual(await stack.writtenBytes(volume), { bytes: 64n * 512n, device: 'f3a1c2d4-0000-4000-8000-000000000001/253:5/23' });
    writeFileSync(join(sys, 'block', 'dm-5', 'dm', 'name'), 'strata-third\n');
    assert.equal(await stack.writtenBytes(volume), undefined, 'gone');
  });

  it('without diskseq (before Linux 5.15) the device number names the instance', async () => {
    const { stack, dm } = fixture();
    dm('dm-1', `strata-${volume}`, '253:1', undefined, 1);
    assert.deepEqual(await stack.writtenBytes(volume), { bytes: 512n, device: 'f3a1c2d4-0000-4000-8000-000000000001/253:1' });
  });

  it('says nothing from a stat it cannot read', async () => {
    const { stack, dm, sys } = fixture();
    dm('dm-1', `strata-${volume}`, '253:1', 3, 1);
    writeFileSync(join(sys, 'block', 'dm-1', 'stat'), '');
    assert.equal(await stack.writtenBytes(volume), undefined);
  });
});

describe('freezing a mirror before a hand-over', () => {
  it('writes readonly to md\'s array_state once; an array already read-only is left alone', async () => {
    const root = mkdtempSync(join(tmpdir(), 'strata-freeze-'));
    try {
      const md = join(root, 'sys', 'block', 'md127', 'md');
      mkdirSync(md, { recursive: true });
      writeFileSync(join(md, 'array_state'), 'clean\n');
      const run = async () => {
        throw new Error('no process: md sysfs only');
      };
      const stack = new BlockStack({ run, sysfsRoot: join(root, 'sys'), devRoot: '/dev', fenceFile: join(root, 'fence.img'), reconnectDelaySeconds: 1, keepAliveSeconds: 5 });
      await stack.freezeArray('md127');
      assert.equal(readFileSync(join(md, 'array_state'), 'utf8'), 'readonly');
      writeFileSync(join(md, 'array_state'), 'readonly\n');
      await stack.freezeArray('md127');
      assert.equal(readFileSync(join(md, 'array_state'), 'utf8'), 'readonly\n', 'not written again');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('growing', () => {
  function fixture() {
    const root = mkdtempSync(join(tmpdir(), 'strata-grow-'));
    const sys = join(root, 'sys');
    const md = join(sys, 'block', 'md127', 'md');
    // An active local leg, an active remote leg, and a spare (no slot) being recovered onto.
    for (const [member, slot] of [['loop2', '0'], ['nvme3n1', '1'], ['nvme4n1', 'none']] as const) {
      mkdirSync(join(md, `dev-${member}`), { recursive: true });
      writeFileSync(join(md, `dev-${member}`, 'state'), slot === 'none' ? 'spare\n' : 'in_sync\n');
      writeFileSync(join(md, `dev-${member}`, 'slot'), `${slot}\n`);
      writeFileSync(join(md, `dev-${member}`, 'size'), '1048576\n');
    }
    writeFileSync(join(md, 'component_size'), '1048576\n');
    writeFileSync(join(sys, 'block', 'md127', 'size'), '2097152\n');
    mkdirSync(join(sys, 'block', 'nvme3n1'), { recursive: true });
    writeFileSync(join(sys, 'block', 'nvme3n1', 'size'), '2105344\n');
    mkdirSync(join(sys, 'class', 'nvme', 'nvme3'), { recursive: true });
    const calls: string[][] = [];
    const run = async (command: string, args: readonly string[]) => {
      calls.push([command, ...args]);
      return { stdout: '', stderr: '' };
    };
    const tables = new Map([['strata-v1', '0 2097152 linear 9:127 0\n']]);
    const dm = {
      dmTable: async (name: string) => tables.get(name) ?? '',
      dmReload: async (name: string, table: string) => void tables.set(name, `${table}\n`),
      loopAttach: async () => 'loop9',
    };
    const stack = new BlockStack({ run, sysfsRoot: sys, devRoot: root, fenceFile: join(root, 'fence.img'), reconnectDelaySeconds: 1, keepAliveSeconds: 5, ioctls: dm });
    return { stack, calls, sys, md, root };
  }

  it('sizes come from sysfs (0 for a device that is not there)', async () => {
    const { stack } = fixture();
    assert.equal(await stack.blockBytes('md127'), 1n << 30n);
    assert.equal(await stack.blockBytes('nvme9n1'), 0n);
  });

  it('md: every active member takes all its device has, then the component size is set exactly, in KiB; a spare is left alone', async () => {
    const { stack, md } = fixture();
    await stack.growArray('md127', 2n << 30n);
    assert.equal(readFileSync(join(md, 'dev-loop2', 'size'), 'utf8'), '0');
    assert.equal(readFileSync(join(md, 'dev-nvme3n1', 'size'), 'utf8'), '0');
    assert.equal(readFileSync(join(md, 'dev-nvme4n1', 'size'), 'utf8'), '1048576\n', 'md refuses a size for a member without a slot');
    assert.equal(readFileSync(join(md, 'component_size'), 'utf8'), String(2 * 1024 * 1024));
  });

  it('the loop device takes its grown file through losetup --set-capacity', async () => {
    const { stack, calls, root } = fixture();
    await stack.growLoop('loop2');
    assert.deepEqual(calls, [['losetup', '--set-capacity', join(root, 'loop2')]]);
  });

  it('a replica leg: a rescan is asked for, and the wait ends when the leg is large enough or at the deadline', async () => {
    const { stack, sys } = fixture();
    const wanted = (2n << 30n) + (4n << 20n);
    setTimeout(() => writeFileSync(join(sys, 'block', 'nvme3n1', 'size'), `${wanted / 512n}\n`), 150);
    assert.equal(await stack.rescanLeg('nvme3', 'nvme3n1', wanted, 2000), true);
    assert.equal(readFileSync(join(sys, 'class', 'nvme', 'nvme3', 'rescan_controller'), 'utf8'), '1');
    const started = Date.now();
    assert.equal(await stack.rescanLeg('nvme3', 'nvme3n1', 2n * wanted, 200), false);
    assert.ok(Date.now() - started < 1000);
  });

  it('what must follow a growth is written ahead of a longer table only', async () => {
    const { stack } = fixture();
    const marks: string[] = [];
    await stack.ensureDm('v1', '0 2097152 flakey 7:4 0 0 1', () => marks.push('same length'));
    await stack.ensureDm('v1', '0 4194304 linear 9:127 0', () => marks.push(`longer: ${marks.length}`));
    assert.deepEqual(marks, ['longer: 0']);
    assert.equal(await stack.dmTable('v1'), '0 4194304 linear 9:127 0');
  });
});
