// The block devices a replicated volume is served through on one node (driver: losetup, nvme-cli,
// mdadm, dmsetup and sysfs; docs/replication.md):
//
//   host path (nvmet namespace) → /dev/mapper/strata-<volume>  (device-mapper)
//     on the primary: linear onto the md raid1 below;  elsewhere: the fence (below)
//   md raid1 (internal write-intent bitmap) on the primary, whose legs are
//     a loop device over the local backing file, and
//     each replica's backing, reached over NVMe/TCP (write-mostly: reads stay local)
//
// The namespace's device never changes while it is enabled (the kernel refuses), so promotion and
// demotion only reload the device-mapper table.
//
// Every table of a volume's device has 4 KiB logical blocks, on every node and in every state, and
// so has every leg under the mirror: the host sees one block size on all paths of the namespace,
// for its whole life. A host kernel keeps one LBA size per namespace across its paths (6.12 keeps
// it in the shared namespace head): a path that said 512 while another said 4096 made the host
// address the primary in 512-byte blocks, and nvmet refused every write (status 0xf, data SGL
// length invalid). That is why "serves nothing" is not the `error` target (a device-mapper device
// over no device has 512-byte blocks) but the fence: `flakey` with no up interval, which fails
// every read and write, over one read-only, sparse loop device of 4 KiB sectors per node that
// nothing ever writes (dm devices share their hold on it). Everything is found again from the kernel (sysfs)
// on every call: an agent restart or a kill -9 anywhere leaves nothing that only memory knew.
import { promises as fs } from 'node:fs';
import { uuidFromName } from '../../../lib/contract/uuid.js';
import { dirname, join } from 'node:path';
import { REPLICA_DATA_OFFSET_BYTES } from '../../../lib/replication.js';
import { withDeadline } from '../../../lib/retry.js';
import type { CommandRunner } from '../pool/storage-pool.js';
import type { NativeAddon } from '../../../lib/native-addon.js';

const LEG_SCAN_POLL_MS = 25;
const LEG_SCAN_POLLS = 200;
const SECTOR = 512n;

export interface LegTarget {
  readonly nodeUUID: string;
  /** host:port of the replica's replication listener. */
  readonly endpoint: string;
  /** NQN of the replica's replication subsystem for this volume. */
  readonly nqn: string;
}

/** A remote leg as the kernel shows it on the primary. */
/** A copy with no controller connected to it. */
export function notConnected(nodeUUID: string): LegDevice {
  return { nodeUUID, controller: undefined, controllerState: '', block: undefined };
}

export interface LegDevice {
  readonly nodeUUID: string;
  /** NVMe controller (nvme3) connected to the replica, undefined when not connected. */
  readonly controller: string | undefined;
  /** live, connecting, resetting, deleting, ... ('' when not connected). */
  readonly controllerState: string;
  /** Block device of the namespace (nvme3n1), undefined until it appears. */
  readonly block: string | undefined;
}

/** A member of the volume's md array. */
export interface MdLeg {
  readonly block: string;
  /** md's flags: in_sync, faulty, write_mostly, ... */
  readonly flags: readonly string[];
  /** Slot in the array, undefined for a spare that is being recovered onto. */
  readonly slot: number | undefined;
}

export interface ArrayState {
  /** md127 */
  readonly block: string;
  readonly members: readonly MdLeg[];
  /** idle, recover, resync, ... */
  readonly syncAction: string;
  /** 0..1 of the running resync or recovery, undefined when none runs. */
  readonly syncProgress: number | undefined;
  readonly degraded: number;
}

/** One read of the kernel's loop devices and replica connections (BlockStack.snapshot). */
export interface StackSnapshot {
  loopOf(file: string): string | undefined;
  leg(target: LegTarget): LegDevice;
  /** The subsystem NQNs this node's initiator holds a controller to. */
  connectedNQNs(): string[];
}

export interface BlockStackOptions {
  readonly run: CommandRunner;
  /** /sys */
  readonly sysfsRoot: string;
  /** /dev */
  readonly devRoot: string;
  /** nvme connect: seconds between reconnect attempts of a lost leg. */
  readonly reconnectDelaySeconds: number;
  /** nvme connect: keep-alive timeout, how long a silent replica takes to notice. */
  readonly keepAliveSeconds: number;
  /** md write-intent bitmap chunk of new arrays (mdadm's default otherwise: 64 MiB for these). */
  readonly bitmapChunkKiB?: number;
  /** The sparse file under the fence's loop device (on tmpfs: it must not outlive the loop devices). */
  readonly fenceFile: string;
  /**
   * Device-mapper and loop devices through their ioctls (the native addon), null for dmsetup and
   * losetup: a table read and a reload are on both primaries' part of a failover, the new
   * primary's loop device on its part, and each such process cost 0.1-1 s in the emulated lab
   * (an ioctl: 20-40 ms there).
   */
  readonly ioctls?: BlockIoctls | null;
  /** /proc/sys/kernel/random/boot_id: names the boot a device's counters belong to. */
  readonly bootIdFile?: string;
}

/**
 * What hosts wrote through a volume's device-mapper device on this node, as the block layer
 * counts it (VolumeStatus.userWrittenBytes).
 */
export interface WrittenCount {
  /** Sectors written (field 7 of /sys/block/dm-N/stat) × 512: every write and Write Zeroes the device took, failed ones included. */
  readonly bytes: bigint;
  /**
   * The device instance the count belongs to: the boot (boot_id), the device number and its disk
   * sequence number (diskseq: given to each disk the kernel makes, never twice in one boot). A
   * count starts again at 0 only on a new instance (the device made again, the node rebooted), so
   * a change of this string is what tells the control plane to keep what the old one counted.
   */
  readonly device: string;
}

/** The native addon's calls the block stack makes instead of starting dmsetup and losetup. */
export type BlockIoctls = Pick<NativeAddon, 'dmTable' | 'dmReload' | 'loopAttach'>;

/** The logical block size of every device a replicated volume is served through. */
export const REPLICATED_BLOCK_BYTES = 4096;
const REPLICATED_BLOCK_BIGINT = BigInt(REPLICATED_BLOCK_BYTES);
/** The fence's least size (sparse): grown, by powers of two, when a larger volume needs it. */
const FENCE_MIN_BYTES = 1n << 40n;

/** Device-mapper name of a volume's host-path device. */
export const dmNameOf = (volumeUUID: string) => `strata-${volumeUUID}`;
/** The hex digits of the volume UUID an md array name keeps (at most 32 characters in the superblock). */
export const MD_NAME_HEX_DIGITS = 24;
/** md array name of a replicated volume: `strata-` and the first 24 hex digits of its UUID. */
export const mdNameOf = (volumeUUID: string) => `strata-${volumeUUID.replace(/-/g, '').slice(0, MD_NAME_HEX_DIGITS)}`;
/** Kernel name of an array assembled through sysfs (`md_` names; a disk name has at most 31 characters). */
const mdDiskNameOf = (volumeUUID: string) => `md_${volumeUUID.replace(/-/g, '').slice(0, MD_NAME_HEX_DIGITS)}`;

export class BlockStack {
  /** One fence is made at a time (two passes must not attach two loop devices to it). */
  private fencing: Promise<string> | undefined;
  /** The fence's loop device as last made or found. */
  private fence: { readonly loop: string; readonly dev: string; readonly bytes: bigint } | undefined;
  /** Device-mapper name → its block device (dm-3) as last found, checked at every use. */
  private dmBlocks = new Map<string, string>();
  /** Backing file → its loop device, as last found (loopOf). */
  private loops = new Map<string, string>();
  private bootId: string | undefined;

  constructor(private readonly options: BlockStackOptions) {}

  /**
   * A command with a deadline: killed after COMMAND_TIMEOUT_MS, and given up on even if it cannot
   * die (a process in an uninterruptible kernel wait).
   */
  private run(command: string, args: readonly string[]): Promise<{ stdout: string; stderr: string }> {
    return withDeadline(this.options.run(command, args, { timeoutMs: COMMAND_TIMEOUT_MS }), COMMAND_TIMEOUT_MS + 5000, `${command} ${args[0] ?? ''} did not finish within ${COMMAND_TIMEOUT_MS / 1000} s`);
  }

  /** /dev/<block>: what a process opens to reach the block device (the QoS server, over the array). */
  blockPath(block: string): string {
    return join(this.options.devRoot, block);
  }

  hostDevicePath(volumeUUID: string): string {
    return join(this.options.devRoot, 'mapper', dmNameOf(volumeUUID));
  }

  // --- device-mapper ----------------------------------------------------------------------------

  /** The volume's dm table ('' when the device does not exist). */
  async dmTable(volumeUUID: string): Promise<string> {
    const dm = this.options.ioctls;
    try {
      return (dm ? await dm.dmTable(dmNameOf(volumeUUID)) : (await this.run('dmsetup', ['table', dmNameOf(volumeUUID)])).stdout).trim();
    } catch {
      return '';
    }
  }

  /**
   * Makes the host-path device exist with this table (loaded in place when it differs).
   * `beforeGrowing` runs before a table longer than the current one is loaded: what must follow a
   * growth (the namespace re-reading its size) is written ahead there, so a crash right after the
   * reload still leads to it.
   */
  async ensureDm(volumeUUID: string, table: string, beforeGrowing?: () => void): Promise<void> {
    const name = dmNameOf(volumeUUID);
    const current = await this.dmTable(volumeUUID);
    if (current === '') {
      await this.run('dmsetup', ['create', name, '--noudevsync', '--table', table]);
    } else if (!sameTable(current, table)) {
      if (tableSectors(table) > tableSectors(current)) beforeGrowing?.();
      // The new table is loaded inactive while the old one serves; resume swaps it in, and
      // suspends the device first, which waits for the I/O in flight to the old table.
      if (this.options.ioctls) await this.options.ioctls.dmReload(name, table);
      else {
        await this.run('dmsetup', ['load', name, '--table', table]);
        await this.run('dmsetup', ['resume', '--noudevsync', name]);
      }
    }
    // Without udev nothing makes the node under /dev/mapper; with udev it is there already.
    if (!(await exists(this.hostDevicePath(volumeUUID)))) await this.run('dmsetup', ['mknodes', name]);
  }

  /**
   * The table of a device that serves nothing: `flakey` always down (no up interval, no feature:
   * every write is failed before it goes anywhere, every read fails when it completes) over the
   * fence, so the device keeps 4 KiB blocks.
   */
  async fenceTable(sizeBytes: bigint): Promise<string> {
    const fence = await this.ensureFence(sizeBytes);
    return `0 ${sizeBytes / SECTOR} flakey ${fence} 0 0 1`;
  }

  /**
   * Stops an existing device serving anything, now: the fence, or, should the fence not be had
   * (its loop device cannot be made), the `error` target. The namespace over an enabled device
   * keeps the block size it was enabled with, and every I/O fails either way. Returns why the
   * fence could not be had when the `error` target was loaded instead.
   */
  async stopServing(volumeUUID: string, sizeBytes: bigint): Promise<Error | undefined> {
    let fallback: Error | undefined;
    const table = await this.fenceTable(sizeBytes).catch((err: unknown) => {
      fallback = err instanceof Error ? err : new Error(String(err));
      return `0 ${sizeBytes / SECTOR} error`;
    });
    await this.ensureDm(volumeUUID, table);
    return fallback;
  }

  /** Written with the array's major:minor, as dmsetup prints it back (so tables compare equal). */
  async linearTable(sizeBytes: bigint, mdBlock: string): Promise<string> {
    const dev = await this.deviceNumber(mdBlock);
    return `0 ${sizeBytes / SECTOR} linear ${dev} 0`;
  }

  /** major:minor of the fence's loop device, made (or grown) to hold `minBytes`. */
  private ensureFence(minBytes: bigint): Promise<string> {
    const attempt = (this.fencing ?? Promise.resolve('')).catch(() => '').then(() => this.makeFence(minBytes));
    this.fencing = attempt;
    return attempt;
  }

  private async makeFence(minBytes: bigint): Promise<string> {
    const file = this.options.fenceFile;
    // Known from an earlier call: one read says it is still the fence's loop device.
    const known = this.fence;
    if (known && known.bytes >= minBytes && (await readText(join(this.options.sysfsRoot, 'block', known.loop, 'loop', 'backing_file'))).trim() === file) return known.dev;
    let size = FENCE_MIN_BYTES;
    while (size < minBytes) size *= 2n;
    let loop = await this.loopOf(file);
    let bytes = loop ? BigInt((await readText(join(this.options.sysfsRoot, 'block', loop, 'size'))).trim() || '0') * SECTOR : 0n;
    if (!loop) {
      await fs.mkdir(dirname(file), { recursive: true, mode: 0o700 });
      await (await fs.open(file, 'a', 0o600)).close();
      await fs.truncate(file, Number(size));
      loop = await this.attachLoop(file, { readOnly: true, directIo: false });
      bytes = size;
    } else if (bytes < minBytes) {
      await fs.truncate(file, Number(size));
      await this.run('losetup', ['--set-capacity', join(this.options.devRoot, loop)]);
      bytes = size;
    }
    const dev = await this.deviceNumber(loop);
    this.fence = { loop, dev, bytes };
    return dev;
  }

  private async deviceNumber(block: string): Promise<string> {
    const dev = (await readText(join(this.options.sysfsRoot, 'block', block, 'dev'))).trim();
    if (!/^\d+:\d+$/.test(dev)) throw new Error(`no device number for ${block}`);
    return dev;
  }

  /**
   * The block layer's count of what was written through the volume's host-path device here,
   * undefined when the device does not exist. Only a primary's device serves writes (the fence
   * fails them, and hosts send none to an inaccessible path); md's resync and the mirror's
   * writes to its legs go below it and are not counted.
   */
  async writtenBytes(volumeUUID: string): Promise<WrittenCount | undefined> {
    const name = dmNameOf(volumeUUID);
    const block = await this.dmBlockOf(name);
    if (!block) return undefined;
    const dir = join(this.options.sysfsRoot, 'block', block);
    // The name and disk sequence read again after the counters: the same device all along, not
    // one removed and another made under the same dm-N meanwhile.
    const instance = async () => `${(await readText(join(dir, 'dm', 'name'))).trim()} ${(await readText(join(dir, 'diskseq'))).trim()}`;
    const before = await instance();
    const [stat, dev, diskseq] = await Promise.all([readText(join(dir, 'stat')), readText(join(dir, 'dev')), readText(join(dir, 'diskseq'))]);
    if ((await instance()) !== before || !before.startsWith(`${name} `)) return undefined;
    const sectors = stat.trim().split(/\s+/)[6];
    if (sectors === undefined || !/^\d+$/.test(sectors) || !/^\d+:\d+$/.test(dev.trim())) return undefined;
    this.bootId ??= (await readText(this.options.bootIdFile ?? '/proc/sys/kernel/random/boot_id')).trim() || undefined;
    if (!this.bootId) return undefined;
    // diskseq exists from Linux 5.15; before it, the device number alone (reused by a device made
    // again in the same boot: its count then looks like the old one's until it passes it).
    const seq = diskseq.trim();
    return { bytes: BigInt(sectors) * SECTOR, device: `${this.bootId}/${dev.trim()}${/^\d+$/.test(seq) ? `/${seq}` : ''}` };
  }

  /** The block device of a device-mapper name: the one last found if it still has that name, else a scan of /sys/block. */
  private async dmBlockOf(name: string): Promise<string | undefined> {
    const sys = join(this.options.sysfsRoot, 'block');
    const known = this.dmBlocks.get(name);
    if (known && (await readText(join(sys, known, 'dm', 'name'))).trim() === name) return known;
    const found = new Map<string, string>();
    for (const entry of await readDir(sys)) {
      if (!entry.startsWith('dm-')) continue;
      const dmName = (await readText(join(sys, entry, 'dm', 'name'))).trim();
      if (dmName) found.set(dmName, entry);
    }
    this.dmBlocks = found;
    return found.get(name);
  }

  async removeDm(volumeUUID: string): Promise<void> {
    if ((await this.dmTable(volumeUUID)) === '') return;
    await this.run('dmsetup', ['remove', '--noudevsync', dmNameOf(volumeUUID)]);
  }

  /** The size of a block device (loop3, nvme2n1, md127, ublkb0) as the kernel has it now; 0 when it is not there. */
  async blockBytes(block: string): Promise<bigint> {
    const sectors = (await readText(join(this.options.sysfsRoot, 'block', block, 'size'))).trim();
    return /^\d+$/.test(sectors) ? BigInt(sectors) * SECTOR : 0n;
  }

  // --- loop device over the local backing ---------------------------------------------------------

  /**
   * The loop device takes the size its file has now (LOOP_SET_CAPACITY): a loop device keeps the
   * size it was attached with, and the volume's growth grew the file under it.
   */
  async growLoop(loop: string): Promise<void> {
    await this.run('losetup', ['--set-capacity', join(this.options.devRoot, loop)]);
  }

  /**
   * The loop device (loop3) attached to this file, undefined when none. The one last found for
   * the file is checked with one read; otherwise every loop device is read once and remembered:
   * every volume has a loop device, and a full pass asks for each of them (a scan per volume
   * would be a read per loop device per volume).
   */
  async loopOf(file: string): Promise<string | undefined> {
    const sys = join(this.options.sysfsRoot, 'block');
    const known = this.loops.get(file);
    if (known && (await readText(join(sys, known, 'loop', 'backing_file'))).trim() === file) return known;
    return (await this.scanLoops()).get(file);
  }

  /** Every loop device by its backing file (the first one listed where two share a file), remembered for loopOf. */
  private async scanLoops(): Promise<Map<string, string>> {
    const sys = join(this.options.sysfsRoot, 'block');
    const found = new Map<string, string>();
    for (const entry of await readDir(sys)) {
      if (!entry.startsWith('loop')) continue;
      const backing = (await readText(join(sys, entry, 'loop', 'backing_file'))).trim();
      if (backing && !found.has(backing)) found.set(backing, entry);
    }
    this.loops = found;
    return found;
  }

  /** Loop devices over any backing file of this volume (also one deleted under it). */
  async loopsOfVolume(volumeUUID: string): Promise<string[]> {
    const found: string[] = [];
    for (const entry of await readDir(join(this.options.sysfsRoot, 'block'))) {
      if (!entry.startsWith('loop')) continue;
      const backing = (await readText(join(this.options.sysfsRoot, 'block', entry, 'loop', 'backing_file'))).trim();
      if (backing.includes(`/${volumeUUID}.`)) found.push(entry);
    }
    return found;
  }

  /**
   * The loop device over the file, made when there is none. One found takes the file's size if
   * the file grew since (a replica's loop is made ahead of a promotion and kept through a resize:
   * md would not take a leg smaller than the mirror). `lap` times its steps (a promotion logs them).
   */
  async ensureLoop(file: string, bufferedIo: boolean, lap?: (step: string) => void): Promise<string> {
    const existing = await this.loopOf(file);
    lap?.('loopFind');
    if (existing) {
      const fileBytes = await fs.stat(file).then((st) => (BigInt(st.size) / REPLICATED_BLOCK_BIGINT) * REPLICATED_BLOCK_BIGINT, () => undefined);
      const grow = fileBytes !== undefined && (await this.blockBytes(existing)) < fileBytes;
      lap?.('loopSize');
      if (grow) {
        await this.growLoop(existing);
        lap?.('loopGrow');
      }
      return existing;
    }
    // Direct I/O for NOCOW backings (as nvmet's own file path); compressed ones need the page cache.
    const attached = await this.attachLoop(file, { readOnly: false, directIo: !bufferedIo });
    lap?.('loopAttach');
    return attached;
  }

  /** A new loop device of 4 KiB sectors over the file ("loop3"). */
  private async attachLoop(file: string, mode: { readOnly: boolean; directIo: boolean }): Promise<string> {
    let loop: string;
    if (this.options.ioctls) loop = await this.options.ioctls.loopAttach(file, mode.readOnly, REPLICATED_BLOCK_BYTES, mode.directIo);
    else {
      const args = ['--find', '--show', ...(mode.readOnly ? ['--read-only'] : []), `--sector-size=${REPLICATED_BLOCK_BYTES}`, ...(mode.readOnly ? [] : [`--direct-io=${mode.directIo ? 'on' : 'off'}`]), file];
      loop = (await this.run('losetup', args)).stdout.trim().replace(/^\/dev\//, '');
    }
    this.loops.set(file, loop);
    return loop;
  }

  async detachLoop(loop: string): Promise<void> {
    await this.run('losetup', ['--detach', join(this.options.devRoot, loop)]);
  }

  // --- remote legs (NVMe/TCP initiator) -----------------------------------------------------------

  /**
   * Loop devices and replica connections as the kernel shows them now, read once: the replica
   * monitor looks at every primary volume's legs from one read per interval (a few files per
   * device) instead of scanning every controller for every leg.
   */
  async snapshot(): Promise<StackSnapshot> {
    const sys = this.options.sysfsRoot;
    const loops = await this.scanLoops();
    const heads = new Map<string, string>();
    const subsystems = join(sys, 'class', 'nvme-subsystem');
    for (const subsystem of await readDir(subsystems)) {
      const head = (await readDir(join(subsystems, subsystem))).find((e) => /^nvme\d+n1$/.test(e));
      if (head) heads.set((await readText(join(subsystems, subsystem, 'subsysnqn'))).trim(), head);
    }
    const controllers = new Map<string, { controller: string; state: string; block: string | undefined }>();
    const classDir = join(sys, 'class', 'nvme');
    for (const controller of await readDir(classDir)) {
      const nqn = (await readText(join(classDir, controller, 'subsysnqn'))).trim();
      if (controllers.has(nqn)) continue;
      const state = (await readText(join(classDir, controller, 'state'))).trim();
      const block = heads.get(nqn) ?? (await readDir(join(classDir, controller))).find((e) => e === `${controller}n1`);
      controllers.set(nqn, { controller, state, block });
    }
    return {
      loopOf: (file) => loops.get(file),
      leg: (target) => {
        const c = controllers.get(target.nqn);
        return c ? { nodeUUID: target.nodeUUID, controller: c.controller, controllerState: c.state, block: c.block } : notConnected(target.nodeUUID);
      },
      connectedNQNs: () => [...controllers.keys()],
    };
  }

  /** Every controller this node's initiator holds to the subsystem `nqn`. */
  async leg(target: LegTarget): Promise<LegDevice> {
    const classDir = join(this.options.sysfsRoot, 'class', 'nvme');
    for (const controller of await readDir(classDir)) {
      if ((await readText(join(classDir, controller, 'subsysnqn'))).trim() !== target.nqn) continue;
      const state = (await readText(join(classDir, controller, 'state'))).trim();
      return { nodeUUID: target.nodeUUID, controller, controllerState: state, block: await this.namespaceBlockOf(target.nqn) };
    }
    return notConnected(target.nodeUUID);
  }

  /** The multipath head (nvme3n1) of the subsystem's namespace 1. */
  private async namespaceBlockOf(nqn: string): Promise<string | undefined> {
    const dir = join(this.options.sysfsRoot, 'class', 'nvme-subsystem');
    for (const subsystem of await readDir(dir)) {
      if ((await readText(join(dir, subsystem, 'subsysnqn'))).trim() !== nqn) continue;
      const heads = (await readDir(join(dir, subsystem))).filter((e) => /^nvme\d+n1$/.test(e));
      if (heads[0]) return heads[0];
    }
    // Without native multipath the namespace hangs off the controller itself.
    const classDir = join(this.options.sysfsRoot, 'class', 'nvme');
    for (const controller of await readDir(classDir)) {
      if ((await readText(join(classDir, controller, 'subsysnqn'))).trim() !== nqn) continue;
      const ns = (await readDir(join(classDir, controller))).find((e) => new RegExp(`^${controller}n1$`).test(e));
      if (ns) return ns;
    }
    return undefined;
  }

  /**
   * Connects to a replica. A lost connection is retried for ever (ctrl_loss_tmo -1) and I/O waits
   * meanwhile instead of failing into md: only the agent fails a leg out, after etcd has recorded
   * it out of sync (docs/replication.md, "The invariant").
   */
  async connectLeg(target: LegTarget, hostNQN: string): Promise<LegDevice> {
    const existing = await this.leg(target);
    if (existing.controller && existing.block) return existing;
    if (!existing.controller) {
      const at = target.endpoint.lastIndexOf(':');
      const address = target.endpoint.slice(0, at).replace(/^\[(.*)\]$/, '$1');
      const port = target.endpoint.slice(at + 1);
      await this.addController([
        // One host ID per host NQN: the kernel refuses a second controller of a host NQN it knows
        // under another host ID (and makes up a random one when none is given).
        'transport=tcp', `traddr=${address}`, `trsvcid=${port}`, `nqn=${target.nqn}`, `hostnqn=${hostNQN}`, `hostid=${uuidFromName(hostNQN)}`,
        'ctrl_loss_tmo=-1', `reconnect_delay=${this.options.reconnectDelaySeconds}`, `keep_alive_tmo=${this.options.keepAliveSeconds}`,
      ]);
    }
    // The namespace is scanned asynchronously after the controller goes live: looked for every
    // 25 ms (a promotion waits on it), for 5 s at most.
    for (let i = 0; i < LEG_SCAN_POLLS; i++) {
      const leg = await this.leg(target);
      if (leg.block) return leg;
      await new Promise((r) => setTimeout(r, LEG_SCAN_POLL_MS));
    }
    return this.leg(target);
  }

  /**
   * Asks a replica's controller to scan its namespaces again and waits (at most `waitMs`) until
   * the leg's block device is at least `minBytes`: the replica's target announces a grown
   * namespace by itself (a namespace-attribute-changed event), this does not depend on it
   * arriving. True once the leg is that large.
   */
  async rescanLeg(controller: string, block: string, minBytes: bigint, waitMs = RESCAN_WAIT_MS): Promise<boolean> {
    if ((await this.blockBytes(block)) >= minBytes) return true;
    await fs.writeFile(join(this.options.sysfsRoot, 'class', 'nvme', controller, 'rescan_controller'), '1').catch(() => undefined);
    const until = Date.now() + waitMs;
    for (;;) {
      if ((await this.blockBytes(block)) >= minBytes) return true;
      if (Date.now() >= until) return false;
      await new Promise((r) => setTimeout(r, RESCAN_POLL_MS));
    }
  }

  /** Disconnects every controller to a subsystem whose NQN starts with the prefix. */
  /** Every controller at once: a hand-over waits for the slowest, not for their sum. */
  async disconnectAll(nqnPrefix: string): Promise<void> {
    const classDir = join(this.options.sysfsRoot, 'class', 'nvme');
    const controllers: string[] = [];
    for (const controller of await readDir(classDir)) {
      if ((await readText(join(classDir, controller, 'subsysnqn'))).trim().startsWith(nqnPrefix)) controllers.push(controller);
    }
    await Promise.all(controllers.map((controller) => this.deleteController(controller)));
  }

  async disconnectLeg(target: LegTarget): Promise<void> {
    const leg = await this.leg(target);
    if (leg.controller) await this.deleteController(leg.controller);
  }

  /**
   * Creates an NVMe/TCP controller through the kernel's fabrics device (what `nvme connect` ends
   * with), for the same reason deleteController does not use nvme-cli: its scan of the existing
   * controllers can wait for ever on one that reconnects to a dead replica.
   */
  private async addController(options: readonly string[]): Promise<string> {
    const handle = await fs.open(join(this.options.devRoot, 'nvme-fabrics'), 'r+');
    try {
      const work = (async () => {
        await handle.write(options.join(','));
        const { bytesRead, buffer } = await handle.read(Buffer.alloc(256), 0, 256, null);
        return buffer.subarray(0, bytesRead).toString('utf8').trim();
      })();
      return await withDeadline(work, COMMAND_TIMEOUT_MS, `connecting ${options.find((o) => o.startsWith('traddr='))} did not finish within ${COMMAND_TIMEOUT_MS / 1000} s`);
    } finally {
      await handle.close().catch(() => undefined);
    }
  }

  /**
   * Deletes an NVMe controller through sysfs (what `nvme disconnect` ends with): the I/O waiting on
   * it fails. Not through nvme-cli: its topology scan sends admin commands to every controller,
   * and one that is reconnecting to a dead replica holds them (found in the lab: the disconnect
   * of a lost leg never happened and writes stayed stalled). A deletion the kernel takes long to
   * finish is left running after DELETE_WAIT_MS: it goes on by itself.
   */
  private async deleteController(controller: string): Promise<void> {
    const done = fs.writeFile(join(this.options.sysfsRoot, 'class', 'nvme', controller, 'delete_controller'), '1').catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err; // already gone
    });
    await Promise.race([done, new Promise((resolve) => setTimeout(resolve, DELETE_WAIT_MS).unref())]);
  }

  // --- md raid1 -----------------------------------------------------------------------------------

  /** The md array the loop device is a member of. */
  async arrayOf(loop: string): Promise<string | undefined> {
    const holders = await readDir(join(this.options.sysfsRoot, 'block', loop, 'holders'));
    return holders.find((h) => h.startsWith('md'));
  }

  async readArray(block: string): Promise<ArrayState> {
    const md = join(this.options.sysfsRoot, 'block', block, 'md');
    const members: MdLeg[] = [];
    for (const entry of await readDir(md)) {
      if (!entry.startsWith('dev-')) continue;
      const flags = (await readText(join(md, entry, 'state'))).trim().split(',').filter(Boolean);
      const slot = (await readText(join(md, entry, 'slot'))).trim();
      members.push({ block: entry.slice('dev-'.length), flags, slot: /^\d+$/.test(slot) ? Number(slot) : undefined });
    }
    const syncAction = (await readText(join(md, 'sync_action'))).trim() || 'idle';
    const completed = (await readText(join(md, 'sync_completed'))).trim();
    const match = /^(\d+)\s*\/\s*(\d+)$/.exec(completed);
    const syncProgress = match && Number(match[2]) > 0 ? Number(match[1]) / Number(match[2]) : undefined;
    const degraded = Number((await readText(join(md, 'degraded'))).trim() || '0');
    return { block, members, syncAction, syncProgress, degraded };
  }

  /** Whether the device carries an md superblock (it was part of the volume's array before). */
  async hasSuperblock(block: string): Promise<boolean> {
    try {
      await this.run('mdadm', ['--examine', join(this.options.devRoot, block)]);
      return true;
    } catch {
      return false;
    }
  }

  /** A new array over fresh (all-zero) backings: nothing to synchronize. */
  async createArray(volumeUUID: string, local: string, remotes: readonly string[]): Promise<string> {
    const device = join(this.options.devRoot, 'md', mdNameOf(volumeUUID));
    await this.run('mdadm', [
      '--create', device, '--run', '--level=1', `--raid-devices=${1 + remotes.length}`, '--metadata=1.2', '--bitmap=internal',
      ...(this.options.bitmapChunkKiB ? [`--bitmap-chunk=${this.options.bitmapChunkKiB}K`] : []),
      `--data-offset=${REPLICA_DATA_OFFSET_KIB}K`, '--assume-clean', '--homehost=<none>', `--name=${mdNameOf(volumeUUID)}`,
      join(this.options.devRoot, local), ...(remotes.length > 0 ? ['--write-mostly', ...remotes.map((r) => join(this.options.devRoot, r))] : []),
    ]);
    return this.requireArray(local);
  }

  /**
   * Starts the existing array from the legs known to hold every acknowledged write: through md's
   * sysfs (the promotion's critical path), or mdadm when that cannot be done. Either way the
   * kernel reads every leg's superblock, keeps the freshest and leaves out a stale one (md's own
   * analysis), loads the bitmap and starts the mirror, degraded when legs are missing. Returns the
   * array and, when mdadm had to do it, why sysfs could not.
   */
  async assembleArray(volumeUUID: string, local: string, remotes: readonly string[]): Promise<{ block: string; fallback?: Error }> {
    const fallback = await this.assembleBySysfs(volumeUUID, [local, ...remotes]);
    if (fallback) {
      const device = join(this.options.devRoot, 'md', mdNameOf(volumeUUID));
      await this.run('mdadm', ['--assemble', device, '--run', join(this.options.devRoot, local), ...remotes.map((r) => join(this.options.devRoot, r))]);
    }
    const block = await this.arrayOf(local);
    if (!block) {
      // md left the local leg out (its superblock older than a remote leg's) and may run the
      // mirror from the remote legs alone: nothing may serve from that here (the caller refuses
      // to be the primary), so it stops.
      for (const r of remotes) {
        const stray = await this.arrayOf(r);
        if (stray) await this.stopArray(stray).catch(() => undefined);
      }
      throw new Error(`md did not start the mirror over the local leg ${local}${fallback ? ` (mdadm, after: ${fallback.message})` : ''}`);
    }
    for (const r of remotes) await this.setWriteMostly(block, r);
    return fallback ? { block, fallback } : { block };
  }

  /**
   * md's own assembly, as mdadm does it for 1.x metadata but without its process (0.3-1 s in the
   * emulated lab, against 0.1 s for these writes): a named array (md_<volume>), its metadata
   * version, each leg by device number, then `active`, which makes the kernel analyse the
   * superblocks and run the mirror. An array of that name left inactive by an earlier attempt is
   * cleared first; one that runs is never touched. Returns why it could not be done (the array
   * cleared again), undefined once it runs.
   */
  private async assembleBySysfs(volumeUUID: string, legs: readonly string[]): Promise<Error | undefined> {
    const name = mdDiskNameOf(volumeUUID);
    const md = join(this.options.sysfsRoot, 'block', name, 'md');
    // A new array is `clear`; clearing one frees it (its sysfs directory goes), so a leftover
    // holding legs (`inactive`) is cleared and the array made again.
    const made = async () => {
      await fs.writeFile(join(this.options.sysfsRoot, 'module', 'md_mod', 'parameters', 'new_array'), name).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
      });
      return (await readText(join(md, 'array_state'))).trim();
    };
    try {
      let state = await made();
      if (state === 'inactive') {
        await fs.writeFile(join(md, 'array_state'), 'clear');
        state = await made();
      }
      if (state !== 'clear') return new Error(`md array ${name} is ${state || 'not there'}`);
    } catch (err) {
      return err instanceof Error ? err : new Error(String(err));
    }
    try {
      await fs.writeFile(join(md, 'metadata_version'), '1.2');
      for (const leg of legs) await fs.writeFile(join(md, 'new_dev'), await this.deviceNumber(leg));
      await fs.writeFile(join(md, 'array_state'), 'active');
      return undefined;
    } catch (err) {
      await fs.writeFile(join(md, 'array_state'), 'clear').catch(() => undefined);
      return err instanceof Error ? err : new Error(String(err));
    }
  }

  /** Adds a leg back: only the regions the bitmap marks dirty are copied (a full copy for a new one). */
  async addLeg(block: string, leg: string): Promise<void> {
    const dev = join(this.options.devRoot, leg);
    try {
      await this.run('mdadm', [join(this.options.devRoot, block), '--re-add', dev]);
    } catch {
      await this.run('mdadm', [join(this.options.devRoot, block), '--add', dev]);
    }
    await this.setWriteMostly(block, leg);
  }

  /** Takes legs md marked faulty, or whose device is gone, out of the array (their slots stay for re-adds). */
  async removeGoneLegs(block: string): Promise<void> {
    const md = join(this.options.devRoot, block);
    await this.run('mdadm', [md, '--fail', 'detached', '--remove', 'detached']).catch(() => undefined);
    await this.run('mdadm', [md, '--remove', 'failed']).catch(() => undefined);
  }

  /**
   * Grows the mirror to `bytes` once every leg's device is large enough: each active member first
   * takes all its device now has (its `dev-<member>/size` set to 0: md rewrites the member's superblock with the
   * new data size), then the array's component size is set to exactly `bytes` (raid1 resizes its
   * write-intent bitmap and resyncs the new tail itself). The kernel refuses while a resync runs
   * (EBUSY) or a member is too small (ENOSPC). Each step is idempotent: after a crash, the next
   * call does what is left.
   */
  async growArray(block: string, bytes: bigint): Promise<void> {
    const md = join(this.options.sysfsRoot, 'block', block, 'md');
    for (const member of (await this.readArray(block)).members) {
      // A spare or faulty member has no slot, and md refuses a size for it (EINVAL).
      if (member.slot === undefined || member.flags.includes('faulty')) continue;
      await fs.writeFile(join(md, `dev-${member.block}`, 'size'), '0');
    }
    await fs.writeFile(join(md, 'component_size'), String(bytes / 1024n));
  }

  /**
   * Makes a running mirror read-only: md ends its writes, writes its superblock (clean) to every
   * leg, and writes nothing after, not even when a leg goes away. The kernel refuses (EBUSY) while
   * anything holds the array open.
   */
  async freezeArray(block: string): Promise<void> {
    const state = join(this.options.sysfsRoot, 'block', block, 'md', 'array_state');
    if ((await readText(state)).trim() === 'readonly') return;
    await withDeadline(fs.writeFile(state, 'readonly'), FREEZE_TIMEOUT_MS, `md did not make ${block} read-only within ${FREEZE_TIMEOUT_MS} ms`);
  }

  /**
   * Marks every member of the running mirror but `keep` faulty (`dev-<member>/state`), one sysfs
   * write each: md writes nothing more to a faulty member (no superblock, no bitmap page, not
   * those of its stop), so those copies are cut off from this mirror without waiting for their
   * connections to go. True when md shows every other member faulty (or no longer a member)
   * afterwards; md refuses to fail its last in-sync member, which `keep` must then be.
   */
  async failLegsBut(block: string, keep: string): Promise<boolean> {
    const md = join(this.options.sysfsRoot, 'block', block, 'md');
    const flagsOf = async (member: string) => (await readText(join(md, `dev-${member}`, 'state'))).trim().split(',');
    const members = (await readDir(md)).filter((e) => e.startsWith('dev-')).map((e) => e.slice('dev-'.length));
    if (!members.includes(keep)) return false;
    for (const member of members) {
      if (member === keep || (await flagsOf(member)).includes('faulty')) continue;
      await fs.writeFile(join(md, `dev-${member}`, 'state'), 'faulty').catch(() => undefined);
    }
    // Read back. A member gone meanwhile is no member: md writes it nothing either.
    for (const member of members) {
      if (member === keep || (await flagsOf(member)).includes('faulty')) continue;
      if (await exists(join(md, `dev-${member}`))) return false;
    }
    return true;
  }

  async stopArray(block: string): Promise<void> {
    await this.run('mdadm', ['--stop', join(this.options.devRoot, block)]);
  }

  private async setWriteMostly(block: string, leg: string): Promise<void> {
    const state = join(this.options.sysfsRoot, 'block', block, 'md', `dev-${leg}`, 'state');
    if ((await readText(state)).includes('write_mostly')) return;
    await fs.writeFile(state, 'writemostly').catch(() => undefined);
  }

  private async requireArray(local: string): Promise<string> {
    const block = await this.arrayOf(local);
    if (!block) throw new Error(`md did not start an array over ${local}`);
    return block;
  }
}

const REPLICA_DATA_OFFSET_KIB = REPLICA_DATA_OFFSET_BYTES / 1024n;
const DELETE_WAIT_MS = 10_000;
/** How long a grown replica's namespace may take to show its new size on the primary, per attempt. */
const RESCAN_WAIT_MS = 2_000;
const RESCAN_POLL_MS = 100;
/** A hand-over waits this long for md to go read-only (a superblock write), then goes on without. */
const FREEZE_TIMEOUT_MS = 3_000;
/** mdadm, losetup, dmsetup, nvme connect: none may hold the replica monitor for ever. */
const COMMAND_TIMEOUT_MS = 60_000;

/**
 * Whether the kernel's table (as `dmsetup table` prints it) is the one wanted. flakey prints its
 * features back in the kernel's own words (6.12: `2 error_reads error_writes` for none given; 6.1:
 * `0`): its device, offset and intervals are what identify it.
 */
export function sameTable(current: string, wanted: string): boolean {
  const words = (table: string) => table.trim().split(/\s+/);
  const [a, b] = [words(current), words(wanted)];
  if (a[2] === 'flakey' && b[2] === 'flakey') return a.slice(0, 7).join(' ') === b.slice(0, 7).join(' ');
  return a.join(' ') === b.join(' ');
}

/** The length of a table, in sectors (its second word). */
function tableSectors(table: string): bigint {
  const length = table.trim().split(/\s+/)[1] ?? '';
  return /^\d+$/.test(length) ? BigInt(length) : 0n;
}

async function readDir(path: string): Promise<string[]> {
  return fs.readdir(path).catch(() => [] as string[]);
}

async function exists(path: string): Promise<boolean> {
  return fs.access(path).then(
    () => true,
    () => false,
  );
}

async function readText(path: string): Promise<string> {
  return fs.readFile(path, 'utf8').catch(() => '');
}
