// QEMU guests booting Debian's kernel for the e2e suite. A guest runs the host's own root (9p,
// read-only, under a tmpfs overlay), so tests run the host's node/nvme-cli/mdadm inside it and
// see the checkout at the same path. Commands go through a job channel: a job directory dropped
// in a writable 9p share plus a wake-up line on a virtio-serial port; the guest answers on the
// same port when results are in the share. Every guest is stopped by its recorded PID, also
// when this process exits.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, renameSync, rmSync, statSync,
  truncateSync, writeFileSync,
} from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fetchKernel, type KernelInfo } from './kernel.js';
import { buildInitramfs, type InitramfsInfo } from './initramfs.js';
import { linkAddress, privateLinkArgs, type PrivateLinkSpec } from './link.js';
import { alive, haveCommand, labLog, since, tail, withTimeout } from './util.js';

export interface NvmeDriveSpec {
  /** NVMe serial (at most 20 characters; the guest's sysfs pads it with spaces to 20). */
  readonly serial: string;
  readonly sizeMiB: number;
  /**
   * A drive image that outlives the guest (created sparse when missing, never removed); default
   * a fresh image in the guest's run directory, removed by stop().
   */
  readonly image?: string;
  /**
   * Puts the drive behind its own PCIe root port whose hotplug slot has an attention indicator
   * (QEMU's pcie-root-port: the guest's pciehp shows /sys/bus/pci/slots/<slot>/{address,attention};
   * a read of `attention` comes back from the emulated slot control register). Default false: the
   * drive sits on the root bus, in no slot, as it always has.
   */
  readonly slot?: boolean;
}

export interface HostForwardSpec {
  /** Host port on 127.0.0.1; 0 picks a free one (see Guest.forwards / Guest.hostPort()). */
  readonly hostPort: number;
  readonly guestPort: number;
}

export interface Lab {
  readonly kernel: KernelInfo;
  readonly initramfs: InitramfsInfo;
}

export interface GuestOptions {
  /** Letters, digits and '-': the guest's hostname and the prefix of its log files. */
  readonly name: string;
  readonly nvmeDrives?: readonly NvmeDriveSpec[];
  readonly hostForwards?: readonly HostForwardSpec[];
  /** Default 1024. */
  readonly memoryMiB?: number;
  /** vCPUs, default 1 (TCG; two 1-vCPU guests fill this 2-core machine). */
  readonly cpus?: number;
  /** Run udevd in the guest (for /dev/disk/by-id links); about +2.5 s of boot. */
  readonly udev?: boolean;
  /** Boot until the first job round trip; default 90 s. */
  readonly bootTimeoutMs?: number;
  /** Kernel + initramfs; default prepareLab(). */
  readonly lab?: Lab;
  /** Where console and QEMU logs go; default $STRATA_E2E_LOG_DIR or <tmpdir>/strata-e2e-logs. */
  readonly logDir?: string;
  /** Writable host directories (9p, cache=none), mounted at guestPath once the guest is up. */
  readonly shares?: readonly ShareSpec[];
  /**
   * A second NIC on a private L2 segment between guests (test/e2e/lab/link.ts), with a static
   * address; default none (the user network only).
   */
  readonly privateLink?: PrivateLinkSpec;
}

export interface ShareSpec {
  readonly hostDir: string;
  /** Absolute path in the guest (created if missing). */
  readonly guestPath: string;
}

export interface RunOptions {
  /** Default 60 s. On expiry the job's process group is killed in the guest and run() rejects. */
  readonly timeoutMs?: number;
  /** Added to the guest's environment (PATH=/usr/local/sbin:...:/bin, HOME=/root, LANG=C.UTF-8). */
  readonly env?: Readonly<Record<string, string>>;
  /** Working directory in the guest, default '/'. */
  readonly cwd?: string;
  /** Bytes for the command's stdin (default: /dev/null). */
  readonly input?: Buffer | string;
}

export interface RunResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  /** stdout as bytes (binary output). */
  readonly stdoutBytes: Buffer;
  readonly durationMs: number;
}

export interface Guest {
  readonly name: string;
  /** QEMU's PID. */
  readonly pid: number;
  /** The guest's serial console (kernel log, init and loop messages). Kept after stop(). */
  readonly consoleLog: string;
  /** QEMU's own stdout/stderr. Kept after stop(). */
  readonly qemuLog: string;
  /** Host directory of this guest's drive images, share and socket (removed by stop()). */
  readonly runDir: string;
  /** The writable share: host path, and where the guest sees it. */
  readonly shareDir: string;
  readonly guestShareDir: string;
  /** `slot`: the physical slot number of the drive's hotplug slot (its name under /sys/bus/pci/slots), when it has one. */
  readonly drives: readonly { serial: string; sizeMiB: number; image: string; slot?: number }[];
  readonly forwards: readonly { hostPort: number; guestPort: number }[];
  /** The guest's address on its user network; the host's 127.0.0.1 is 10.0.2.2 from inside. */
  readonly address: string;
  readonly hostAddressFromGuest: string;
  /** The guest's address on its private segment (without prefix), when it has one. */
  readonly privateAddress?: string;
  /** Milliseconds from spawn to the first completed job round trip. */
  readonly bootMs: number;
  /** Modules the guest's init could not load (expected empty). */
  readonly moduleLoadFailures: readonly string[];
  /** The host port forwarded to guestPort. */
  hostPort(guestPort: number): number;
  /** Forwards 127.0.0.1:hostPort to the guest's guestPort from now on (QEMU monitor hostfwd_add). */
  addHostForward(hostPort: number, guestPort: number): Promise<void>;
  /** Stops forwarding 127.0.0.1:hostPort (QEMU monitor hostfwd_remove); a no-op when not forwarded. */
  removeHostForward(hostPort: number): Promise<void>;
  /** One QEMU human monitor (HMP) command; resolves with its output. */
  monitor(command: string, timeoutMs?: number): Promise<string>;
  /** Runs argv in the guest (exec of the argument array, no shell on either side). */
  run(argv: readonly string[], options?: RunOptions): Promise<RunResult>;
  /** run(), rejecting unless the exit code is 0. */
  runOk(argv: readonly string[], options?: RunOptions): Promise<RunResult>;
  /** Power off; SIGKILL by PID if the guest is not gone within timeoutMs (default 10 s). */
  stop(options?: { timeoutMs?: number }): Promise<void>;
  /** Last lines of the console log. */
  consoleTail(chars?: number): string;
  /**
   * The kernel's own word that the guest died (the first `Oops:` line and the panic line of its
   * console), or undefined: a wait that timed out says so instead of leaving it to the logs.
   */
  kernelCrash(): string | undefined;
  /** Resolves when QEMU has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export const QBOOT = '/usr/share/qemu/qboot.rom';
/**
 * The emulated NVMe drives' command timeout in the guest (init.sh; the kernel's is 30 s): a
 * command QEMU left outstanding is aborted after this, and the drive reset after twice this
 * (docs/e2e.md, "Stalls").
 */
export const DRIVE_TIMEOUT_MS = 3000;
export const QEMU = 'qemu-system-x86_64';
const GUEST_SHARE = '/run/strata/share';

// ---- lab preparation (memoized) --------------------------------------------------------------

let labPromise: Promise<Lab> | undefined;

/** Fetches the kernel and builds the initramfs once per process (both cached on disk). */
export function prepareLab(): Promise<Lab> {
  labPromise ??= (async () => {
    const missing = [QEMU, 'busybox', 'apt-get', 'dpkg'].filter((c) => !haveCommand(c));
    if (!existsSync(QBOOT)) missing.push(QBOOT);
    if (missing.length > 0)
      throw new Error(`e2e lab: missing ${missing.join(', ')}; run \`node dist/test/e2e/lab/setup.js\` (as root) first`);
    const kernel = await fetchKernel();
    const initramfs = await buildInitramfs(kernel);
    return { kernel, initramfs };
  })();
  labPromise.catch(() => {
    labPromise = undefined;
  });
  return labPromise;
}

// ---- process-wide bookkeeping: never leave a QEMU running ------------------------------------

interface LiveGuest {
  readonly pid: number;
  readonly child: ChildProcess;
  readonly runDir: string;
  readonly record: string;
}
const live = new Map<number, LiveGuest>();
const recordDir = join(tmpdir(), 'strata-e2e-guests');
let handlersInstalled = false;

function killAllNow(): void {
  for (const guest of live.values()) {
    try {
      process.kill(guest.pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
    rmSync(guest.record, { force: true });
    rmSync(guest.runDir, { recursive: true, force: true });
  }
  live.clear();
}

function installHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  process.on('exit', killAllNow);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const handler = (): void => {
      killAllNow();
      process.removeListener(signal, handler);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, handler);
  }
}

/** Kills guests left by processes that died without cleaning up (by PID, after checking it is ours). */
function sweepOrphans(): void {
  mkdirSync(recordDir, { recursive: true });
  for (const name of readdirSync(recordDir)) {
    const path = join(recordDir, name);
    let record: { pid: number; ownerPid: number; runDir: string };
    try {
      record = JSON.parse(readFileSync(path, 'utf8')) as typeof record;
    } catch {
      rmSync(path, { force: true });
      continue;
    }
    if (alive(record.ownerPid)) continue;
    try {
      const cmdline = readFileSync(`/proc/${record.pid}/cmdline`, 'utf8');
      if (cmdline.includes(record.runDir)) {
        process.kill(record.pid, 'SIGKILL');
        labLog(`killed orphaned guest QEMU ${record.pid} (owner ${record.ownerPid} is gone)`);
      }
    } catch {
      /* not running */
    }
    rmSync(record.runDir, { recursive: true, force: true });
    rmSync(path, { force: true });
  }
}

function pruneLogs(dir: string): void {
  const dayAgo = Date.now() - 24 * 3600_000;
  for (const name of readdirSync(dir)) {
    try {
      if (statSync(join(dir, name)).mtimeMs < dayAgo) rmSync(join(dir, name), { force: true });
    } catch {
      /* raced with another run */
    }
  }
}

/** A free TCP port on 127.0.0.1 (bound and released). */
export function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** A run of `count` free ports on 127.0.0.1 below Linux's ephemeral range (volume port ranges must be). */
export async function freeLoopbackPortRange(count: number): Promise<number> {
  const canBind = (port: number) =>
    new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20000 + count * Math.floor(Math.random() * ((32000 - 20000) / count - 1));
    let ok = true;
    for (let port = base; port < base + count && ok; port++) ok = await canBind(port);
    if (ok) return base;
  }
  throw new Error(`no ${count} consecutive free ports on 127.0.0.1`);
}

// ---- validation ------------------------------------------------------------------------------

function assertNoComma(value: string, what: string): void {
  // QEMU option values are comma-separated: refuse what would need escaping.
  if (/[,\s]/.test(value)) throw new Error(`${what} must not contain commas or spaces: ${JSON.stringify(value)}`);
}

function validate(options: GuestOptions): void {
  if (!/^[A-Za-z0-9][A-Za-z0-9-]{0,31}$/.test(options.name)) throw new Error(`guest name: letters, digits and '-', up to 32: ${options.name}`);
  const serials = new Set<string>();
  for (const drive of options.nvmeDrives ?? []) {
    if (!/^[A-Za-z0-9._-]{1,20}$/.test(drive.serial)) throw new Error(`NVMe serial: up to 20 of [A-Za-z0-9._-]: ${drive.serial}`);
    if (serials.has(drive.serial)) throw new Error(`duplicate NVMe serial ${drive.serial}`);
    serials.add(drive.serial);
    if (!Number.isInteger(drive.sizeMiB) || drive.sizeMiB < 1) throw new Error(`drive ${drive.serial}: sizeMiB must be a positive integer`);
    if (drive.image !== undefined) assertNoComma(drive.image, `drive ${drive.serial} image`);
  }
  for (const share of options.shares ?? []) {
    assertNoComma(share.hostDir, 'share directory');
    if (!share.guestPath.startsWith('/')) throw new Error(`share guestPath must be absolute: ${share.guestPath}`);
  }
  if (options.privateLink) linkAddress(options.privateLink.address);
  for (const f of options.hostForwards ?? []) {
    for (const port of [f.hostPort, f.guestPort])
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`forward port out of range: ${port}`);
    if (f.guestPort === 0) throw new Error('guestPort 0');
  }
}

// ---- the guest -------------------------------------------------------------------------------

/** Boots a guest and resolves once a job has made a round trip through it. */
export async function startGuest(options: GuestOptions): Promise<Guest> {
  validate(options);
  installHandlers();
  sweepOrphans();
  const lab = options.lab ?? (await prepareLab());
  const logDir = options.logDir ?? process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
  mkdirSync(logDir, { recursive: true });
  pruneLogs(logDir);
  const consoleLog = join(logDir, `${options.name}.${process.pid}.console.log`);
  const qemuLog = join(logDir, `${options.name}.${process.pid}.qemu.log`);
  for (const path of [consoleLog, qemuLog, lab.kernel.vmlinux, lab.initramfs.path]) assertNoComma(path, 'path');

  const runDir = mkdtempSync(join(tmpdir(), `strata-e2e-${options.name}-`));
  assertNoComma(runDir, 'run directory');
  const shareDir = join(runDir, 'share');
  const jobsDir = join(shareDir, 'jobs');
  mkdirSync(jobsDir, { recursive: true });
  const socketPath = join(runDir, 'lab.sock');

  let slots = 0;
  const drives = (options.nvmeDrives ?? []).map((d, i) => {
    const image = d.image ?? join(runDir, `nvme${i}-${d.serial}.img`);
    if (d.image === undefined || !existsSync(image)) {
      writeFileSync(image, '');
      truncateSync(image, d.sizeMiB * 1024 * 1024); // sparse
    }
    return { serial: d.serial, sizeMiB: d.sizeMiB, image, ...(d.slot ? { slot: ++slots } : {}) };
  });
  const shares = (options.shares ?? []).map((share, i) => {
    mkdirSync(share.hostDir, { recursive: true });
    return { ...share, tag: `share${i}` };
  });
  const monitorPath = join(runDir, 'monitor.sock');
  const forwards: { hostPort: number; guestPort: number }[] = [];
  for (const f of options.hostForwards ?? []) forwards.push({ hostPort: f.hostPort || (await freeLoopbackPort()), guestPort: f.guestPort });

  // Jobs waiting for their results, by id.
  const pending = new Map<string, { check(): void }>();
  let sequence = 0;

  // The job channel's host end: QEMU connects to it as a client at startup.
  let connection: Socket | undefined;
  let pendingWake = false;
  const server: Server = createServer((socket) => {
    connection?.destroy();
    connection = socket;
    socket.setEncoding('utf8');
    let buffer = '';
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      const lines = buffer.split('\n');
      buffer = lines.pop() ?? '';
      for (const line of lines) onGuestLine(line.trim());
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      if (connection === socket) connection = undefined;
    });
    if (pendingWake) wake();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve());
  });
  const wake = (line = 'scan'): void => {
    if (connection && !connection.destroyed) connection.write(`${line}\n`);
    else pendingWake = true;
  };

  const link = options.privateLink
    ? privateLinkArgs(
        { kind: options.privateLink.segment.kind, name: options.privateLink.segment.name, address: options.privateLink.address, ...(options.privateLink.mtu ? { mtu: options.privateLink.mtu } : {}) },
        options.privateLink.segment.kind === 'tap' ? options.privateLink.segment.tapFor(options.name) : undefined,
      )
    : { qemu: [], append: [] };
  const netdev = ['user', 'id=n0', 'ipv6=off', ...forwards.map((f) => `hostfwd=tcp:127.0.0.1:${f.hostPort}-:${f.guestPort}`)].join(',');
  // panic=-1 with -no-reboot: a panicking guest ends QEMU at once. cryptomgr.notests skips the
  // crypto self-tests (about 0.5 s of TCG boot). no_timer_check: on a loaded host the emulated
  // CPU can be too slow for the IO-APIC timer check, which then panics ("IO-APIC + timer doesn't
  // work"); seen under TCG with several guests on 2 cores. $STRATA_E2E_LOGLEVEL=7 gives a full
  // kernel log.
  const append = [
    'console=ttyS0', 'panic=-1', 'oops=panic', 'cryptomgr.notests', 'no_timer_check',
    `loglevel=${process.env['STRATA_E2E_LOGLEVEL'] ?? '4'}`,
    `strata.name=${options.name}`, `strata.udev=${options.udev ? 1 : 0}`, `strata.drive_timeout_ms=${DRIVE_TIMEOUT_MS}`,
    ...link.append,
    ...(process.env['STRATA_E2E_APPEND'] ?? '').split(/\s+/).filter(Boolean),
  ];
  const args = [
    '-name', `strata-e2e-${options.name}`,
    '-M', 'q35', '-nodefaults', '-no-user-config', '-display', 'none',
    '-bios', QBOOT,
    '-accel', `tcg,thread=${tcgThreads(lab.kernel.release, options.cpus ?? 1)}`,
    '-smp', smp(options.cpus ?? 1),
    '-m', String(options.memoryMiB ?? 1024),
    '-kernel', lab.kernel.vmlinux,
    '-initrd', lab.initramfs.path,
    '-append', append.join(' '),
    '-no-reboot',
    '-chardev', `file,id=con0,path=${consoleLog}`, '-serial', 'chardev:con0',
    '-device', 'virtio-rng-pci',
    '-fsdev', 'local,id=fsroot,path=/,security_model=passthrough,readonly=on,multidevs=remap',
    '-device', 'virtio-9p-pci,fsdev=fsroot,mount_tag=hostroot',
    '-fsdev', `local,id=fsshare,path=${shareDir},security_model=passthrough`,
    '-device', 'virtio-9p-pci,fsdev=fsshare,mount_tag=strata',
    '-netdev', netdev, '-device', 'virtio-net-pci,netdev=n0',
    // After n0: the user network's NIC stays eth0 (init.sh finds the private one by its MAC).
    ...link.qemu,
    '-chardev', `socket,id=lab0,path=${socketPath}`,
    '-device', 'virtio-serial-pci,id=vser0', '-device', 'virtserialport,bus=vser0.0,chardev=lab0,name=strata.lab',
    // The human monitor: host forwards added and removed while the guest runs.
    '-monitor', `unix:${monitorPath},server=on,wait=off`,
  ];
  for (const share of shares) {
    args.push('-fsdev', `local,id=fs${share.tag},path=${share.hostDir},security_model=passthrough`, '-device', `virtio-9p-pci,fsdev=fs${share.tag},mount_tag=${share.tag}`);
  }
  // ioeventfd: without it QEMU 7.2's emulated NVMe left guest reads outstanding for 30 s at
  // times under TCG (the guest timed them out and reset the drive; the QoS suite's ~60 s stalls,
  // docs/e2e.md "Stalls"); with it, a doorbell write is handled by its own event.
  // A drive with a slot gets its own root port (chassis 1, physical slot number = its slot), added
  // right before it: drives without one keep the root-bus layout they always had. q35's firmware
  // keeps PCIe hotplug for ACPI by default (the guest's _OSC is refused PCIeHotplug and acpiphp
  // registers the slot, whose `attention` answers EINVAL / EIO); native hotplug makes it pciehp's.
  if (drives.some((d) => d.slot !== undefined)) args.push('-global', 'ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off');
  drives.forEach((d, i) => {
    if (d.slot !== undefined) args.push('-device', `pcie-root-port,id=rp${i},chassis=1,slot=${d.slot}`);
    const bus = d.slot !== undefined ? `,bus=rp${i}` : '';
    args.push('-drive', `file=${d.image},if=none,id=d${i},format=raw,cache=unsafe`, '-device', `nvme,serial=${d.serial},drive=d${i},ioeventfd=on${bus}`);
  });

  const spawnedAt = performance.now();
  const logFd = openSync(qemuLog, 'w');
  let child: ChildProcess;
  try {
    child = spawn(QEMU, args, { stdio: ['ignore', logFd, logFd] });
  } finally {
    closeSync(logFd);
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', () => resolve({ code: null, signal: null }));
  });
  const pid = await new Promise<number>((resolve, reject) => {
    child.once('spawn', () => resolve(child.pid!));
    child.once('error', (error) => reject(new Error(`${QEMU}: ${error.message}`)));
  }).catch((error: unknown) => {
    server.close();
    rmSync(runDir, { recursive: true, force: true });
    throw error;
  });
  const record = join(recordDir, `${pid}.json`);
  writeFileSync(record, JSON.stringify({ pid, ownerPid: process.pid, runDir, name: options.name }));
  live.set(pid, { pid, child, runDir, record });
  let hasExited = false;
  void exited.then(() => {
    hasExited = true;
    for (const job of pending.values()) job.check();
    // Said in the test's own output whatever the suite asserts next: test/run.mjs runs a suite
    // again when a guest died of an emulation fault (docs/e2e.md, "Stalls").
    const crash = kernelCrash();
    if (crash) console.log(`# lab: ${crash}`);
  });

  function onGuestLine(line: string): void {
    if (line.startsWith('done ')) pending.get(line.slice(5))?.check();
    for (const job of pending.values()) job.check();
    sweepAbandoned();
  }

  const consoleTail = (chars = 3000): string => {
    try {
      return tail(readFileSync(consoleLog, 'utf8'), chars);
    } catch {
      return '(no console log)';
    }
  };

  const kernelCrash = (): string | undefined => {
    let text: string;
    try {
      text = readFileSync(consoleLog, 'utf8');
    } catch {
      return undefined;
    }
    const lines = text.split('\n').filter((l) => /\] (Oops: |Kernel panic - )/.test(l));
    return lines.length > 0 ? `guest ${options.name}: ${lines.slice(0, 2).map((l) => l.trim()).join(' / ')} (console ${consoleLog})` : undefined;
  };

  async function run(argv: readonly string[], runOptions: RunOptions = {}): Promise<RunResult> {
    if (argv.length === 0) throw new Error('run: empty argv');
    if (argv[0]!.includes('=')) throw new Error(`run: the command must not contain '=': ${argv[0]}`);
    if (argv.some((a) => a.includes('\0'))) throw new Error('run: arguments must not contain NUL');
    for (const [key, value] of Object.entries(runOptions.env ?? {})) {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new Error(`run: bad environment name ${key}`);
      if (value.includes('\0')) throw new Error(`run: environment value of ${key} contains NUL`);
    }
    if (hasExited) throw new Error(`guest ${options.name} is not running; console: ${consoleLog}`);
    const timeoutMs = runOptions.timeoutMs ?? 60_000;
    const id = `j${++sequence}-${randomBytes(4).toString('hex')}`;
    const staging = join(jobsDir, `.${id}`);
    const dir = join(jobsDir, id);
    mkdirSync(join(staging, 'argv'), { recursive: true });
    argv.forEach((arg, i) => writeFileSync(join(staging, 'argv', String(i)), arg));
    const env = Object.entries(runOptions.env ?? {});
    if (env.length > 0) {
      mkdirSync(join(staging, 'env'));
      for (const [key, value] of env) writeFileSync(join(staging, 'env', key), value);
    }
    if (runOptions.cwd) writeFileSync(join(staging, 'cwd'), runOptions.cwd);
    if (runOptions.input !== undefined) writeFileSync(join(staging, 'stdin'), runOptions.input);
    const started = performance.now();
    renameSync(staging, dir);

    const result = await new Promise<RunResult>((resolve, reject) => {
      let settled = false;
      const finish = (error: Error | undefined, value?: RunResult): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        clearInterval(poll);
        pending.delete(id);
        if (error) reject(error);
        else resolve(value!);
      };
      const check = (): void => {
        if (settled) return;
        const codeFile = join(dir, 'code');
        if (existsSync(codeFile)) {
          const code = Number.parseInt(readFileSync(codeFile, 'utf8').trim(), 10);
          const stdoutBytes = readFileSync(join(dir, 'stdout'));
          const stderr = readFileSync(join(dir, 'stderr'), 'utf8');
          removeJob(dir);
          finish(undefined, { code, stdout: stdoutBytes.toString('utf8'), stderr, stdoutBytes, durationMs: since(started) });
        } else if (hasExited) {
          removeJob(dir);
          finish(new Error(`guest ${options.name} exited while running ${JSON.stringify(argv)}; console ${consoleLog}:\n${consoleTail()}`));
        }
      };
      // The guest announces completion on the serial port; the poll only covers a lost line.
      const poll = setInterval(check, 1000);
      const timer = setTimeout(() => {
        if (settled) return;
        const read = (file: string): string => {
          try {
            return tail(readFileSync(join(dir, file), 'utf8'));
          } catch {
            return '';
          }
        };
        const error = new Error(
          `guest ${options.name}: ${JSON.stringify(argv)} timed out after ${timeoutMs} ms\nstdout: ${read('stdout')}\nstderr: ${read('stderr')}`,
        );
        finish(error);
        cancel(dir);
      }, timeoutMs);
      pending.set(id, { check });
      wake();
      check();
    });
    return result;
  }

  /**
   * Removes a finished job. The directory is first renamed to a dot-name, which the guest's
   * `jobs/*` never matches, so the guest cannot see it half-removed.
   */
  function removeJob(dir: string): void {
    const gone = join(jobsDir, `.gone-${dir.slice(dir.lastIndexOf('/') + 1)}`);
    try {
      renameSync(dir, gone);
    } catch {
      return; // already removed
    }
    rmSync(gone, { recursive: true, force: true });
  }

  /** Timed-out jobs: the guest kills their process group; removed once it confirms. */
  const abandoned = new Set<string>();
  function sweepAbandoned(): void {
    for (const dir of abandoned) {
      if (existsSync(join(dir, 'cancelled')) || existsSync(join(dir, 'code')) || !existsSync(dir)) {
        abandoned.delete(dir);
        removeJob(dir);
      }
    }
  }
  function cancel(dir: string): void {
    try {
      writeFileSync(join(dir, 'cancel'), '');
    } catch {
      return; // finished and removed meanwhile
    }
    abandoned.add(dir);
    wake();
  }

  let stopping: Promise<void> | undefined;
  const cleanup = (): void => {
    server.close();
    connection?.destroy();
    live.delete(pid);
    rmSync(record, { force: true });
    rmSync(runDir, { recursive: true, force: true });
  };
  const stop = (stopOptions: { timeoutMs?: number } = {}): Promise<void> => {
    stopping ??= (async () => {
      if (!hasExited) {
        wake('poweroff');
        const timeoutMs = stopOptions.timeoutMs ?? 10_000;
        const abort = new AbortController();
        const gone = await Promise.race([
          exited.then(() => true),
          sleep(timeoutMs, false, { signal: abort.signal }).catch(() => false),
        ]);
        abort.abort();
        if (!gone) {
          labLog(`guest ${options.name}: no poweroff within ${timeoutMs} ms, SIGKILL ${pid}`);
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            /* gone meanwhile */
          }
          await withTimeout(exited, 10_000, `guest ${options.name}: waiting for QEMU ${pid} after SIGKILL`);
        }
      }
      cleanup();
    })();
    return stopping;
  };

  // ---- readiness: a real round trip through the job channel ----
  const bootTimeoutMs = options.bootTimeoutMs ?? 90_000;
  let moduleLoadFailures: string[] = [];
  try {
    const ready = run(['cat', '/proc/sys/kernel/osrelease', '/run/strata/modules.failed'], { timeoutMs: bootTimeoutMs });
    const early = exited.then(({ code, signal }) => {
      throw new Error(`QEMU exited during boot (code ${code}, signal ${signal}); ${tail(readFileSync(qemuLog, 'utf8'), 1000)}`);
    });
    const result = await Promise.race([ready, early]);
    const [release, failed] = result.stdout.split('\n');
    if (result.code !== 0 || release?.trim() !== lab.kernel.release)
      throw new Error(`readiness job: exit ${result.code}, kernel ${release}, stderr ${result.stderr}`);
    moduleLoadFailures = (failed ?? '').split(/\s+/).filter(Boolean);
    for (const share of shares) {
      const mounted = await run(['sh', '-c', 'mkdir -p "$1" && mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=524288 "$2" "$1"', 'mount-share', share.guestPath, share.tag], { timeoutMs: 30_000 });
      if (mounted.code !== 0) throw new Error(`mounting ${share.hostDir} at ${share.guestPath}: ${mounted.stderr}`);
    }
  } catch (error) {
    await stop({ timeoutMs: 0 }).catch(() => undefined);
    throw new Error(`guest ${options.name} did not come up: ${(error as Error).message}\nconsole ${consoleLog}:\n${consoleTail()}`);
  }
  const bootMs = since(spawnedAt);
  labLog(`guest ${options.name} (pid ${pid}) ready in ${bootMs} ms`);

  // One monitor command at a time (QEMU serves one monitor client at a time).
  let monitorQueue: Promise<unknown> = Promise.resolve();
  const monitor = (command: string, timeoutMs = 10_000): Promise<string> => {
    if (/[\r\n]/.test(command)) return Promise.reject(new Error('monitor: one line only'));
    const result = monitorQueue.then(() => {
      if (hasExited) throw new Error(`guest ${options.name} is not running`);
      return hmpCommand(monitorPath, command, timeoutMs);
    });
    monitorQueue = result.catch(() => undefined);
    return result;
  };
  const forwardRule = (hostPort: number) => `tcp:127.0.0.1:${hostPort}`;

  return {
    name: options.name,
    pid,
    consoleLog,
    qemuLog,
    runDir,
    shareDir,
    guestShareDir: GUEST_SHARE,
    drives,
    forwards,
    address: '10.0.2.15',
    hostAddressFromGuest: '10.0.2.2',
    ...(options.privateLink ? { privateAddress: linkAddress(options.privateLink.address) } : {}),
    bootMs,
    moduleLoadFailures,
    hostPort(guestPort: number): number {
      const forward = forwards.find((f) => f.guestPort === guestPort);
      if (!forward) throw new Error(`guest ${options.name}: no host forward to guest port ${guestPort}`);
      return forward.hostPort;
    },
    async addHostForward(hostPort, guestPort) {
      for (const port of [hostPort, guestPort])
        if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`forward port out of range: ${port}`);
      if (forwards.some((f) => f.hostPort === hostPort && f.guestPort === guestPort)) return;
      if (forwards.some((f) => f.hostPort === hostPort)) throw new Error(`guest ${options.name}: host port ${hostPort} already forwarded`);
      const out = await monitor(`hostfwd_add n0 ${forwardRule(hostPort)}-:${guestPort}`);
      if (out !== '') throw new Error(`guest ${options.name}: forwarding 127.0.0.1:${hostPort} to :${guestPort}: ${out}`);
      forwards.push({ hostPort, guestPort });
    },
    async removeHostForward(hostPort) {
      const index = forwards.findIndex((f) => f.hostPort === hostPort);
      if (index < 0) return;
      const out = await monitor(`hostfwd_remove n0 ${forwardRule(hostPort)}`);
      if (!/removed/.test(out)) throw new Error(`guest ${options.name}: removing the forward of 127.0.0.1:${hostPort}: ${out}`);
      forwards.splice(index, 1);
    },
    monitor,
    run,
    async runOk(argv, runOptions) {
      const result = await run(argv, runOptions);
      if (result.code !== 0)
        throw new Error(`guest ${options.name}: ${JSON.stringify(argv)} exited ${result.code}\nstdout: ${tail(result.stdout)}\nstderr: ${tail(result.stderr)}`);
      return result;
    },
    stop,
    consoleTail,
    kernelCrash,
    exited,
  };
}

/**
 * Runs one HMP command on a monitor socket: waits for the prompt, sends the line, and returns
 * what QEMU printed between its echo of the line and the next prompt (trimmed, escapes removed).
 */
function hmpCommand(socketPath: string, command: string, timeoutMs: number): Promise<string> {
  const PROMPT = '(qemu) ';
  return new Promise((resolve, reject) => {
    const socket = createConnection(socketPath);
    // QEMU serves one monitor client at a time: never leave a connection behind.
    socket.setTimeout(timeoutMs, () => {
      socket.destroy();
      reject(new Error(`QEMU monitor ${socketPath}: no answer to ${command} within ${timeoutMs} ms`));
    });
    let buffer = '';
    let sent = false;
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      if (!buffer.endsWith(PROMPT)) return;
      if (!sent) {
        sent = true;
        buffer = '';
        socket.write(`${command}\n`);
        return;
      }
      socket.end();
      // The first line is readline's echo of the command; the last the prompt.
      const text = buffer.slice(0, -PROMPT.length).replace(/\x1b\[[0-9;]*[A-Za-z]/g, '');
      const newline = text.indexOf('\n');
      resolve((newline < 0 ? '' : text.slice(newline + 1)).replace(/\r/g, '').trim());
    });
    socket.on('error', (error) => reject(new Error(`QEMU monitor ${socketPath}: ${error.message}`)));
    socket.on('close', () => reject(new Error(`QEMU monitor ${socketPath} closed before answering ${command}`)));
  });
}

/** Stops every guest this process started (for after() hooks that lost their handles). */
export async function stopAllGuests(): Promise<void> {
  killAllNow();
}

/**
 * One vCPU is declared with room for a second that is never plugged (`1,maxcpus=2`): QEMU's TCG
 * then translates the guest's memory barriers and locked instructions into real host ones (it
 * does for a machine of more than one possible vCPU, and elides them for one). Elided, the
 * emulated NVMe drive lost submissions: its device model runs in another host thread, and Linux's
 * shadow doorbell (write the new tail, `mb()`, read the device's event index, ring the register
 * only if the device asked) is a store-then-load handshake that needs the barrier; without it the
 * guest skipped a doorbell the device was not going to look for, and the batch timed out. A probe
 * of 2026-11-29 (two 6.12 guests, fio 4 KiB random reads at QD16 straight on the drive, 5 rounds
 * of 30 s each): 4 of 5 rounds stalled as `-smp 1`, 0 of 5 as `-smp 1,maxcpus=2`
 * (docs/e2e.md, "Stalls"). An SMP guest of 6.12 runs single-threaded TCG (below), which elides
 * them too: give such a guest one vCPU where its drive's timing matters.
 */
function smp(cpus: number): string {
  return cpus === 1 ? '1,maxcpus=2' : String(cpus);
}

/**
 * Multi-threaded TCG (one host thread per vCPU) for Debian 12's 6.1; single-threaded for an SMP
 * guest of a newer kernel. Debian 13's 6.12 flips static keys at boot by live-patching its text
 * (int3, then the new bytes): under multi-threaded TCG another vCPU can still run the translated
 * int3 after the patch is done, and the kernel panics in the int3 handler (seen in CI:
 * "Oops: int3" in sched_clock_cpu, then "Kernel panic - not syncing"). One TCG thread keeps the
 * vCPUs' view of the patched code in step.
 */
function tcgThreads(release: string, cpus: number): 'multi' | 'single' {
  return cpus > 1 && !release.startsWith('6.1.') ? 'single' : 'multi';
}
