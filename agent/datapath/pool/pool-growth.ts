// Growing a node's md + btrfs pool when devices are added to it (POST /api/v2/nvmeDevices puts
// them in the node record's managedDeviceSerials), and the state of each device. Pure: the
// caller reads the array (md-array.ts) and the devices' signatures, runs the one step planned,
// and plans again on its next tick, so a grow cut anywhere (agent restart, reboot) goes on from
// what the kernel shows. What md can do (checked on Debian's 6.1 kernel, mdadm 4.2):
//
//   raid0   mdadm --grow --level=4 --raid-devices=N+k+1 --force --add <new...>: md takes it over as
//           raid4 with its parity slot empty, reshapes it onto N+k data devices, and the array
//           STAYS raid4 (parity slot empty: striped like raid0, no parity written). Without
//           --level=4, mdadm's background process would turn it back into raid0 once the
//           reshape is done, and that level change is unsafe while the pool serves I/O (below).
//   raid4   (parity slot empty: a raid0 pool that grew online) grows the same way.
//   raid1   a one-device raid1 (what a one-device node gets; md refuses raid0 over one device)
//           becomes raid0 with `mdadm --grow --level=0`, then grows as raid0. Adding a mirror
//           would add no capacity.
//   raid5/6 mdadm --add <new...> (spares), then mdadm --grow --raid-devices=N+k.
//           NOT with a write journal: the kernel refuses to reshape an array that has one
//           (raid5.c check_reshape: "Cannot set device shape ... Invalid argument"). The API
//           refuses such additions; if one arrives anyway the device is reported Failed.
//
// THE raid4 → raid0 LEVEL CHANGE IS NEVER DONE ONLINE. Reads in flight while md takes a raid4
// array over as raid0 (level_store) came back WRONG on Debian 13's 6.12 (6.12.117): the first
// 128 KiB of a 1 MiB O_DIRECT read right, the rest from other places of the array (every other
// 64 KiB chunk further on), with no error; the data at rest stayed right (re-reads matched). On
// Debian 12's 6.1 the same step with I/O in flight hung (mdadm, btrfs-transaction and the
// readers blocked in D state). The reshape itself, the raid1 → raid0 and raid0 → raid4
// takeovers and reads in the raid4 array were right in every trial (bench/reshape-reads.ts,
// docs/datapath.md "Pool growth and the raid4 → raid0 level change"). So the agent turns a
// parity-less raid4 into raid0 only when it has just assembled the array, before mounting
// anything on it (offlineLevelStep, btrfs-md-pool.ts); online it stays raid4. The takeovers still
// made online (raid1 → raid0, raid0 → raid4 at the start of a grow) returned no wrong data in
// ≈10 trials each, but one of them HUNG the array on 6.12 with writes in flight (array_state
// write-pending, mdadm and btrfs in D state): see docs/datapath.md; not solved yet.
//
// After md, `btrfs filesystem resize max` grows the filesystem into the array (online). btrfs
// refuses sizes below 256 MiB (EINVAL), so a smaller array is left as it is.
import { isActiveData, isArrayBusy, isFaulty, isJournal, type MdArray } from './md-array.js';

export const BTRFS_MIN_RESIZE_BYTES = 256n * 1024n * 1024n;

/** A data device the node record lists, as found on this server. */
export interface DesiredDevice {
  readonly serial: string;
  /** Kernel block name when the device is present. */
  readonly block?: string;
  /**
   * What blkid finds on it: '' nothing, 'ours' this array's md superblock, or the signature
   * (ext4, linux_raid_member of another array, ...). Undefined when not checked (members).
   */
  readonly signature?: string;
}

export type GrowthStep =
  /** md is reshaping / recovering: nothing to do until it is done. */
  | { readonly kind: 'wait'; readonly reason: string }
  /** A one-device raid1 → raid0 (online); a parity-less raid4 → raid0 (offline only: offlineLevelStep). */
  | { readonly kind: 'to-raid0' }
  /** raid0 / parity-less raid4 onto `raidDevices` data devices; the array ends as parity-less raid4. */
  | { readonly kind: 'grow-raid0'; readonly add: readonly string[]; readonly serials: readonly string[]; readonly raidDevices: number }
  | { readonly kind: 'add-spares'; readonly add: readonly string[]; readonly serials: readonly string[] }
  | { readonly kind: 'grow-raid-devices'; readonly raidDevices: number }
  | { readonly kind: 'resize-filesystem' }
  | { readonly kind: 'done' };

export interface GrowthPlan {
  readonly step: GrowthStep;
  /** Desired devices that will not join the pool, with the reason (reported Failed). */
  readonly refused: ReadonlyMap<string, string>;
}

export interface GrowthInput {
  readonly array: MdArray;
  readonly ec: boolean;
  readonly desired: readonly DesiredDevice[];
  /** The filesystem's device size and slack (btrfs filesystem usage). */
  readonly filesystem: { readonly deviceSize: bigint; readonly deviceSlack: bigint };
}

export function planGrowth(input: GrowthInput): GrowthPlan {
  const { array, ec } = input;
  const refused = new Map<string, string>();
  const memberSerials = new Set(array.members.filter((m) => m.serial !== '').map((m) => m.serial));
  const candidates: { serial: string; block: string }[] = [];
  for (const d of input.desired) {
    if (memberSerials.has(d.serial)) continue;
    if (d.block === undefined) refused.set(d.serial, `device ${d.serial} is not present on this server`);
    else if (d.signature === 'ours') refused.set(d.serial, `device ${d.serial} carries this pool's md superblock but is not in the running array; it is not re-added automatically`);
    else if (d.signature) refused.set(d.serial, `device ${d.serial} holds data (${d.signature}); wipe it before Strata may use it`);
    else candidates.push({ serial: d.serial, block: d.block });
  }
  const desiredSerials = new Set(input.desired.map((d) => d.serial));
  const spares = array.members.filter((m) => m.slot === null && !isJournal(m) && !isFaulty(m) && desiredSerials.has(m.serial));
  const active = array.members.filter((m) => isActiveData(m) && !isFaulty(m)).length;
  const hasJournal = array.members.some(isJournal);
  const plan = (step: GrowthStep): GrowthPlan => ({ step, refused });

  if (hasJournal && (candidates.length > 0 || spares.length > 0)) {
    // Refused whatever md is doing: it never can.
    const reason = `the pool's md ${array.level} array has a write journal, and the kernel cannot reshape such an array: the device cannot be added`;
    for (const c of candidates) refused.set(c.serial, reason);
    for (const s of spares) refused.set(s.serial, reason);
    candidates.length = 0;
    spares.length = 0;
  }
  if (isArrayBusy(array)) return plan({ kind: 'wait', reason: `md ${array.syncAction === 'none' ? 'reshape' : array.syncAction} in progress` });
  // A parity-less raid4 is NOT turned into raid0 here (online): see the header.

  if (candidates.length > 0) {
    const add = candidates.map((c) => `/dev/${c.block}`);
    const serials = candidates.map((c) => c.serial);
    if (array.level === 'raid1') {
      if (array.raidDisks === 1) return plan({ kind: 'to-raid0' });
      for (const s of serials) refused.set(s, `the pool is a ${array.raidDisks}-way md raid1, which does not grow by adding devices`);
    } else if (array.level === 'raid0' || (!ec && isParitylessRaid4(array))) {
      return plan({ kind: 'grow-raid0', add, serials, raidDevices: active + candidates.length });
    } else if (['raid5', 'raid6'].includes(array.level)) {
      return plan({ kind: 'add-spares', add, serials });
    } else {
      for (const s of serials) refused.set(s, `an md ${array.level} array does not grow by adding devices`);
    }
  }
  if (spares.length > 0 && ['raid5', 'raid6'].includes(array.level)) {
    return plan({ kind: 'grow-raid-devices', raidDevices: active + spares.length });
  }
  if (input.filesystem.deviceSlack > 0n && array.arrayBytes >= BTRFS_MIN_RESIZE_BYTES) return plan({ kind: 'resize-filesystem' });
  return plan({ kind: 'done' });
}

/**
 * An md raid4 whose parity slot (the last) has no working device: what a raid0 pool is after an
 * online grow. Striped like raid0, no parity is written; md counts it degraded by one.
 */
export function isParitylessRaid4(array: MdArray): boolean {
  return array.level === 'raid4' && !array.members.some((m) => m.slot === array.raidDisks - 1 && !isFaulty(m));
}

/**
 * The level change to make while NOTHING uses the array (just assembled, not mounted): a
 * parity-less raid4 (not reshaping) of a node without ec → raid0. Never run it on an array in use:
 * see the header.
 */
export function offlineLevelStep(array: MdArray, ec: boolean): GrowthStep | undefined {
  if (ec || isArrayBusy(array) || !isParitylessRaid4(array)) return undefined;
  return { kind: 'to-raid0' };
}

/** The argv of a step (mdadm / btrfs); none for wait and done. */
export function commandsOf(step: GrowthStep, mdDevice: string, mountPoint: string): [string, string[]][] {
  switch (step.kind) {
    case 'to-raid0':
      return [['mdadm', ['--grow', mdDevice, '--level=0']]];
    case 'grow-raid0':
      // raid4 as the end level: no raid4 → raid0 level change while the pool serves I/O. --force:
      // mdadm refuses to end degraded otherwise ("Need 2 spares to avoid degraded array"); the
      // empty parity slot is the point.
      return [['mdadm', ['--grow', mdDevice, '--level=4', `--raid-devices=${step.raidDevices + 1}`, '--force', '--add', ...step.add]]];
    case 'add-spares':
      return [['mdadm', ['--add', mdDevice, ...step.add]]];
    case 'grow-raid-devices':
      return [['mdadm', ['--grow', mdDevice, `--raid-devices=${step.raidDevices}`]]];
    case 'resize-filesystem':
      return [['btrfs', ['filesystem', 'resize', 'max', mountPoint]]];
    default:
      return [];
  }
}

export type DeviceState = 'Healthy' | 'Adding' | 'Rebuilding' | 'Failed';

export interface PoolDeviceStatus {
  readonly serial: string;
  readonly role: 'data' | 'journal';
  readonly state: DeviceState;
  readonly sizeBytes: bigint;
  readonly error: string;
  /** md's corrected read errors of the member (integrity-errors.ts); absent: not measured. */
  readonly recoverableIntegrityErrors?: bigint;
}

/**
 * Each device's state: the desired data devices, the array's journal, and any other member of
 * the array. `adding` are the devices of a grow not finished yet (written ahead by the caller);
 * they stay Adding until the filesystem has grown too.
 */
export function deviceStatuses(
  array: MdArray,
  desired: readonly DesiredDevice[],
  plan: GrowthPlan,
  adding: ReadonlySet<string>,
  sizeOf: (serial: string) => bigint,
): PoolDeviceStatus[] {
  const statuses: PoolDeviceStatus[] = [];
  const growing = plan.step.kind !== 'done';
  const recovering = ['recover', 'resync'].includes(array.syncAction);
  const bySerial = new Map(array.members.filter((m) => m.serial !== '').map((m) => [m.serial, m]));
  const seen = new Set<string>();
  const push = (serial: string, role: 'data' | 'journal', state: DeviceState, error = '') => {
    seen.add(serial);
    statuses.push({ serial, role, state, sizeBytes: sizeOf(serial), error });
  };
  for (const d of desired) {
    const member = bySerial.get(d.serial);
    const refusedWhy = plan.refused.get(d.serial);
    if (refusedWhy) push(d.serial, 'data', 'Failed', refusedWhy);
    else if (!member) push(d.serial, 'data', 'Adding');
    else if (isFaulty(member)) push(d.serial, 'data', 'Failed', 'md marked the device faulty');
    else if (member.slot === null) push(d.serial, 'data', recovering && !adding.has(d.serial) ? 'Rebuilding' : 'Adding');
    else if (adding.has(d.serial) && growing) push(d.serial, 'data', 'Adding');
    else if (!member.flags.includes('in_sync')) push(d.serial, 'data', 'Rebuilding');
    else push(d.serial, 'data', 'Healthy');
  }
  for (const member of array.members) {
    if (member.serial === '' || seen.has(member.serial)) continue;
    const state: DeviceState = isFaulty(member) ? 'Failed' : !isJournal(member) && !member.flags.includes('in_sync') ? 'Rebuilding' : 'Healthy';
    push(member.serial, isJournal(member) ? 'journal' : 'data', state, isFaulty(member) ? 'md marked the device faulty' : '');
  }
  return statuses;
}

/** Raw bytes per byte of data at this md level (parity, mirrors), as a fraction. */
export function parityFactor(level: string, raidDisks: number): { readonly num: bigint; readonly den: bigint } {
  const n = BigInt(Math.max(1, raidDisks));
  switch (level) {
    case 'raid1':
      return { num: n, den: 1n };
    case 'raid4':
    case 'raid5':
      return n > 1n ? { num: n, den: n - 1n } : { num: 1n, den: 1n };
    case 'raid6':
      return n > 2n ? { num: n, den: n - 2n } : { num: 1n, den: 1n };
    default:
      return { num: 1n, den: 1n };
  }
}
