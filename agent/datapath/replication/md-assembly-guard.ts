// Keeps udev's incremental md assembly off the devices of replicated volumes.
//
// Every device that carries a replicated volume's md superblock is assembled by the agent alone,
// from the copies etcd calls in sync (docs/replication.md): a copy's backing under the loop device
// its node keeps for a promotion, a primary's own leg, the replicas' legs the primary connects over
// NVMe/TCP. mdadm's udev rule (64-md-raid-assembly.rules) runs `mdadm --incremental` on every block
// device whose blkid type is linux_raid_member. Measured in the lab (6.12, udevd running, Debian's
// mdadm.conf without `AUTO -all`): attaching a loop device over such a backing made md127 at once,
// holding the device (an agent's own assembly then fails with EBUSY) and, where the superblock
// counts the device as the array's only working one, running it (auto-read-only, then written at
// the first write): an array beside the primary's, over a copy the primary writes through the
// replication export. `AUTO -all` in mdadm.conf stops it, but it is the admin's file and easy to
// miss; this rule does not depend on it.
//
// The rule marks such devices SYSTEMD_READY=0, which 64-md-raid-assembly.rules (and LVM's rules)
// skip: the mark multipath gives its path devices for the same reason. It matches the array name
// in the superblock (blkid's ID_FS_LABEL, read by 60-persistent-storage.rules before this rule):
// `strata-` and 24 hex digits is a replicated volume's array; the node pool's array (`strata-` and
// 8, with a homehost) is not matched and assembles as before. Written on /run: it lives exactly as
// long as the devices it guards (loop devices and NVMe/TCP connections end at a reboot too), and
// every agent start writes it again before its first pass.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { isDirectory, writeFileAtomic } from '../../../lib/files.js';
import type { Logger } from '../../../lib/logger.js';
import type { CommandRunner } from '../pool/storage-pool.js';
import { MD_NAME_HEX_DIGITS } from './block-stack.js';

/** Where udevd reads runtime rules (systemd-udevd: /etc, /run, /usr/lib, by file name). */
export const UDEV_RUNTIME_RULES_DIR = '/run/udev/rules.d';
/** Before 64-md-raid-assembly.rules, after 60-persistent-storage.rules (blkid). */
export const MD_ASSEMBLY_GUARD_RULE = '63-strata-replicated-md.rules';

/** The superblock names of replicated volumes' arrays (with or without a homehost), as a udev glob. */
export const REPLICATED_ARRAY_LABELS = `strata-${'?'.repeat(MD_NAME_HEX_DIGITS)}|*:strata-${'?'.repeat(MD_NAME_HEX_DIGITS)}`;

export const MD_ASSEMBLY_GUARD_TEXT = [
  '# Written by strata-agent at every start (agent/datapath/replication/md-assembly-guard.ts).',
  "# A replicated volume's md array is assembled by the agent alone, from the copies etcd calls in",
  "# sync: mdadm's incremental assembly and LVM skip the devices that carry its superblock.",
  `SUBSYSTEM=="block", ACTION=="add|change", ENV{ID_FS_TYPE}=="linux_raid_member", ENV{ID_FS_LABEL}=="${REPLICATED_ARRAY_LABELS}", ENV{SYSTEMD_READY}="0"`,
  '',
].join('\n');

export interface MdAssemblyGuardOptions {
  readonly run: CommandRunner;
  readonly logger: Logger;
  /** Default /run/udev (tests: a temporary directory). */
  readonly udevRunDir?: string;
}

/**
 * Writes the rule (when it is not there as it should be) and has udevd read it. Where udev does
 * not run (no /run/udev: containers, the lab's guests without udevd) nothing assembles on its own
 * and there is nothing to do. 'written' | 'unchanged' | 'no-udev'; throws when udev runs and the
 * rule cannot be written (the caller reports it: replicated volumes are then at udev's mercy).
 */
export async function installMdAssemblyGuard(options: MdAssemblyGuardOptions): Promise<'written' | 'unchanged' | 'no-udev'> {
  const udevRunDir = options.udevRunDir ?? '/run/udev';
  if (!(await isDirectory(udevRunDir))) return 'no-udev';
  const dir = join(udevRunDir, 'rules.d');
  const path = join(dir, MD_ASSEMBLY_GUARD_RULE);
  const current = await fs.readFile(path, 'utf8').catch(() => undefined);
  if (current === MD_ASSEMBLY_GUARD_TEXT) return 'unchanged';
  await fs.mkdir(dir, { recursive: true });
  writeFileAtomic(path, MD_ASSEMBLY_GUARD_TEXT);
  // udevd reads changed rules by itself within seconds; the reload makes it now. No udevadm (a
  // udev-less system that still has /run/udev): nothing to reload.
  await options.run('udevadm', ['control', '--reload']).catch((err: unknown) => {
    options.logger.warn({ err }, 'udevadm control --reload failed; udevd reads the new rule at its next rules check');
  });
  return 'written';
}
