// Reads the NVMe controllers of this server from sysfs (the driver layer of the inventory).
//
// Layout read (Linux, drivers/nvme/host/core.c and drivers/pci/slot.c):
//   <sysfs>/class/nvme/nvmeN/{serial,model,firmware_rev,transport,address,numa_node}
//   <sysfs>/class/nvme/nvmeN/device/numa_node       (the PCI function; older kernels)
//   <sysfs>/class/nvme/nvmeN/<ns>/size              (512-byte sectors, whatever the LBA size)
//   <sysfs>/class/nvme/nvmeN/<ns>/<ns>pK/           (partitions) and <ns>/holders/ (dm, md)
// <ns> is nvmeXnY, or nvmeXcYnZ (the hidden per-path device) under native NVMe multipath; the
// block device in /dev is then nvmeXnZ. Controller numbers follow probe order, not slots or
// serials, so devices are keyed by serial and the controller name is only informative.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';

export interface NvmeControllerFacts {
  /** Trimmed serial (sysfs pads it with spaces to 20 characters). */
  readonly serial: string;
  readonly model: string;
  readonly firmware: string;
  /** PCI address of the controller function, e.g. 0000:01:00.0. */
  readonly pciAddress: string;
  /** NUMA node of the PCI function; -1 when the platform does not say. */
  readonly numaNode: number;
  /** Kernel controller name (nvme0, ...); changes across boots. */
  readonly controller: string;
  /** Sum of the namespaces' sizes in bytes, as a decimal string (may exceed 2^53). */
  readonly sizeBytes: string;
  /** Block device names of the namespaces (nvme0n1, ...). */
  readonly namespaces: readonly string[];
  /** A namespace, one of its partitions or a device stacked on them is mounted or used as swap. */
  readonly holdsOS: boolean;
}

export interface SysfsNvmeOptions {
  readonly sysfsRoot: string;
  /** /proc/self/mounts format: source first. */
  readonly mountsPath: string;
  /** /proc/swaps format: header line, filename first. */
  readonly swapsPath?: string;
}

const controllerName = /^nvme\d+$/;
const namespaceDir = /^nvme\d+(c\d+)?n\d+$/;
const SECTOR_BYTES = 512n;

/** Every PCIe NVMe controller, one per serial, sorted by serial. */
export async function readNvmeControllers(options: SysfsNvmeOptions): Promise<NvmeControllerFacts[]> {
  const classDir = join(options.sysfsRoot, 'class', 'nvme');
  const names = (await listDir(classDir)).filter((n) => controllerName.test(n));
  // Lowest controller number first, so that when two controllers report the same serial (the
  // two ports of a dual-port drive) the kept one is stable.
  names.sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)));
  const usedNames = await readUsedBlockDeviceNames(options);
  const bySerial = new Map<string, NvmeControllerFacts>();
  for (const name of names) {
    const facts = await readController(options.sysfsRoot, join(classDir, name), name, usedNames);
    if (facts && !bySerial.has(facts.serial)) bySerial.set(facts.serial, facts);
  }
  return [...bySerial.values()].sort((a, b) => (a.serial < b.serial ? -1 : a.serial > b.serial ? 1 : 0));
}

async function readController(
  sysfsRoot: string,
  dir: string,
  name: string,
  usedNames: ReadonlySet<string>,
): Promise<NvmeControllerFacts | undefined> {
  // Fabrics controllers (tcp, rdma, fc, loop) are remote or virtual: never local storage.
  const transport = await readAttr(join(dir, 'transport'));
  if (transport !== 'pcie') return undefined;
  const serial = await readAttr(join(dir, 'serial'));
  if (!serial) return undefined;

  const namespaces = new Map<string, bigint>();
  let holdsOS = false;
  for (const entry of await listDir(dir)) {
    if (!namespaceDir.test(entry)) continue;
    const blockName = entry.replace(/c\d+n/, 'n');
    if (namespaces.has(blockName)) continue; // both the head and a path device: count once
    const sectors = parseBigInt(await readAttr(join(dir, entry, 'size')));
    namespaces.set(blockName, sectors * SECTOR_BYTES);
    if (!holdsOS) holdsOS = await isInUse(sysfsRoot, join(dir, entry), blockName, usedNames);
  }
  let sizeBytes = 0n;
  for (const bytes of namespaces.values()) sizeBytes += bytes;

  return {
    serial,
    model: (await readAttr(join(dir, 'model'))) ?? '',
    firmware: (await readAttr(join(dir, 'firmware_rev'))) ?? '',
    pciAddress: (await readAttr(join(dir, 'address'))) ?? '',
    numaNode: parseNuma((await readAttr(join(dir, 'numa_node'))) ?? (await readAttr(join(dir, 'device', 'numa_node')))),
    controller: name,
    sizeBytes: sizeBytes.toString(),
    namespaces: [...namespaces.keys()].sort(),
    holdsOS,
  };
}

/**
 * A namespace holds the OS when it, one of its partitions, or anything stacked on them
 * (LVM/dm, md: found through the `holders` directories) is mounted or used as swap.
 */
async function isInUse(sysfsRoot: string, nsDir: string, blockName: string, used: ReadonlySet<string>): Promise<boolean> {
  if (used.has(blockName)) return true;
  const pending: string[] = [join(nsDir, 'holders')];
  for (const entry of await listDir(nsDir)) {
    if (/^nvme\d+(c\d+)?n\d+p\d+$/.test(entry)) {
      const partition = entry.replace(/c\d+n/, 'n');
      if (used.has(partition)) return true;
      pending.push(join(nsDir, entry, 'holders'));
    }
  }
  const seen = new Set<string>();
  while (pending.length > 0) {
    const holdersDir = pending.pop() as string;
    for (const holder of await listDir(holdersDir)) {
      if (seen.has(holder)) continue;
      seen.add(holder);
      if (used.has(holder)) return true;
      pending.push(join(sysfsRoot, 'class', 'block', holder, 'holders'));
    }
  }
  return false;
}

/** Kernel names (nvme0n1p2, dm-0, md127) of the block devices that are mounted or swapped on. */
async function readUsedBlockDeviceNames(options: SysfsNvmeOptions): Promise<Set<string>> {
  const sources: string[] = [];
  // The mount table is required: reading none would report the OS disk as free for data.
  for (const line of (await fs.readFile(options.mountsPath, 'utf8')).split('\n')) {
    const source = line.split(/\s+/)[0];
    if (source) sources.push(unescapeMountField(source));
  }
  if (options.swapsPath) {
    const lines = (await readOptional(options.swapsPath)).split('\n').slice(1);
    for (const line of lines) {
      const source = line.split(/\s+/)[0];
      if (source) sources.push(unescapeMountField(source));
    }
  }
  const dmNames = await readDeviceMapperNames(options.sysfsRoot);
  const used = new Set<string>();
  for (const source of sources) {
    if (!source.startsWith('/dev/')) continue;
    const mapper = /^\/dev\/mapper\/(.+)$/.exec(source);
    if (mapper?.[1]) {
      const kernelName = dmNames.get(mapper[1]);
      if (kernelName) used.add(kernelName);
      continue;
    }
    used.add(source.slice('/dev/'.length));
  }
  return used;
}

/** dm name (vg-root) → kernel name (dm-0), from <sysfs>/class/block/dm-N/dm/name. */
async function readDeviceMapperNames(sysfsRoot: string): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  const blockDir = join(sysfsRoot, 'class', 'block');
  for (const entry of await listDir(blockDir)) {
    if (!entry.startsWith('dm-')) continue;
    const name = await readAttr(join(blockDir, entry, 'dm', 'name'));
    if (name) names.set(name, entry);
  }
  return names;
}

/** The mount table escapes space, tab, newline and backslash as octal (\040). */
function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

function parseNuma(value: string | undefined): number {
  if (value === undefined || !/^-?\d+$/.test(value)) return -1;
  return Number(value);
}

function parseBigInt(value: string | undefined): bigint {
  return value !== undefined && /^\d+$/.test(value) ? BigInt(value) : 0n;
}

/** A sysfs attribute, whitespace-trimmed; undefined when absent or unreadable. */
export async function readAttr(path: string): Promise<string | undefined> {
  try {
    return (await fs.readFile(path, 'utf8')).trim();
  } catch {
    return undefined;
  }
}

async function readOptional(path: string): Promise<string> {
  try {
    return await fs.readFile(path, 'utf8');
  } catch {
    return '';
  }
}

/** Entry names of a directory (following symlinks, as sysfs class dirs are); [] when absent. */
export async function listDir(path: string): Promise<string[]> {
  try {
    return await fs.readdir(path);
  } catch {
    return [];
  }
}
