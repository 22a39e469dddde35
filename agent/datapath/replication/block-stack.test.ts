// The parts of the block stack that decide without the kernel: how tables compare, and the fence
// (a read-only loop device of 4 KiB sectors under every device that serves nothing) made once,
// found again by its backing file, and grown for a larger volume.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
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
