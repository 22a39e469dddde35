// The node pool of architecture.md: an md array over the node's data devices (raid0, or raid5/6
// when the node has `ec`, with the journal device as the md write journal), btrfs on it, mounted
// at the node's pool directory; the volumes on it are then a FilePool. This module brings the
// array and the filesystem up (create once, assemble and mount after every boot); growing it is
// pool-growth.ts (the steps) and node-pools.ts (running them). It never touches a device that
// holds anything it did not create.
import { promises as fs } from 'node:fs';
import { basename, join } from 'node:path';
import type { Logger } from '../../../lib/logger.js';
import { pcieNamespaces, readMdArray, type NvmeNamespace } from './md-array.js';
import { commandsOf, offlineLevelStep } from './pool-growth.js';
import { PoolError, type CommandRunner } from './storage-pool.js';

export interface NodeDevices {
  /** Serials of the node's data devices (NodeRecord.managedDeviceSerials). */
  readonly dataSerials: readonly string[];
  /** Serial of the journal device, '' for none. */
  readonly journalSerial: string;
  /** Erasure coding: raid5 (3 devices) or raid6 (4 or more) instead of raid0. */
  readonly ec: boolean;
}

export interface BtrfsMdOptions {
  readonly nodeUUID: string;
  readonly devices: NodeDevices;
  /** Where the filesystem is mounted (the FilePool directory). */
  readonly mountPoint: string;
  readonly sysfsRoot: string;
  readonly mountsPath: string;
  readonly run: CommandRunner;
  readonly logger: Logger;
}

export interface PreparedArray {
  readonly mdDevice: string;
  readonly level: string;
  readonly created: boolean;
  readonly mounted: boolean;
}

/** The md array name of a node (also the btrfs label). */
export const arrayNameOf = (nodeUUID: string) => `strata-${nodeUUID.slice(0, 8)}`;

export function raidLevelOf(devices: NodeDevices): { level: string; force: boolean } {
  const n = devices.dataSerials.length;
  if (n === 0) throw new PoolError('the node has no data devices');
  if (devices.ec) {
    if (n < 3) throw new PoolError(`erasure coding needs at least 3 data devices, the node has ${n}`);
    return { level: n >= 4 ? '6' : '5', force: false };
  }
  // md refuses raid0 over one device; a one-device raid1 is the same layout.
  return n === 1 ? { level: '1', force: true } : { level: '0', force: false };
}

/**
 * Brings up the node's array and filesystem and mounts it. Idempotent: an array already
 * running is used as is; otherwise the listed devices that carry its superblock are assembled
 * (devices added to the node since, still blank, join later through the growth steps of
 * pool-growth.ts; a missing member leaves a raid5/6 degraded). Only when no listed device carries
 * it is a new array created, and then only from devices without any signature.
 */
export async function prepareBtrfsMdPool(options: BtrfsMdOptions): Promise<PreparedArray> {
  const { devices, run, logger } = options;
  const name = arrayNameOf(options.nodeUUID);
  const namespaces = await pcieNamespaces(options.sysfsRoot);
  const blockOf = (serial: string) => namespaces.get(serial)?.block;

  let mdDevice = await runningArray(options.sysfsRoot, name, run);
  let created = false;
  let level = '';
  if (!mdDevice) {
    const listed = listedSerials(devices);
    const { present, superblocks, ours } = await membersOf(listed, blockOf, name, run);
    if (ours.length > 0) {
      mdDevice = await assemble(name, ours, run);
      logger.info({ mdDevice, members: ours, listed: present }, 'md array assembled');
      await endRaid4BeforeMount(options, mdDevice, namespaces);
    } else {
      const missing = listed.filter((s) => blockOf(s) === undefined);
      if (missing.length > 0) throw new PoolError(`data device ${missing.join(', ')} is not present on this server`);
      if (superblocks.some((s) => s !== undefined)) {
        const found = present.map((d, i) => `${d}: ${superblocks[i]?.name ?? 'none'}`).join(', ');
        throw new PoolError(`the node's devices are not one array of its own (md superblocks: ${found}); refusing to touch them`);
      }
      const raid = raidLevelOf(devices);
      const useJournal = devices.journalSerial !== '' && ['4', '5', '6'].includes(raid.level);
      if (devices.journalSerial !== '' && !useJournal) logger.warn({ level: raid.level }, `the journal device is not used: raid${raid.level} has no write journal`);
      const data = devices.dataSerials.map((s) => `/dev/${blockOf(s)}`);
      const journal = useJournal ? `/dev/${blockOf(devices.journalSerial)}` : undefined;
      for (const device of journal ? [...data, journal] : data) {
        const signature = await signatureOf(device, run);
        if (signature) throw new PoolError(`device ${device} holds data (${signature}); wipe it before Strata may use it`);
      }
      mdDevice = `/dev/md/${name}`;
      const args = ['--create', mdDevice, '--run', '--metadata=1.2', `--level=${raid.level}`, `--raid-devices=${data.length}`, `--name=${name}`];
      if (raid.force) args.push('--force');
      if (journal) args.push('--write-journal', journal);
      await runOrFail(run, 'mdadm', [...args, ...data], `creating ${name}`);
      created = true;
      level = `raid${raid.level}`;
      logger.info({ mdDevice, level, data, journal }, 'md array created');
    }
  }
  if (!level) level = (await readLevel(options.sysfsRoot, mdDevice)) || 'unknown';

  const type = await signatureOf(mdDevice, run);
  if (!type) {
    await runOrFail(run, 'mkfs.btrfs', ['-q', '-L', name, mdDevice], `creating btrfs on ${mdDevice}`);
    logger.info({ mdDevice }, 'btrfs created');
  } else if (type !== 'btrfs') {
    throw new PoolError(`${mdDevice} holds ${type}, not btrfs; refusing to use it`);
  }

  const mountedHere = await mountOf(options.mountsPath, options.mountPoint);
  let mounted = false;
  if (mountedHere) {
    if (mountedHere.split(' ')[2] !== 'btrfs') throw new PoolError(`${options.mountPoint} is already a mount of something else: ${mountedHere}`);
  } else {
    await fs.mkdir(options.mountPoint, { recursive: true, mode: 0o700 });
    await runOrFail(run, 'mount', ['-t', 'btrfs', mdDevice, options.mountPoint], `mounting ${mdDevice}`);
    mounted = true;
  }
  return { mdDevice, level, created, mounted };
}

/**
 * Right after assembly, before anything is mounted on the array: a parity-less raid4 left by an
 * online grow becomes raid0. That level change returns wrong data to reads in flight (6.12) or
 * hangs (6.1), so it is only ever made here, where nothing reads (pool-growth.ts).
 */
async function endRaid4BeforeMount(options: BtrfsMdOptions, mdDevice: string, namespaces: ReadonlyMap<string, NvmeNamespace>): Promise<void> {
  const running = await runningArray(options.sysfsRoot, arrayNameOf(options.nodeUUID), options.run);
  if (!running) return;
  const step = offlineLevelStep(await readMdArray(options.sysfsRoot, basename(running), namespaces), options.devices.ec);
  if (!step) return;
  for (const [command, args] of commandsOf(step, mdDevice, options.mountPoint)) {
    await runOrFail(options.run, command, args, `${command} ${args.join(' ')} (before mounting)`);
  }
  options.logger.info({ mdDevice, step }, 'md raid4 left by an online grow turned into raid0 before mounting');
}

export interface Reassembled {
  /** The array's device once assembled again (/dev/mdN). */
  readonly mdDevice: string;
  /** The managed devices it was assembled from. */
  readonly members: readonly string[];
  /** What was done, in order (what was already down is not done again). */
  readonly steps: readonly string[];
}

/**
 * Takes the node's pool down and brings it up again from its managed devices, keeping the data:
 * unmounts the btrfs, stops the md array, assembles it from the listed devices that carry its
 * superblock, mounts the btrfs again (node restart with considerBackend, docs/node-operations.md).
 * Resumable from wherever an earlier run stopped (an agent killed in the middle): what is already
 * unmounted or stopped is not done again. Nothing is created, formatted or written under the bare
 * mount point: a step that fails throws with the kernel's reason and leaves the pool down.
 */
export async function reassembleBtrfsMdPool(options: BtrfsMdOptions): Promise<Reassembled> {
  const { run, logger } = options;
  const name = arrayNameOf(options.nodeUUID);
  const steps: string[] = [];
  const mounted = await mountOf(options.mountsPath, options.mountPoint);
  if (mounted) {
    if (mounted.split(' ')[2] !== 'btrfs') throw new PoolError(`${options.mountPoint} is a mount of something else: ${mounted}`);
    await runOrFail(run, 'umount', [options.mountPoint], `unmounting ${options.mountPoint}`);
    steps.push(`unmounted ${options.mountPoint}`);
  }
  const running = await runningArray(options.sysfsRoot, name, run);
  if (running) {
    await runOrFail(run, 'mdadm', ['--stop', running], `stopping ${running}`);
    steps.push(`stopped ${running}`);
  }
  logger.info({ steps }, 'node pool taken down');
  const namespaces = await pcieNamespaces(options.sysfsRoot);
  const listed = listedSerials(options.devices);
  const { present, superblocks, ours } = await membersOf(listed, (s) => namespaces.get(s)?.block, name, run);
  if (ours.length === 0) {
    const found = present.map((d, i) => `${d}: ${superblocks[i]?.name ?? 'none'}`).join(', ') || 'none present';
    throw new PoolError(`assembling ${name} failed: no managed device carries its md superblock (devices ${listed.join(', ')}; md superblocks: ${found})`);
  }
  await assemble(name, ours, run);
  const mdDevice = await runningArray(options.sysfsRoot, name, run);
  if (!mdDevice) throw new PoolError(`assembling ${name} failed: mdadm succeeded but the array is not running`);
  steps.push(`assembled ${mdDevice} from ${ours.join(' ')}`);
  // A reassembly is a moment with nothing mounted: the raid4 an online grow left ends here too.
  await endRaid4BeforeMount(options, mdDevice, namespaces);
  if (await mountOf(options.mountsPath, options.mountPoint)) throw new PoolError(`${options.mountPoint} was mounted by someone else meanwhile`);
  await runOrFail(run, 'mount', ['-t', 'btrfs', mdDevice, options.mountPoint], `mounting ${mdDevice}`);
  steps.push(`mounted ${mdDevice} on ${options.mountPoint}`);
  logger.info({ steps }, 'node pool reassembled');
  return { mdDevice, members: ours, steps };
}

const listedSerials = (devices: NodeDevices) => [...devices.dataSerials, ...(devices.journalSerial !== '' ? [devices.journalSerial] : [])];

/** The listed devices present here, their md superblocks, and those that carry the array `name`'s. */
async function membersOf(listed: readonly string[], blockOf: (serial: string) => string | undefined, name: string, run: CommandRunner) {
  const present = listed.filter((s) => blockOf(s) !== undefined).map((s) => `/dev/${blockOf(s)}`);
  const superblocks = await Promise.all(present.map((d) => examine(d, run)));
  const ours = present.filter((_, i) => superblocks[i]?.name === name);
  return { present, superblocks, ours };
}

async function assemble(name: string, members: readonly string[], run: CommandRunner): Promise<string> {
  const mdDevice = `/dev/md/${name}`;
  await runOrFail(run, 'mdadm', ['--assemble', mdDevice, '--run', ...members], `assembling ${name}`);
  return mdDevice;
}

/** The /proc/mounts line of whatever is mounted at `mountPoint`, undefined when nothing is. */
async function mountOf(mountsPath: string, mountPoint: string): Promise<string | undefined> {
  const mounts = await fs.readFile(mountsPath, 'utf8');
  return mounts.split('\n').find((l) => l.split(' ')[1] === mountPoint);
}

/** The md level of /dev/mdN (or of the /dev/md/<name> link), '' when sysfs does not say. */
async function readLevel(sysfsRoot: string, mdDevice: string): Promise<string> {
  const block = await fs.realpath(mdDevice).then(basename, () => basename(mdDevice));
  return (await fs.readFile(join(sysfsRoot, 'block', block, 'md', 'level'), 'utf8').catch(() => '')).trim();
}

/** An assembled array with our name, found through sysfs and `mdadm --detail`. */
export async function runningArray(sysfsRoot: string, name: string, run: CommandRunner): Promise<string | undefined> {
  for (const block of await fs.readdir(join(sysfsRoot, 'block')).catch(() => [] as string[])) {
    if (!/^md\d+$/.test(block)) continue;
    try {
      const { stdout } = await run('mdadm', ['--detail', '--export', `/dev/${block}`]);
      if (exportedName(stdout) === name) return `/dev/${block}`;
    } catch {
      // inactive or being torn down
    }
  }
  return undefined;
}

export async function examine(device: string, run: CommandRunner): Promise<{ name: string } | undefined> {
  try {
    const { stdout } = await run('mdadm', ['--examine', '--export', device]);
    const name = exportedName(stdout);
    return name === undefined ? undefined : { name };
  } catch {
    return undefined; // no md superblock
  }
}

/** MD_NAME without the "homehost:" prefix mdadm may add. */
export function exportedName(stdout: string): string | undefined {
  const line = stdout.split('\n').find((l) => l.startsWith('MD_NAME='));
  if (!line) return undefined;
  const value = line.slice('MD_NAME='.length).trim();
  return value.includes(':') ? value.slice(value.lastIndexOf(':') + 1) : value;
}

/** The filesystem/RAID signature blkid finds on a device ('' for none). */
export async function signatureOf(device: string, run: CommandRunner): Promise<string> {
  try {
    const { stdout } = await run('blkid', ['-p', '-o', 'value', '-s', 'TYPE', device]);
    return stdout.trim();
  } catch (err) {
    // blkid exits 2 when it finds nothing.
    if ((err as { code?: unknown }).code === 2) return '';
    throw new PoolError(`blkid ${device} failed: ${String((err as { stderr?: unknown }).stderr ?? (err as Error).message).trim()}`);
  }
}

export async function runOrFail(run: CommandRunner, command: string, args: string[], what: string): Promise<void> {
  try {
    await run(command, args);
  } catch (err) {
    throw new PoolError(`${what} failed: ${String((err as { stderr?: unknown }).stderr ?? (err as Error).message).trim()}`);
  }
}
