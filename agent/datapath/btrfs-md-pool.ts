// The node pool of architecture.md: an md array over the node's data devices (raid0, or raid5/6
// when the node has `ec`, with the journal device as the md write journal), btrfs on it, mounted
// at the node's pool directory; the volumes on it are then a FilePool. This module only brings
// the array and the filesystem up (create once, assemble and mount after every boot); it never
// touches a device that holds anything it did not create.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../lib/logger.js';
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
 * running is used as is, an array whose members carry our superblocks is assembled, and only
 * devices without any signature are ever turned into a new array.
 */
export async function prepareBtrfsMdPool(options: BtrfsMdOptions): Promise<PreparedArray> {
  const { devices, run, logger } = options;
  const name = arrayNameOf(options.nodeUUID);
  const { level, force } = raidLevelOf(devices);
  const data = await Promise.all(devices.dataSerials.map((s) => deviceOfSerial(options.sysfsRoot, s)));
  const useJournal = devices.journalSerial !== '' && ['4', '5', '6'].includes(level);
  if (devices.journalSerial !== '' && !useJournal) logger.warn({ level }, `the journal device is not used: raid${level} has no write journal`);
  const journal = useJournal ? await deviceOfSerial(options.sysfsRoot, devices.journalSerial) : undefined;
  const members = journal ? [...data, journal] : data;

  let mdDevice = await runningArray(options.sysfsRoot, name, run);
  let created = false;
  if (!mdDevice) {
    const superblocks = await Promise.all(members.map((d) => examine(d, run)));
    const ours = superblocks.filter((s) => s?.name === name).length;
    if (ours === members.length) {
      mdDevice = `/dev/md/${name}`;
      await runOrFail(run, 'mdadm', ['--assemble', mdDevice, '--run', ...members], `assembling ${name}`);
      logger.info({ mdDevice, members }, 'md array assembled');
    } else if (superblocks.every((s) => s === undefined)) {
      for (const device of members) {
        const signature = await signatureOf(device, run);
        if (signature) throw new PoolError(`device ${device} holds data (${signature}); wipe it before Strata may use it`);
      }
      mdDevice = `/dev/md/${name}`;
      const args = ['--create', mdDevice, '--run', '--metadata=1.2', `--level=${level}`, `--raid-devices=${data.length}`, `--name=${name}`];
      if (force) args.push('--force');
      if (journal) args.push('--write-journal', journal);
      await runOrFail(run, 'mdadm', [...args, ...data], `creating ${name}`);
      created = true;
      logger.info({ mdDevice, level, data, journal }, 'md array created');
    } else {
      const found = members.map((d, i) => `${d}: ${superblocks[i]?.name ?? 'none'}`).join(', ');
      throw new PoolError(`the node's devices are not one array of its own (md superblocks: ${found}); refusing to touch them`);
    }
  }

  const type = await signatureOf(mdDevice, run);
  if (!type) {
    await runOrFail(run, 'mkfs.btrfs', ['-q', '-L', name, mdDevice], `creating btrfs on ${mdDevice}`);
    logger.info({ mdDevice }, 'btrfs created');
  } else if (type !== 'btrfs') {
    throw new PoolError(`${mdDevice} holds ${type}, not btrfs; refusing to use it`);
  }

  const mounts = await fs.readFile(options.mountsPath, 'utf8');
  const mountedHere = mounts.split('\n').find((l) => l.split(' ')[1] === options.mountPoint);
  let mounted = false;
  if (mountedHere) {
    if (mountedHere.split(' ')[2] !== 'btrfs') throw new PoolError(`${options.mountPoint} is already a mount of something else: ${mountedHere}`);
  } else {
    await fs.mkdir(options.mountPoint, { recursive: true, mode: 0o700 });
    await runOrFail(run, 'mount', ['-t', 'btrfs', mdDevice, options.mountPoint], `mounting ${mdDevice}`);
    mounted = true;
  }
  return { mdDevice, level: `raid${level}`, created, mounted };
}

/** /dev/<namespace 1> of the PCIe NVMe controller with this serial. */
async function deviceOfSerial(sysfsRoot: string, serial: string): Promise<string> {
  const classDir = join(sysfsRoot, 'class', 'nvme');
  for (const controller of await fs.readdir(classDir).catch(() => [] as string[])) {
    const value = await fs.readFile(join(classDir, controller, 'serial'), 'utf8').catch(() => '');
    if (value.trim() !== serial) continue;
    const transport = await fs.readFile(join(classDir, controller, 'transport'), 'utf8').catch(() => 'pcie');
    if (transport.trim() !== 'pcie') continue;
    const namespaces = (await fs.readdir(join(classDir, controller))).filter((e) => new RegExp(`^${controller}n\\d+$`).test(e)).sort();
    if (namespaces[0]) return `/dev/${namespaces[0]}`;
  }
  throw new PoolError(`data device ${serial} is not present on this server`);
}

/** An assembled array with our name, found through sysfs and `mdadm --detail`. */
async function runningArray(sysfsRoot: string, name: string, run: CommandRunner): Promise<string | undefined> {
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

async function examine(device: string, run: CommandRunner): Promise<{ name: string } | undefined> {
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
async function signatureOf(device: string, run: CommandRunner): Promise<string> {
  try {
    const { stdout } = await run('blkid', ['-p', '-o', 'value', '-s', 'TYPE', device]);
    return stdout.trim();
  } catch (err) {
    // blkid exits 2 when it finds nothing.
    if ((err as { code?: unknown }).code === 2) return '';
    throw new PoolError(`blkid ${device} failed: ${String((err as { stderr?: unknown }).stderr ?? (err as Error).message).trim()}`);
  }
}

async function runOrFail(run: CommandRunner, command: string, args: string[], what: string): Promise<void> {
  try {
    await run(command, args);
  } catch (err) {
    throw new PoolError(`${what} failed: ${String((err as { stderr?: unknown }).stderr ?? (err as Error).message).trim()}`);
  }
}
