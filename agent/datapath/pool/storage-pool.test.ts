import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, promises as fs, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { loadNativeAddon } from '../../../lib/native-addon.js';
import { FilePool, parseCompsizeDiskUsage, PoolError } from './storage-pool.js';

const CLUSTER = 'c0ffee00-0000-4000-8000-000000000000';
const V1 = '11111111-1111-4111-8111-111111111111';
const V2 = '22222222-2222-4222-8222-222222222222';
const S1 = 'aaaaaaaa-1111-4111-8111-111111111111';
const S2 = 'aaaaaaaa-2222-4222-8222-222222222222';
const MiB = 1024n * 1024n;
const raw = { compression: false, sectorSize: 4096 } as const;

async function writeAt(path: string, offset: number, data: string | Buffer): Promise<void> {
  const handle = await fs.open(path, 'r+');
  try {
    await handle.write(typeof data === 'string' ? Buffer.from(data) : data, 0, undefined, offset);
    await handle.sync();
  } finally {
    await handle.close();
  }
}
async function readAt(path: string, offset: number, length: number): Promise<string> {
  const handle = await fs.open(path, 'r');
  try {
    const buffer = Buffer.alloc(length);
    await handle.read(buffer, 0, length, offset);
    return buffer.toString();
  } finally {
    await handle.close();
  }
}

/** The behaviour every filesystem must give. */
function poolContract(name: string, dirOf: () => string) {
  describe(`FilePool (${name})`, () => {
    let pool: FilePool;
    before(async () => {
      pool = await FilePool.open({ dir: dirOf(), clusterUUID: CLUSTER, logger: silentLogger() });
    });

    it('creates a thin (sparse) backing, idempotently, and grows but never shrinks it', async () => {
      const first = await pool.ensureVolume(V1, 64n * MiB, raw);
      assert.equal(first.created, true);
      assert.equal(first.bufferedIo, false);
      assert.match(first.devicePath, /volumes\/11111111-1111-4111-8111-111111111111\.raw$/);
      const stat = await fs.stat(first.devicePath);
      assert.equal(stat.size, 64 * 1024 * 1024);
      assert.ok(stat.blocks * 512 < 1024 * 1024, 'sparse: almost nothing allocated');
      const again = await pool.ensureVolume(V1, 64n * MiB, raw);
      assert.deepEqual([again.created, again.grew, again.devicePath], [false, false, first.devicePath]);
      const grown = await pool.ensureVolume(V1, 128n * MiB, raw);
      assert.equal(grown.grew, true);
      assert.equal(await pool.volumeSize(V1), 128n * MiB);
      await assert.rejects(pool.ensureVolume(V1, 32n * MiB, raw), (err: unknown) => err instanceof PoolError && /shrinking/.test((err as Error).message));
      assert.equal(await pool.resize(V1, 128n * MiB), false);
      assert.equal(await pool.resize(V1, 192n * MiB), true);
      assert.deepEqual(await pool.listVolumes(), [V1]);
    });

    it('serves compressed volumes with buffered I/O and refuses 512-byte sectors', async () => {
      const backing = await pool.ensureVolume(V2, 16n * MiB, { compression: true, sectorSize: 4096 });
      assert.equal(backing.bufferedIo, true);
      assert.match(backing.devicePath, /\.zst$/);
      // Its layout is fixed at creation: turning compression off later is served with a warning.
      const later = await pool.ensureVolume(V2, 16n * MiB, raw);
      assert.equal(later.bufferedIo, true);
      assert.match(later.warning ?? '', /compression was turned off/);
      await assert.rejects(pool.ensureVolume('33333333-3333-4333-8333-333333333333', MiB, { compression: false, sectorSize: 512 }), /sectorSize 512/);
      await pool.removeVolume(V2);
    });

    it('takes snapshots that keep their data, rolls back in place, and clones', async () => {
      const { devicePath } = await pool.ensureVolume(V1, 192n * MiB, raw);
      await writeAt(devicePath, 4096, 'before-snapshot');
      await pool.ensureSnapshot(V1, S1);
      await pool.ensureSnapshot(V1, S1); // idempotent
      await writeAt(devicePath, 4096, 'after--snapshot');
      assert.deepEqual(await pool.listSnapshots(V1), [S1]);
      const inode = (await fs.stat(devicePath)).ino;
      await pool.rollback(V1, S1);
      assert.equal(await readAt(devicePath, 4096, 15), 'before-snapshot');
      assert.equal((await fs.stat(devicePath)).ino, inode, 'same inode: nvmet keeps serving the file it opened');
      const clone = await pool.ensureVolume(V2, 256n * MiB, { ...raw, cloneFromSnapshot: S1 });
      assert.equal(clone.created, true);
      assert.equal(await readAt(clone.devicePath, 4096, 15), 'before-snapshot');
      assert.equal((await fs.stat(clone.devicePath)).size, 256 * 1024 * 1024);
      await assert.rejects(pool.ensureVolume('33333333-3333-4333-8333-333333333333', MiB, { ...raw, cloneFromSnapshot: S2 }), /not on this node/);
      await assert.rejects(pool.rollback(V1, S2), /not on this node/);
      await pool.removeSnapshot(V1, S1);
      assert.deepEqual(await pool.listSnapshots(V1), []);
      assert.equal(await readAt(clone.devicePath, 4096, 15), 'before-snapshot', 'a clone outlives its snapshot');
    });

    it('measures usage and capacity', async () => {
      const { devicePath } = await pool.ensureVolume(V1, 192n * MiB, raw);
      await writeAt(devicePath, 0, Buffer.alloc(1024 * 1024, 7));
      const usage = await FilePool.open({ dir: dirOf(), clusterUUID: CLUSTER, logger: silentLogger() }).then((p) => p.usage(V1));
      assert.ok(usage.logicalUsed >= MiB && usage.logicalUsed < 192n * MiB, `logical ${usage.logicalUsed}`);
      assert.ok(usage.physicalUsed >= MiB);
      const capacity = await pool.capacity();
      assert.ok(capacity.total > 0n && capacity.free <= capacity.total);
    });

    it('removes a volume with its snapshots, idempotently', async () => {
      await pool.ensureSnapshot(V1, S2);
      await pool.removeVolume(V1);
      await pool.removeVolume(V1);
      await pool.removeVolume(V2);
      assert.deepEqual(await pool.listVolumes(), []);
      assert.deepEqual(await pool.listSnapshots(V1), []);
      assert.equal(await pool.volumeSize(V1), null);
    });

    it('belongs to one cluster and clears temporary files a crash left', async () => {
      await fs.writeFile(join(dirOf(), 'tmp', 'leftover'), 'x');
      await FilePool.open({ dir: dirOf(), clusterUUID: CLUSTER, logger: silentLogger() });
      assert.deepEqual(await fs.readdir(join(dirOf(), 'tmp')), []);
      await assert.rejects(
        FilePool.open({ dir: dirOf(), clusterUUID: 'another-cluster', logger: silentLogger() }),
        (err: unknown) => err instanceof PoolError && /belongs to cluster/.test((err as Error).message),
      );
    });
  });
}

const hostDir = mkdtempSync(join(tmpdir(), 'strata-pool-'));
after(() => rmSync(hostDir, { recursive: true, force: true }));
poolContract('the host’s temp filesystem', () => hostDir);

// btrfs (the layout architecture.md recommends) on a loop device, when this machine allows it.
const btrfs = setUpBtrfs();
after(() => btrfs.cleanup());
if (btrfs.dir) {
  poolContract('btrfs on a loop device', () => btrfs.dir as string);
  describe('FilePool on btrfs', () => {
    const native = loadNativeAddon();
    // The native addon's ioctls (what an installed agent uses), and the commands without it.
    for (const [how, fileIoctls] of [['with the native addon', undefined], ['with chattr and cp', null]] as const) {
    it(`makes uncompressed backings NOCOW, compressed ones zstd, snapshots by reflink, and measures compression (${how})`, { skip: how === 'with the native addon' && !native ? 'the native addon is not built' : false }, async () => {
      const dir = join(btrfs.dir as string, `specific-${fileIoctls === null ? 'commands' : 'native'}`);
      const pool = await FilePool.open({ dir, clusterUUID: CLUSTER, logger: silentLogger(), usageCacheMs: 0, fileIoctls });
      assert.deepEqual([pool.btrfs, pool.reflink], [true, true]);
      const plain = await pool.ensureVolume(V1, 64n * MiB, raw);
      assert.match(execFileSync('lsattr', ['-d', plain.devicePath], { encoding: 'utf8' }).split(' ')[0] as string, /C/, 'NOCOW');
      await writeAt(plain.devicePath, 0, Buffer.alloc(4 * 1024 * 1024, 1));
      await pool.ensureSnapshot(V1, S1); // a NOCOW source needs a NOCOW destination
      const snapshotFile = join(dir, 'snapshots', V1, `${S1}.raw`);
      assert.match(execFileSync('lsattr', ['-d', snapshotFile], { encoding: 'utf8' }).split(' ')[0] as string, /C/);
      assert.ok(readFileSync(snapshotFile).equals(readFileSync(plain.devicePath)), 'the snapshot has the volume\'s data and size');
      // Rollback rewrites the volume's own inode (nvmet holds it open) with the snapshot's data.
      const inode = statSync(plain.devicePath).ino;
      await writeAt(plain.devicePath, 0, Buffer.alloc(4096, 2));
      await pool.rollback(V1, S1);
      assert.equal(statSync(plain.devicePath).ino, inode);
      assert.ok(readFileSync(snapshotFile).equals(readFileSync(plain.devicePath)), 'rolled back to the snapshot');
      const zst = await pool.ensureVolume(V2, 64n * MiB, { compression: true, sectorSize: 4096 });
      assert.equal(execFileSync('btrfs', ['property', 'get', zst.devicePath, 'compression'], { encoding: 'utf8' }).trim(), 'compression=zstd');
      await writeAt(zst.devicePath, 0, Buffer.from('compressible text '.repeat(500_000)));
      execFileSync('sync');
      const usage = await pool.usage(V2);
      assert.ok(usage.physicalUsed * 4n < usage.logicalUsed, `compressed: ${usage.physicalUsed} of ${usage.logicalUsed}`);
      await pool.ensureSnapshot(V2, S2);
      await pool.removeVolume(V1);
      await pool.removeVolume(V2);
    });
    }
    it('reports a failed ioctl with its errno', { skip: native ? false : 'the native addon is not built' }, async () => {
      const missing = join(btrfs.dir as string, 'no-such-file');
      assert.throws(() => native!.setNoCow(missing), (err: NodeJS.ErrnoException) => err.code === 'ENOENT' && /open\(/.test(err.message));
      await assert.rejects(native!.cloneFile(missing, missing), (err: NodeJS.ErrnoException) => err.code === 'ENOENT');
    });
  });
} else {
  it(`FilePool on btrfs: skipped (${btrfs.why})`, { skip: btrfs.why }, () => undefined);
}

function setUpBtrfs(): { dir?: string; why?: string; cleanup: () => void } {
  const base = mkdtempSync(join(tmpdir(), 'strata-btrfs-'));
  const image = join(base, 'pool.img');
  const mountPoint = join(base, 'mnt');
  const cleanupBase = () => rmSync(base, { recursive: true, force: true });
  if (process.getuid?.() !== 0) {
    cleanupBase();
    return { why: 'mounting a btrfs image needs root', cleanup: () => undefined };
  }
  try {
    execFileSync('truncate', ['-s', '256M', image]);
    execFileSync('mkfs.btrfs', ['-q', image], { stdio: 'ignore' });
    execFileSync('mkdir', ['-p', mountPoint]);
    execFileSync('mount', ['-o', 'loop', image, mountPoint], { stdio: 'pipe' });
  } catch (err) {
    cleanupBase();
    return { why: `this machine cannot mount a btrfs image: ${(err as Error).message.split('\n')[0]}`, cleanup: () => undefined };
  }
  return {
    dir: join(mountPoint, 'pool'),
    cleanup: () => {
      try {
        execFileSync('umount', [mountPoint], { stdio: 'ignore' });
      } catch {
        // already gone
      }
      cleanupBase();
    },
  };
}

describe('parseCompsizeDiskUsage', () => {
  it('reads the TOTAL disk usage', () => {
    const out = [
      'Processed 1 file, 64 regular extents (64 refs), 0 inline.',
      'Type       Perc     Disk Usage   Uncompressed Referenced  ',
      'TOTAL        3%     262144       8388608      8388608     ',
      'zstd         3%     262144       8388608      8388608     ',
    ].join('\n');
    assert.equal(parseCompsizeDiskUsage(out), 262144n);
    assert.equal(parseCompsizeDiskUsage('nothing'), undefined);
  });
});
