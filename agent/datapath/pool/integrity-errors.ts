// The pool's data-integrity error counts (api.md "Data-integrity counters", decisions.md): what
// md and btrfs themselves count, read from sysfs, both lifetime counters kept on disk by the
// kernel (md in each member's superblock, btrfs in its device tree).
//
//   recoverable    md's corrected read errors per member (/sys/block/mdX/md/dev-*/errors, "read
//                  errors that did not evict the device"): a read that failed on one member and
//                  md rewrote from the others (raid1/5/6), or one met while the array was
//                  read-only (not in service); raid0 corrects nothing, so its count stays 0
//   unrecoverable  btrfs' error stats of the filesystem on the array
//                  (/sys/fs/btrfs/<fsid>/devinfo/<devid>/error_stats, kernel 5.14 and later):
//                  read_errs (md could not serve the read), corruption_errs (checksum mismatch)
//                  and generation_errs (stale metadata). Data is single on the one md device, so
//                  btrfs has no second copy to repair data from. write_errs and flush_errs are
//                  write failures, not integrity errors of stored data, and are not counted.
//
// btrfs sees one device (the md array), so its counts belong to the node, not to an NVMe device;
// md's count is per member and maps to the member's NVMe serial.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { MdArray } from './md-array.js';

export interface BtrfsErrorStats {
  readonly writeErrs: bigint;
  readonly readErrs: bigint;
  readonly flushErrs: bigint;
  readonly corruptionErrs: bigint;
  readonly generationErrs: bigint;
}

const FIELDS: Record<string, keyof BtrfsErrorStats> = {
  write_errs: 'writeErrs',
  read_errs: 'readErrs',
  flush_errs: 'flushErrs',
  corruption_errs: 'corruptionErrs',
  generation_errs: 'generationErrs',
};

/** One devinfo/<devid>/error_stats file; undefined for "invalid" (stats not loaded) or garbage. */
export function parseBtrfsErrorStats(text: string): BtrfsErrorStats | undefined {
  const values = new Map<keyof BtrfsErrorStats, bigint>();
  for (const line of text.split('\n')) {
    const match = /^\s*(\w+)\s+(\d+)\s*$/.exec(line);
    const field = match ? FIELDS[match[1] as string] : undefined;
    if (field) values.set(field, BigInt(match![2] as string));
  }
  if (values.size !== Object.keys(FIELDS).length) return undefined;
  return Object.fromEntries(values) as unknown as BtrfsErrorStats;
}

/**
 * The error stats of the btrfs filesystem that has the block device `block` (md127), summed over
 * its devices; undefined when no mounted btrfs has it or a device's stats are not valid.
 */
export async function readBtrfsErrorStats(sysfsRoot: string, block: string): Promise<BtrfsErrorStats | undefined> {
  const base = join(sysfsRoot, 'fs', 'btrfs');
  for (const fsid of await fs.readdir(base).catch(() => [] as string[])) {
    const devices = await fs.readdir(join(base, fsid, 'devices')).catch(() => [] as string[]);
    if (!devices.includes(block)) continue;
    const devids = await fs.readdir(join(base, fsid, 'devinfo')).catch(() => [] as string[]);
    if (devids.length === 0) return undefined;
    const sum = { writeErrs: 0n, readErrs: 0n, flushErrs: 0n, corruptionErrs: 0n, generationErrs: 0n };
    for (const devid of devids) {
      const stats = parseBtrfsErrorStats(await fs.readFile(join(base, fsid, 'devinfo', devid, 'error_stats'), 'utf8').catch(() => ''));
      if (!stats) return undefined;
      for (const key of Object.keys(sum) as (keyof BtrfsErrorStats)[]) sum[key] += stats[key];
    }
    return sum;
  }
  return undefined;
}

export interface IntegrityErrors {
  /** md's corrected read errors, all members; undefined when md showed no member's count. */
  readonly recoverable: bigint | undefined;
  /** btrfs' read, corruption and generation errors; undefined when not read. */
  readonly unrecoverable: bigint | undefined;
  /** Per NVMe serial: md's corrected read errors of that member. */
  readonly recoverableBySerial: ReadonlyMap<string, bigint>;
}

export function integrityErrorsOf(array: MdArray, btrfs: BtrfsErrorStats | undefined): IntegrityErrors {
  const counted = array.members.filter((m) => m.errors !== undefined);
  const recoverableBySerial = new Map<string, bigint>();
  for (const m of counted) if (m.serial !== '') recoverableBySerial.set(m.serial, (recoverableBySerial.get(m.serial) ?? 0n) + m.errors!);
  return {
    recoverable: counted.length > 0 ? counted.reduce((sum, m) => sum + m.errors!, 0n) : undefined,
    unrecoverable: btrfs ? btrfs.readErrs + btrfs.corruptionErrs + btrfs.generationErrs : undefined,
    recoverableBySerial,
  };
}
