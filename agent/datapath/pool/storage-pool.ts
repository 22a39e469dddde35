// The node storage pool: where volume backings, snapshots and clones live. One interface, so a
// pool on md-raid + btrfs (architecture.md, BtrfsMdPool, next step) or LVM thin can replace the
// file pool without touching the reconciler.
//
// FilePool: one sparse file per volume in a directory (thin), snapshots and clones by reflink.
// On btrfs: uncompressed volumes are NOCOW files served on the O_DIRECT path (buffered_io=0);
// compressed volumes carry the btrfs property `compression zstd` and must be served with
// buffered_io=1 (direct writes bypass btrfs compression; lab.md). A reflink of a NOCOW file
// needs a NOCOW destination, so every destination is created empty with the source's NOCOW
// flag first. On other filesystems (ext4 in tests) the same layout works without NOCOW or
// compression, and snapshots fall back to full sparse copies when the filesystem cannot reflink.
import { execFile } from 'node:child_process';
import { loadNativeAddon, type NativeAddon } from '../../../lib/native-addon.js';
import { randomUUID } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { UUID_PATTERN } from '../../../lib/contract/uuid.js';
import { pathExists, writeFileAtomic } from '../../../lib/files.js';
import type { Logger } from '../../../lib/logger.js';

export interface VolumeSpec {
  readonly compression: boolean;
  readonly sectorSize: 512 | 4096;
  /** Create the backing as a clone of this snapshot (which must be on this node). */
  readonly cloneFromSnapshot?: string;
}

export interface VolumeBacking {
  /** What nvmet's namespace device_path points at. */
  readonly devicePath: string;
  /** Whether the namespace must use buffered I/O (compressed backings). */
  readonly bufferedIo: boolean;
  readonly sizeBytes: bigint;
  readonly created: boolean;
  /** The backing was made larger by this call (hosts must be told: revalidate). */
  readonly grew: boolean;
  /** Something the volume asked for that this backing does not give (served anyway). */
  readonly warning?: string;
}

export interface VolumeUsage {
  /** Bytes the volume's data occupies before compression (allocated, holes excluded). */
  readonly logicalUsed: bigint;
  /** Bytes it occupies on the pool's devices. */
  readonly physicalUsed: bigint;
}

export interface StoragePool {
  /**
   * Creates the backing when missing (empty, or cloned), grows it when smaller; idempotent.
   * `beforeGrow` runs just before an existing backing is grown (to write an intent ahead).
   */
  ensureVolume(volumeUUID: string, sizeBytes: bigint, spec: VolumeSpec, beforeGrow?: () => void): Promise<VolumeBacking>;
  /** Current size of the backing, null when there is none. */
  volumeSize(volumeUUID: string): Promise<bigint | null>;
  /** Grows the backing (never shrinks). Returns whether it grew. */
  resize(volumeUUID: string, sizeBytes: bigint): Promise<boolean>;
  /** Removes the backing and its snapshots; idempotent. */
  removeVolume(volumeUUID: string): Promise<void>;
  /** Takes a point-in-time copy of the volume when it does not exist yet; idempotent. */
  ensureSnapshot(volumeUUID: string, snapshotUUID: string): Promise<void>;
  removeSnapshot(volumeUUID: string, snapshotUUID: string): Promise<void>;
  listSnapshots(volumeUUID: string): Promise<string[]>;
  /** Replaces the volume's data with the snapshot's, in place (the exported file stays the same). */
  rollback(volumeUUID: string, snapshotUUID: string): Promise<void>;
  usage(volumeUUID: string): Promise<VolumeUsage>;
  capacity(): Promise<{ total: bigint; free: bigint }>;
  listVolumes(): Promise<string[]>;
}

/** A problem the pool reports as the volume's error. */
export class PoolError extends Error {}

/** `timeoutMs`: the command is killed (and the call fails) when it runs longer. */
export type CommandRunner = (command: string, args: readonly string[], options?: { readonly timeoutMs?: number }) => Promise<{ stdout: string; stderr: string }>;

const execFileAsync = promisify(execFile);
export const runCommand: CommandRunner = async (command, args, options) => {
  const { stdout, stderr } = await execFileAsync(command, [...args], { encoding: 'utf8', maxBuffer: 4 * 1024 * 1024, ...(options?.timeoutMs ? { timeout: options.timeoutMs } : {}) });
  return { stdout, stderr };
};

const BTRFS_SUPER_MAGIC = 0x9123683e;
const POOL_MARKER = 'strata-pool.json';

/** raw: NOCOW, O_DIRECT; zst: compressed, buffered. Fixed when the backing is created. */
type Layout = 'raw' | 'zst';
const layoutOf = (compression: boolean): Layout => (compression ? 'zst' : 'raw');

export interface FilePoolOptions {
  readonly dir: string;
  /** The pool refuses to serve (or delete) anything when it was created for another cluster. */
  readonly clusterUUID: string;
  readonly logger: Logger;
  readonly run?: CommandRunner;
  /** How long a measured usage is reused (compsize reads every extent). */
  readonly usageCacheMs?: number;
  /**
   * The NOCOW and reflink ioctls (the native addon; default: loaded when built). null, or an
   * addon that is not built: `chattr +C` and `cp --reflink=always`, one process each.
   */
  readonly fileIoctls?: FileIoctls | null;
}

export type FileIoctls = Pick<NativeAddon, 'setNoCow' | 'cloneFile'>;

export class FilePool implements StoragePool {
  private readonly run: CommandRunner;
  private readonly usageCache = new Map<string, { at: number; usage: VolumeUsage }>();

  private readonly ioctls: FileIoctls | null;

  private constructor(
    private readonly options: FilePoolOptions,
    readonly btrfs: boolean,
    readonly reflink: boolean,
  ) {
    this.run = options.run ?? runCommand;
    this.ioctls = ioctlsOf(options);
  }

  get dir(): string {
    return this.options.dir;
  }

  /**
   * Opens (creating when new) the pool directory: checks it belongs to this cluster, clears
   * temporary files a crash left, and probes what the filesystem can do.
   */
  static async open(options: FilePoolOptions): Promise<FilePool> {
    const { dir } = options;
    for (const sub of ['volumes', 'snapshots', 'tmp']) await fs.mkdir(join(dir, sub), { recursive: true, mode: 0o700 });
    const markerPath = join(dir, POOL_MARKER);
    let marker: { clusterUUID?: string } | undefined;
    try {
      marker = JSON.parse(await fs.readFile(markerPath, 'utf8')) as { clusterUUID?: string };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new PoolError(`the pool marker ${markerPath} is unreadable: ${(err as Error).message}`);
    }
    if (marker && marker.clusterUUID !== options.clusterUUID) {
      throw new PoolError(`the storage pool at ${dir} belongs to cluster ${marker.clusterUUID}, not ${options.clusterUUID}; refusing to use it`);
    }
    if (!marker) {
      writeFileAtomic(markerPath, `${JSON.stringify({ version: 1, clusterUUID: options.clusterUUID, createdAt: new Date().toISOString() }, null, 2)}\n`, 0o600);
    }
    for (const entry of await fs.readdir(join(dir, 'tmp'))) await fs.rm(join(dir, 'tmp', entry), { force: true, recursive: true });
    const btrfs = (await fs.statfs(dir)).type === BTRFS_SUPER_MAGIC;
    const run = options.run ?? runCommand;
    const reflink = await probeReflink(join(dir, 'tmp'), (src, dst) => copyByReflink(src, dst, ioctlsOf(options), run));
    options.logger.info({ dir, btrfs, reflink }, 'storage pool opened');
    if (!btrfs) options.logger.warn({ dir }, 'the pool is not on btrfs: no compression and no NOCOW; compressed volumes are stored uncompressed');
    if (!reflink) options.logger.warn({ dir }, 'the pool filesystem cannot reflink: snapshots and clones are full copies');
    return new FilePool(options, btrfs, reflink);
  }

  async ensureVolume(volumeUUID: string, sizeBytes: bigint, spec: VolumeSpec, beforeGrow?: () => void): Promise<VolumeBacking> {
    checkUuid(volumeUUID);
    if (sizeBytes <= 0n) throw new PoolError(`invalid volume size ${sizeBytes}`);
    if (spec.sectorSize !== 4096) {
      // A file-backed nvmet namespace takes the filesystem block size (min(i_blkbits, 12)).
      throw new PoolError('sectorSize 512 needs a block-device backing (loop device), which the file pool does not provide yet');
    }
    const wanted = layoutOf(spec.compression);
    const existing = await this.findVolume(volumeUUID);
    if (existing) {
      const size = existing.size;
      if (size > sizeBytes) throw new PoolError(`the volume backing is ${size} bytes; shrinking it to ${sizeBytes} is not supported`);
      const grew = size < sizeBytes;
      if (grew) {
        beforeGrow?.();
        await fs.truncate(existing.path, Number(sizeBytes));
      }
      return {
        devicePath: existing.path,
        bufferedIo: existing.layout === 'zst',
        sizeBytes,
        created: false,
        grew,
        ...(existing.layout !== wanted ? { warning: layoutWarning(existing.layout) } : {}),
      };
    }

    let layout = wanted;
    let warning: string | undefined;
    const temp = join(this.dir, 'tmp', `${volumeUUID}.${randomUUID()}`);
    try {
      if (spec.cloneFromSnapshot) {
        const snapshot = await this.findSnapshot(spec.cloneFromSnapshot);
        if (!snapshot) throw new PoolError(`snapshot ${spec.cloneFromSnapshot} (clone source) is not on this node`);
        if (snapshot.layout !== wanted) {
          // A reflink keeps the source's extents: a clone inherits its snapshot's layout.
          layout = snapshot.layout;
          warning = layoutWarning(layout);
        }
        const snapshotSize = BigInt((await fs.stat(snapshot.path)).size);
        if (snapshotSize > sizeBytes) throw new PoolError(`the clone (${sizeBytes} bytes) is smaller than its snapshot (${snapshotSize} bytes)`);
        await this.createEmpty(temp, layout);
        await this.copyData(snapshot.path, temp);
      } else {
        await this.createEmpty(temp, layout);
      }
      await fs.truncate(temp, Number(sizeBytes));
      const final = this.volumePath(volumeUUID, layout);
      await fs.rename(temp, final);
      await fsyncDir(join(this.dir, 'volumes'));
      return { devicePath: final, bufferedIo: layout === 'zst', sizeBytes, created: true, grew: false, ...(warning ? { warning } : {}) };
    } finally {
      await fs.rm(temp, { force: true });
    }
  }

  async volumeSize(volumeUUID: string): Promise<bigint | null> {
    checkUuid(volumeUUID);
    return (await this.findVolume(volumeUUID))?.size ?? null;
  }

  async resize(volumeUUID: string, sizeBytes: bigint): Promise<boolean> {
    checkUuid(volumeUUID);
    const existing = await this.findVolume(volumeUUID);
    if (!existing) throw new PoolError(`volume ${volumeUUID} has no backing on this node`);
    const size = BigInt((await fs.stat(existing.path)).size);
    if (size > sizeBytes) throw new PoolError(`the volume backing is ${size} bytes; shrinking it to ${sizeBytes} is not supported`);
    if (size === sizeBytes) return false;
    await fs.truncate(existing.path, Number(sizeBytes));
    return true;
  }

  async removeVolume(volumeUUID: string): Promise<void> {
    checkUuid(volumeUUID);
    for (const layout of ['raw', 'zst'] as const) await fs.rm(this.volumePath(volumeUUID, layout), { force: true });
    await fs.rm(join(this.dir, 'snapshots', volumeUUID), { force: true, recursive: true });
    this.usageCache.delete(volumeUUID);
    await fsyncDir(join(this.dir, 'volumes'));
  }

  async ensureSnapshot(volumeUUID: string, snapshotUUID: string): Promise<void> {
    checkUuid(volumeUUID);
    checkUuid(snapshotUUID);
    const volume = await this.findVolume(volumeUUID);
    if (!volume) throw new PoolError(`volume ${volumeUUID} has no backing on this node`);
    const dir = join(this.dir, 'snapshots', volumeUUID);
    const final = join(dir, `${snapshotUUID}.${volume.layout}`);
    if (await pathExists(final)) return;
    await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    const temp = join(this.dir, 'tmp', `${snapshotUUID}.${randomUUID()}`);
    try {
      await this.createEmpty(temp, volume.layout);
      await this.copyData(volume.path, temp);
      await fs.rename(temp, final);
      await fsyncDir(dir);
    } finally {
      await fs.rm(temp, { force: true });
    }
  }

  async removeSnapshot(volumeUUID: string, snapshotUUID: string): Promise<void> {
    checkUuid(volumeUUID);
    checkUuid(snapshotUUID);
    for (const layout of ['raw', 'zst'] as const) {
      await fs.rm(join(this.dir, 'snapshots', volumeUUID, `${snapshotUUID}.${layout}`), { force: true });
    }
  }

  async listSnapshots(volumeUUID: string): Promise<string[]> {
    checkUuid(volumeUUID);
    const entries = await fs.readdir(join(this.dir, 'snapshots', volumeUUID)).catch(() => [] as string[]);
    return entries.map(parseBackingName).filter((p): p is { uuid: string; layout: Layout } => p !== undefined).map((p) => p.uuid).sort();
  }

  async rollback(volumeUUID: string, snapshotUUID: string): Promise<void> {
    checkUuid(volumeUUID);
    checkUuid(snapshotUUID);
    const volume = await this.findVolume(volumeUUID);
    if (!volume) throw new PoolError(`volume ${volumeUUID} has no backing on this node`);
    const snapshot = await this.findSnapshot(snapshotUUID, volumeUUID);
    if (!snapshot) throw new PoolError(`snapshot ${snapshotUUID} of volume ${volumeUUID} is not on this node`);
    // Into the same inode: nvmet keeps the file open, so a rename would leave it serving the old data.
    await this.copyData(snapshot.path, volume.path);
    this.usageCache.delete(volumeUUID);
  }

  async usage(volumeUUID: string): Promise<VolumeUsage> {
    checkUuid(volumeUUID);
    const cached = this.usageCache.get(volumeUUID);
    if (cached && Date.now() - cached.at < (this.options.usageCacheMs ?? 60_000)) return cached.usage;
    const volume = await this.findVolume(volumeUUID);
    if (!volume) throw new PoolError(`volume ${volumeUUID} has no backing on this node`);
    const stat = await fs.stat(volume.path, { bigint: true });
    // st_blocks counts allocated bytes before compression (holes excluded) on btrfs too.
    const allocated = stat.blocks * 512n;
    let physicalUsed = allocated;
    if (this.btrfs && volume.layout === 'zst') physicalUsed = (await this.compressedBytes(volume.path)) ?? allocated;
    const usage = { logicalUsed: allocated, physicalUsed };
    this.usageCache.set(volumeUUID, { at: Date.now(), usage });
    return usage;
  }

  async capacity(): Promise<{ total: bigint; free: bigint }> {
    const s = await fs.statfs(this.dir, { bigint: true });
    return { total: s.blocks * s.bsize, free: s.bavail * s.bsize };
  }

  /**
   * What the pool's files hold: the volume backings' sizes (provisioned, thin) and the bytes
   * allocated to volumes and snapshots before compression (a reflinked extent counts in every
   * file that shares it: that is the data each one shows its hosts).
   */
  async contents(): Promise<{ provisionedBytes: bigint; logicalUsedBytes: bigint }> {
    let provisionedBytes = 0n;
    let logicalUsedBytes = 0n;
    const add = async (path: string, provisioned: boolean) => {
      const stat = await fs.stat(path, { bigint: true }).catch(() => undefined); // removed meanwhile
      if (!stat?.isFile()) return;
      if (provisioned) provisionedBytes += stat.size;
      logicalUsedBytes += stat.blocks * 512n;
    };
    for (const name of await fs.readdir(join(this.dir, 'volumes'))) {
      if (parseBackingName(name)) await add(join(this.dir, 'volumes', name), true);
    }
    for (const volume of await fs.readdir(join(this.dir, 'snapshots')).catch(() => [] as string[])) {
      for (const name of await fs.readdir(join(this.dir, 'snapshots', volume)).catch(() => [] as string[])) {
        if (parseBackingName(name)) await add(join(this.dir, 'snapshots', volume, name), false);
      }
    }
    return { provisionedBytes, logicalUsedBytes };
  }

  async listVolumes(): Promise<string[]> {
    const entries = await fs.readdir(join(this.dir, 'volumes'));
    return [...new Set(entries.map(parseBackingName).filter((p) => p !== undefined).map((p) => p!.uuid))].sort();
  }

  private volumePath(volumeUUID: string, layout: Layout): string {
    return join(this.dir, 'volumes', `${volumeUUID}.${layout}`);
  }

  /** The volume's backing and its size: one stat (two for a compressed one). */
  private async findVolume(volumeUUID: string): Promise<{ path: string; layout: Layout; size: bigint } | undefined> {
    for (const layout of ['raw', 'zst'] as const) {
      const path = this.volumePath(volumeUUID, layout);
      try {
        return { path, layout, size: BigInt((await fs.stat(path)).size) };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
    return undefined;
  }

  /** A snapshot by UUID, under one volume or (clone sources) under any. */
  private async findSnapshot(snapshotUUID: string, volumeUUID?: string): Promise<{ path: string; layout: Layout } | undefined> {
    checkUuid(snapshotUUID);
    const volumes = volumeUUID ? [volumeUUID] : await fs.readdir(join(this.dir, 'snapshots')).catch(() => [] as string[]);
    for (const v of volumes) {
      for (const layout of ['raw', 'zst'] as const) {
        const path = join(this.dir, 'snapshots', v, `${snapshotUUID}.${layout}`);
        if (await pathExists(path)) return { path, layout };
      }
    }
    return undefined;
  }

  /** An empty file with the layout's attributes, which only take effect on an empty file. */
  private async createEmpty(path: string, layout: Layout): Promise<void> {
    await (await fs.open(path, 'wx', 0o600)).close();
    if (layout === 'raw') {
      try {
        if (this.ioctls) this.ioctls.setNoCow(path);
        else await this.run('chattr', ['+C', path]);
      } catch (err) {
        // Only btrfs has NOCOW; elsewhere (ext4, tmpfs) chattr answers "Operation not supported".
        if (this.btrfs) throw new PoolError(`chattr +C ${path} failed: ${commandError(err)}`);
      }
    } else if (this.btrfs) {
      try {
        await this.run('btrfs', ['property', 'set', path, 'compression', 'zstd']);
      } catch (err) {
        throw new PoolError(`btrfs property set ${path} compression zstd failed: ${commandError(err)}`);
      }
    }
  }

  /** Copies src's data into the existing file dst (same inode): a reflink where possible. */
  private async copyData(src: string, dst: string): Promise<void> {
    try {
      if (this.reflink) await copyByReflink(src, dst, this.ioctls, this.run);
      else await this.run('cp', ['--sparse=always', src, dst]);
    } catch (err) {
      throw new PoolError(`copying ${src} to ${dst} failed: ${commandError(err)}`);
    }
  }

  private async compressedBytes(path: string): Promise<bigint | undefined> {
    try {
      const { stdout } = await this.run('compsize', ['-b', path]);
      return parseCompsizeDiskUsage(stdout);
    } catch (err) {
      // compsize exits 1 for files without extents ("All empty or still-delalloced files").
      const stdout = String((err as { stdout?: unknown }).stdout ?? '') + String((err as { stderr?: unknown }).stderr ?? '');
      if (/All empty/.test(stdout)) return 0n;
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined; // compsize not installed
      this.options.logger.debug({ err, path }, 'compsize failed');
      return undefined;
    }
  }
}

/** The "Disk Usage" of the TOTAL line of `compsize -b`. */
export function parseCompsizeDiskUsage(stdout: string): bigint | undefined {
  const line = stdout.split('\n').find((l) => l.startsWith('TOTAL'));
  const fields = line?.trim().split(/\s+/);
  const value = fields?.[2];
  return value !== undefined && /^\d+$/.test(value) ? BigInt(value) : undefined;
}

function parseBackingName(name: string): { uuid: string; layout: Layout } | undefined {
  const match = /^(.+)\.(raw|zst)$/.exec(name);
  if (!match || !UUID_PATTERN.test(match[1] as string)) return undefined;
  return { uuid: (match[1] as string).toLowerCase(), layout: match[2] as Layout };
}

function layoutWarning(layout: Layout): string {
  return layout === 'raw'
    ? 'compression was turned on after the backing was created: its data stays uncompressed (rewriting a backing is not implemented)'
    : 'compression was turned off after the backing was created: it keeps its compressed layout and buffered I/O';
}

function checkUuid(uuid: string): void {
  if (!UUID_PATTERN.test(uuid)) throw new PoolError(`not a UUID: ${JSON.stringify(uuid)}`);
}


async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

function commandError(err: unknown): string {
  const stderr = String((err as { stderr?: unknown }).stderr ?? '').trim();
  return stderr || (err as Error).message;
}

function ioctlsOf(options: FilePoolOptions): FileIoctls | null {
  return options.fileIoctls === undefined ? loadNativeAddon() : options.fileIoctls;
}

/** dst (existing) gets src's data by reflink: FICLONE from the addon, or `cp --reflink=always`. */
async function copyByReflink(src: string, dst: string, ioctls: FileIoctls | null, run: CommandRunner): Promise<void> {
  if (ioctls) await ioctls.cloneFile(src, dst);
  else await run('cp', ['--reflink=always', src, dst]);
}

/** Whether this directory's filesystem can reflink (the way the pool will). */
async function probeReflink(tmpDir: string, copy: (src: string, dst: string) => Promise<void>): Promise<boolean> {
  const src = join(tmpDir, `reflink-probe-${randomUUID()}`);
  const dst = `${src}.clone`;
  try {
    await fs.writeFile(src, Buffer.alloc(4096, 1));
    await fs.writeFile(dst, '');
    await copy(src, dst);
    return true;
  } catch {
    return false;
  } finally {
    await fs.rm(src, { force: true });
    await fs.rm(dst, { force: true });
  }
}
