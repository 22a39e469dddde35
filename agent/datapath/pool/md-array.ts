// Reads what the kernel says about the node's md array (driver: sysfs only, no mdadm): its level,
// member devices and their states, a running reshape / resync / recovery and its progress, and
// its size. /sys/block/mdX/md/* is the truth mdadm itself reads; `mdadm --detail --export` would
// say the same, slower, and calls a journal device "spare".
import { promises as fs } from 'node:fs';
import { join } from 'node:path';

/** A PCIe NVMe namespace of this server, found by its controller's serial. */
export interface NvmeNamespace {
  readonly serial: string;
  /** Kernel block device name (nvme0n1). */
  readonly block: string;
  readonly sizeBytes: bigint;
}

export interface MdMember {
  /** Kernel block device name of the member (nvme0n1). */
  readonly block: string;
  /** Serial of the NVMe device it is, '' when it is not a known PCIe NVMe namespace. */
  readonly serial: string;
  /** Slot in the array; null for spares and the journal. */
  readonly slot: number | null;
  /** md's flags for the member: in_sync, faulty, spare, journal, write_mostly, ... */
  readonly flags: readonly string[];
  readonly sizeBytes: bigint;
  /** md's count of read errors it corrected on this member (dev-X/errors); undefined when unread. */
  readonly errors?: bigint;
}

export interface MdArray {
  /** md127 */
  readonly block: string;
  /** /dev/md127 */
  readonly device: string;
  /** raid0, raid1, raid4, raid5, raid6 */
  readonly level: string;
  /** Member slots the array has (the new count while a reshape runs). */
  readonly raidDisks: number;
  /** idle, reshape, resync, recover, check, repair, frozen; 'none' for levels without one (raid0). */
  readonly syncAction: string;
  /** Progress (0..1) of the running sync action, undefined when none runs. */
  readonly syncProgress: number | undefined;
  /** A reshape is recorded (running, or interrupted and waiting to continue). */
  readonly reshapePending: boolean;
  /** Slots without a working member. */
  readonly degraded: number;
  readonly arrayBytes: bigint;
  readonly members: readonly MdMember[];
}

/** Every PCIe NVMe namespace 1 by serial (namespace 1: the one Strata uses of a device). */
export async function pcieNamespaces(sysfsRoot: string): Promise<Map<string, NvmeNamespace>> {
  const classDir = join(sysfsRoot, 'class', 'nvme');
  const found = new Map<string, NvmeNamespace>();
  const controllers = (await fs.readdir(classDir).catch(() => [] as string[])).sort(byNumber);
  for (const controller of controllers) {
    const serial = (await readText(join(classDir, controller, 'serial'))).trim();
    if (!serial || found.has(serial)) continue; // a dual-ported drive: the lowest controller wins
    const transport = (await readText(join(classDir, controller, 'transport'))).trim() || 'pcie';
    if (transport !== 'pcie') continue;
    const namespaces = (await fs.readdir(join(classDir, controller)).catch(() => [] as string[]))
      .filter((e) => new RegExp(`^${controller}n\\d+$`).test(e))
      .sort(byNumber);
    const block = namespaces[0];
    if (!block) continue;
    const sectors = (await readText(join(classDir, controller, block, 'size'))).trim();
    found.set(serial, { serial, block, sizeBytes: /^\d+$/.test(sectors) ? BigInt(sectors) * 512n : 0n });
  }
  return found;
}

/** The array as sysfs shows it; `namespaces` names the members. */
export async function readMdArray(sysfsRoot: string, block: string, namespaces: ReadonlyMap<string, NvmeNamespace>): Promise<MdArray> {
  const base = join(sysfsRoot, 'block', block);
  const md = join(base, 'md');
  const serialOf = new Map([...namespaces.values()].map((n) => [n.block, n]));
  const members: MdMember[] = [];
  for (const entry of (await fs.readdir(md).catch(() => [] as string[])).sort()) {
    if (!entry.startsWith('dev-')) continue;
    const memberBlock = entry.slice('dev-'.length);
    const slot = (await readText(join(md, entry, 'slot'))).trim();
    const known = serialOf.get(memberBlock);
    const errors = (await readText(join(md, entry, 'errors'))).trim();
    members.push({
      block: memberBlock,
      serial: known?.serial ?? '',
      slot: /^\d+$/.test(slot) ? Number(slot) : null,
      flags: (await readText(join(md, entry, 'state'))).trim().split(',').filter((f) => f !== ''),
      sizeBytes: known?.sizeBytes ?? 0n,
      ...(/^\d+$/.test(errors) ? { errors: BigInt(errors) } : {}),
    });
  }
  const syncAction = (await readText(join(md, 'sync_action'))).trim() || 'none';
  const sectors = (await readText(join(base, 'size'))).trim();
  return {
    block,
    device: `/dev/${block}`,
    level: (await readText(join(md, 'level'))).trim(),
    raidDisks: Number.parseInt((await readText(join(md, 'raid_disks'))).trim(), 10) || 0,
    syncAction,
    syncProgress: parseSyncCompleted(await readText(join(md, 'sync_completed'))),
    reshapePending: /^\d+$/.test((await readText(join(md, 'reshape_position'))).trim()),
    degraded: Number.parseInt((await readText(join(md, 'degraded'))).trim(), 10) || 0,
    arrayBytes: /^\d+$/.test(sectors) ? BigInt(sectors) * 512n : 0n,
    members,
  };
}

/** `sync_completed`: "done / total" in sectors, or "none". */
export function parseSyncCompleted(text: string): number | undefined {
  const match = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(text);
  if (!match) return undefined;
  const total = Number(match[2]);
  return total > 0 ? Math.min(1, Number(match[1]) / total) : undefined;
}

/** Whether md is working on the array now (or has a reshape to finish). */
export function isArrayBusy(array: MdArray): boolean {
  return array.reshapePending || !['idle', 'none', 'frozen'].includes(array.syncAction);
}

export const isJournal = (member: MdMember) => member.flags.includes('journal');
export const isFaulty = (member: MdMember) => member.flags.includes('faulty');
/** A data member with a slot (not a spare, not the journal). */
export const isActiveData = (member: MdMember) => member.slot !== null && !isJournal(member);

/** Natural order: nvme2 before nvme10, nvme0n2 before nvme0n10. */
function byNumber(a: string, b: string): number {
  return a.localeCompare(b, 'en', { numeric: true });
}

async function readText(path: string): Promise<string> {
  return fs.readFile(path, 'utf8').catch(() => '');
}
