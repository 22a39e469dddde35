// The QoS stage's supervisor: one strata-ublk server (native/ublk/, native/README.md) per volume
// with a policy, serving the volume's backing as /dev/ublkbN with the policy's limits. It starts
// a server and waits for its `ready` line, applies new limits live (the limits file, then
// SIGHUP), restarts a server that died with `recover` (the kernel held the device's I/O
// meanwhile, so the device and whatever points at it stay), and stops it. The replica manager
// (replication/replica-manager.ts) puts the device under a primary's device-mapper table
// (docs/decisions.md, "QoS is enforced by a ublk server of ours").
//
// A server outlives the agent: an agent restart (or crash) must not stop the I/O of volumes with
// a policy. Each server's device number and backing are written to `<stateDir>/<volume>.json`
// beside its limits file; a new agent's first start() of the volume adopts the server still
// running there (`strata-ublk info` names the device's server pid, checked against
// /proc/<pid>/cmdline), or recovers the device when its server is gone, and never serves a second
// device over the same backing.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { StrataError } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/logger.js';
import { packageRoot } from '../../../lib/paths.js';
import { Backoff, type BackoffOptions } from '../../../lib/retry.js';
import { sameLimits, type QosLimits } from '../../../lib/contract/qos.js';

/** Where `npm run build:native` puts the server. */
export const ublkServerPath = join(packageRoot, 'native', 'build', 'strata-ublk');

/** The server's exit status when the kernel has no ublk (Debian 12's 6.1). */
export const EXIT_NO_UBLK = 69;

/** The limits file the server reads at start and on SIGHUP (native/README.md, "Limits"). */
export function limitsFileText(limits: QosLimits): string {
  const lines: [string, number][] = [
    ['read-iops', limits.readIops],
    ['write-iops', limits.writeIops],
    ['read-bps', limits.readBytesPerSecond],
    ['write-bps', limits.writeBytesPerSecond],
  ];
  for (const [name, value] of lines) {
    if (!Number.isSafeInteger(value) || value < 0) throw new StrataError('INVALID_ARGUMENT', `QoS limit ${name}: ${value} is not a non-negative integer`);
  }
  return lines.map(([name, value]) => `${name} ${value}\n`).join('');
}

/** The part of a child process the stage uses (node's ChildProcess in production, a fake in tests). */
export interface ServerProcess {
  readonly pid?: number | undefined;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  kill(signal: NodeJS.Signals): boolean;
  once(event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): unknown;
}

/** Starts the server binary with an argument array. */
export type LaunchServer = (file: string, args: readonly string[]) => ServerProcess;

/** Whether systemd runs this machine (sd_booted(3): /run/systemd/system exists). */
export function systemdBooted(root = '/run/systemd/system'): boolean {
  return existsSync(root);
}

/**
 * node's spawn with an argument array, never a shell, detached into a process group (a session)
 * of its own so that a signal to the agent's group does not reach it. Not execFile: execFile
 * buffers a process's output for its whole life and kills it past maxBuffer, and a server lives
 * for weeks. Where systemd runs the machine, the server must also leave the agent's unit, whose
 * stop (KillMode=mixed) SIGKILLs what is left in its cgroup: `systemd-run --scope` moves itself
 * into a transient scope of its own and then execs the server (same pid, same pipes), and
 * `--collect` lets systemd forget the scope once the server exits. Without systemd (the lab's
 * guests) the session is enough: nothing kills a cgroup there. The server ignores SIGPIPE, so the
 * pipes closing with the agent's death cost it its log lines, not its life.
 */
export function serverLauncher(useSystemd = systemdBooted()): LaunchServer {
  return (file, args) => {
    const [command, argv] = useSystemd ? ['systemd-run', ['--scope', '--quiet', '--collect', `--description=strata-ublk ${args[0] ?? ''}`, '--', file, ...args]] : [file, [...args]];
    return spawn(command, argv, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  };
}

export interface QosStageOptions {
  /** Where the limits files live: /run/strata/qos (they describe kernel objects: gone at reboot like them). */
  readonly stateDir: string;
  readonly logger: Logger;
  readonly binary?: string;
  readonly launch?: LaunchServer;
  /** How long a server may take to print `ready` (default 30 s: the emulated lab is slow). */
  readonly readyTimeoutMs?: number;
  /** How long SIGTERM may take before SIGKILL and `delete` (default 30 s). */
  readonly stopTimeoutMs?: number;
  /** The wait before restarting a server that died (default 0.5 s doubling to 30 s). */
  readonly restartBackoff?: BackoffOptions;
  /** A run this long resets the restart backoff (default 60 s): a server that dies at once is not restarted in a tight loop. */
  readonly stableAfterMs?: number;
  /** Called when a volume's device changes number (a server restarted on a device the kernel had lost): the caller reloads what points at it. */
  readonly onDeviceReplaced?: (volume: string, device: StageDevice) => void;
  /** How often an adopted server (started by an earlier agent: not this process's child) is checked for life (default 1 s). */
  readonly adoptedPollMs?: number;
  /** Whether a process runs (default: signal 0). */
  readonly isAlive?: (pid: number) => boolean;
  /** A process's command line, NUL-separated (default: /proc/<pid>/cmdline). */
  readonly commandLine?: (pid: number) => Promise<string>;
}

/** What the stage knows of a volume's server, for the report. */
export interface StageState {
  readonly device: StageDevice;
  /** The limits the server was last given (its limits file). */
  readonly limits: QosLimits;
  /** False while a server that died is being recovered (the device holds its I/O). */
  readonly running: boolean;
}

/** `<stateDir>/<volume>.json`: how a later agent finds the volume's server again. */
interface ServerRecord {
  readonly id: number;
  readonly backing: string;
  readonly buffered: boolean;
}

/** A served volume's ublk device. */
export interface StageDevice {
  readonly id: number;
  /** /dev/ublkbN */
  readonly device: string;
}

export interface StageSpec {
  /** The file or block device the server serves. */
  readonly backing: string;
  readonly limits: QosLimits;
  /** Buffered I/O on the backing (compressed volumes, as nvmet's buffered_io=1). */
  readonly buffered?: boolean;
}

interface Served {
  readonly volume: string;
  spec: StageSpec;
  readonly limitsPath: string;
  device: StageDevice;
  process: ServerProcess | undefined;
  readyAt: number;
  stopping: boolean;
  restartTimer: NodeJS.Timeout | undefined;
  readonly backoff: Backoff;
  /** Resolves when the current process has exited (immediately when there is none). */
  exited: Promise<void>;
}

/** Why a server did not come up: its last stderr line, or the kernel's missing ublk. */
function startFailure(code: number | null, signal: NodeJS.Signals | null, lastError: string): Error {
  if (code === EXIT_NO_UBLK) return new StrataError('KERNEL_CAPABILITY_MISSING', `QoS cannot be enforced on this node: ${lastError || 'the kernel has no ublk'}`);
  return new Error(`strata-ublk exited (${signal ?? `status ${code}`}) before it was ready${lastError ? `: ${lastError}` : ''}`);
}

export class QosStage {
  private readonly served = new Map<string, Served>();
  /** Starts under way: a second start of the volume waits for the first instead of launching again. */
  private readonly starting = new Map<string, Promise<StageDevice>>();
  private readonly binary: string;
  private readonly launch: LaunchServer;

  constructor(private readonly options: QosStageOptions) {
    this.binary = options.binary ?? ublkServerPath;
    this.launch = options.launch ?? serverLauncher();
  }

  /** The device serving `volume`, if the stage serves it. */
  device(volume: string): StageDevice | undefined {
    return this.served.get(volume)?.device;
  }

  /** The volume's server as the stage knows it, undefined when it serves none. */
  state(volume: string): StageState | undefined {
    const served = this.served.get(volume);
    return served && { device: served.device, limits: served.spec.limits, running: served.process !== undefined };
  }

  /** Serves `volume` (idempotent: a volume already served only takes the new limits). */
  async start(volume: string, spec: StageSpec): Promise<StageDevice> {
    const pending = this.starting.get(volume);
    if (pending) await pending.catch(() => undefined);
    const current = this.served.get(volume);
    if (current) {
      // Every pass serves the volume again: only a change reaches the server (one SIGHUP, one log line).
      if (!sameLimits(current.spec.limits, spec.limits)) await this.setLimits(volume, spec.limits);
      return current.device;
    }
    const launching = this.launchFirst(volume, spec);
    this.starting.set(volume, launching);
    try {
      return await launching;
    } finally {
      this.starting.delete(volume);
    }
  }

  private async launchFirst(volume: string, spec: StageSpec): Promise<StageDevice> {
    const limitsPath = join(this.options.stateDir, `${volume}.limits`);
    const recordPath = this.recordPath(volume);
    await this.writeLimits(limitsPath, spec.limits);
    let started;
    try {
      started = await this.takeOver(volume, spec, limitsPath);
      if (!started) {
        started = await this.run(volume, ['serve', spec.backing, '--limits', limitsPath, ...(spec.buffered ? ['--buffered'] : [])]);
        await this.writeRecord(recordPath, { id: started.device.id, backing: spec.backing, buffered: spec.buffered === true });
      }
    } catch (error) {
      await rm(limitsPath, { force: true });
      await rm(recordPath, { force: true });
      throw error;
    }
    const { process, device, exited } = started;
    const served: Served = {
      volume,
      spec,
      limitsPath,
      device,
      process,
      readyAt: Date.now(),
      stopping: false,
      restartTimer: undefined,
      backoff: new Backoff(this.options.restartBackoff ?? { initialMs: 500, maxMs: 30_000, jitter: 0.2 }),
      exited,
    };
    this.served.set(volume, served);
    this.supervise(served);
    return device;
  }

  /** New limits, live: the file first (a restarted server reads it), then SIGHUP to the running one. */
  async setLimits(volume: string, limits: QosLimits): Promise<void> {
    const served = this.served.get(volume);
    if (!served) throw new StrataError('NOT_FOUND', `volume ${volume} has no QoS stage`);
    await this.writeLimits(served.limitsPath, limits);
    served.spec = { ...served.spec, limits };
    served.process?.kill('SIGHUP');
  }

  /** Stops the server (it deletes its device); a server that will not stop is killed and its device deleted. */
  async stop(volume: string): Promise<void> {
    await this.starting.get(volume)?.catch(() => undefined);
    const served = this.served.get(volume);
    if (!served) return this.stopLeftOver(volume);
    served.stopping = true;
    clearTimeout(served.restartTimer);
    const process = served.process;
    if (process) {
      process.kill('SIGTERM');
      if (!(await this.within(served.exited, this.options.stopTimeoutMs ?? 30_000))) {
        this.options.logger.warn({ volume, pid: process.pid }, 'strata-ublk did not stop on SIGTERM: killing it and deleting its device');
        process.kill('SIGKILL');
        await served.exited;
        await this.deleteDevice(served.device.id);
      }
    } else {
      await this.deleteDevice(served.device.id);
    }
    this.served.delete(volume);
    await rm(served.limitsPath, { force: true });
    await rm(this.recordPath(volume), { force: true });
  }

  /**
   * Stops the server an earlier agent left for a volume this one never served (its policy was
   * removed while no agent ran): by the record in the state directory, its pid from `info`.
   * Nothing to do (one failed file read) when there is no record.
   */
  private async stopLeftOver(volume: string): Promise<void> {
    const record = await this.readRecord(volume);
    if (!record) return;
    const info = await this.info(record.id);
    if (info && info.pid > 0 && this.alive(info.pid) && (await this.isOurServer(info.pid, record.backing))) {
      const adopted = new AdoptedServer(info.pid, this.options.adoptedPollMs ?? 1000, (pid) => this.alive(pid));
      adopted.kill('SIGTERM');
      if (!(await this.within(adopted.exited, this.options.stopTimeoutMs ?? 30_000))) {
        adopted.kill('SIGKILL');
        await adopted.exited;
      }
    }
    // Gone or not, the device goes (exit 0 when the server's SIGTERM already deleted it).
    if (info) await this.deleteDevice(record.id);
    await rm(join(this.options.stateDir, `${volume}.limits`), { force: true });
    await rm(this.recordPath(volume), { force: true });
    this.options.logger.info({ volume, device: `/dev/ublkb${record.id}` }, 'stopped the QoS server an earlier agent started');
  }

  private async readRecord(volume: string): Promise<ServerRecord | undefined> {
    const record = await readFile(this.recordPath(volume), 'utf8').then(
      (text) => JSON.parse(text) as ServerRecord,
      () => undefined,
    );
    return record && Number.isSafeInteger(record.id) && typeof record.backing === 'string' ? record : undefined;
  }

  /** Stops every server (tests, and a node leaving the cluster; an agent restart keeps them). */
  async stopAll(): Promise<void> {
    await Promise.all([...this.served.keys()].map((volume) => this.stop(volume)));
  }

  private recordPath(volume: string): string {
    return join(this.options.stateDir, `${volume}.json`);
  }

  private async writeRecord(path: string, record: ServerRecord): Promise<void> {
    const temporary = `${path}.tmp`;
    await writeFile(temporary, JSON.stringify(record));
    await rename(temporary, path);
  }

  /**
   * The server an earlier agent left for `volume` (its record in the state directory): adopted
   * when it still runs over the same backing, recovered when its device waits for a server
   * (quiesced), undefined when there is nothing to take over (the device is deleted first if the
   * kernel still has it in another state, so a new one can be served).
   */
  private async takeOver(volume: string, spec: StageSpec, limitsPath: string): Promise<{ process: ServerProcess; device: StageDevice; exited: Promise<void> } | undefined> {
    const record = await this.readRecord(volume);
    if (!record) return undefined;
    const log = this.options.logger;
    const device = { id: record.id, device: `/dev/ublkb${record.id}` };
    const info = await this.info(record.id);
    if (record.backing !== spec.backing) {
      // Another backing (the array was assembled under another name): that device serves stale
      // data for nobody; it goes, and a new one is served.
      log.warn({ volume, device: device.device, was: record.backing, now: spec.backing }, 'the QoS server left by an earlier agent serves another backing: deleting its device');
      if (info) {
        if (info.pid > 0 && this.alive(info.pid)) process.kill(info.pid, 'SIGTERM');
        await this.deleteDevice(record.id);
      }
      return undefined;
    }
    if (info?.state === 'live' && info.pid > 0 && this.alive(info.pid) && (await this.isOurServer(info.pid, spec.backing))) {
      log.info({ volume, device: device.device, pid: info.pid }, 'adopted the QoS server an earlier agent started');
      const adopted = new AdoptedServer(info.pid, this.options.adoptedPollMs ?? 1000, (pid) => this.alive(pid));
      // It read its limits file when it started or at its last SIGHUP: the file may have changed since.
      adopted.kill('SIGHUP');
      return { process: adopted, device, exited: adopted.exited };
    }
    if (info && info.state !== 'dead') {
      log.warn({ volume, device: device.device, state: info.state }, 'the QoS server an earlier agent started is gone: recovering its device');
      const started = await this.run(volume, ['recover', String(record.id), spec.backing, '--limits', limitsPath, ...(spec.buffered ? ['--buffered'] : [])]);
      return started;
    }
    if (info) await this.deleteDevice(record.id);
    return undefined;
  }

  private alive(pid: number): boolean {
    if (this.options.isAlive) return this.options.isAlive(pid);
    try {
      process.kill(pid, 0);
      return true;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'EPERM';
    }
  }

  /** The pid runs this stage's binary over this backing (not a pid the kernel reused for something else). */
  private async isOurServer(pid: number, backing: string): Promise<boolean> {
    const line = await (this.options.commandLine ?? ((p) => readFile(`/proc/${p}/cmdline`, 'utf8')))(pid).catch(() => '');
    const args = line.split('\0');
    return args.some((a) => basename(a) === basename(this.binary)) && args.includes(backing);
  }

  /** `strata-ublk info ID`: the device's state and its server's pid, undefined when the kernel has no such device. */
  private async info(id: number): Promise<{ state: string; pid: number } | undefined> {
    const { code, stdout } = await this.oneShotOutput(['info', String(id)]);
    if (code !== 0) return undefined;
    const state = /\bstate=(\S+)/.exec(stdout)?.[1] ?? 'dead';
    const pid = Number(/\bpid=(-?\d+)/.exec(stdout)?.[1] ?? '0');
    return { state, pid };
  }

  private async writeLimits(path: string, limits: QosLimits): Promise<void> {
    const text = limitsFileText(limits);
    await mkdir(this.options.stateDir, { recursive: true });
    // Whole or not at all: the server may read it at any moment (a restart).
    const temporary = `${path}.tmp`;
    await writeFile(temporary, text);
    await rename(temporary, path);
  }

  /** Launches the server with `args` and waits for its `ready` line. */
  private run(volume: string, args: string[]): Promise<{ process: ServerProcess; device: StageDevice; exited: Promise<void> }> {
    const log = this.options.logger;
    const process = this.launch(this.binary, args);
    let lastError = '';
    let onExit: (code: number | null, signal: NodeJS.Signals | null) => void = () => {};
    const exited = new Promise<void>((resolve) => {
      process.once('exit', (code, signal) => {
        onExit(code, signal);
        resolve();
      });
    });
    if (process.stderr) {
      createInterface({ input: process.stderr }).on('line', (line) => {
        lastError = line.replace(/^strata-ublk: /, '');
        log.info({ volume, pid: process.pid }, `strata-ublk: ${lastError}`);
      });
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        process.kill('SIGKILL');
        reject(new Error(`strata-ublk was not ready within ${this.options.readyTimeoutMs ?? 30_000} ms`));
      }, this.options.readyTimeoutMs ?? 30_000);
      onExit = (code, signal) => {
        clearTimeout(timer);
        reject(startFailure(code, signal, lastError));
      };
      if (!process.stdout) {
        clearTimeout(timer);
        reject(new Error('strata-ublk was started without a stdout pipe'));
        return;
      }
      createInterface({ input: process.stdout }).on('line', (line) => {
        const ready = /^ready id=(\d+) device=(\S+)$/.exec(line);
        if (!ready) return;
        clearTimeout(timer);
        onExit = () => {};
        resolve({ process, device: { id: Number(ready[1]), device: ready[2]! }, exited });
      });
    });
  }

  /** Restarts the server whenever it exits without being asked to. */
  private supervise(served: Served): void {
    const process = served.process;
    if (!process) return;
    void served.exited.then(() => {
      if (served.stopping || served.process !== process) return;
      served.process = undefined;
      if (Date.now() - served.readyAt >= (this.options.stableAfterMs ?? 60_000)) served.backoff.reset();
      const delay = served.backoff.next();
      this.options.logger.warn({ volume: served.volume, device: served.device.device, delayMs: delay }, 'strata-ublk died: the device holds its I/O until it is recovered');
      served.restartTimer = setTimeout(() => void this.restart(served), delay);
    });
  }

  /**
   * `recover` on the same device: hosts see a pause, nothing else. When the kernel no longer has
   * the device (deleted meanwhile), a new one is served and the caller told to repoint at it.
   */
  private async restart(served: Served): Promise<void> {
    if (served.stopping) return;
    const { spec, limitsPath } = served;
    const extra = spec.buffered ? ['--buffered'] : [];
    try {
      let started;
      try {
        started = await this.run(served.volume, ['recover', String(served.device.id), spec.backing, '--limits', limitsPath, ...extra]);
      } catch (error) {
        if (served.stopping || error instanceof StrataError || (await this.deviceExists(served.device.id))) throw error;
        started = await this.run(served.volume, ['serve', spec.backing, '--limits', limitsPath, ...extra]);
        this.options.logger.warn({ volume: served.volume, was: served.device.device, now: started.device.device }, 'the ublk device was gone: serving a new one');
        this.options.onDeviceReplaced?.(served.volume, started.device);
      }
      if (served.stopping) {
        started.process.kill('SIGTERM');
        return;
      }
      Object.assign(served, { process: started.process, device: started.device, exited: started.exited, readyAt: Date.now() });
      this.supervise(served);
      this.options.logger.info({ volume: served.volume, device: served.device.device, pid: started.process.pid }, 'strata-ublk restarted');
    } catch (error) {
      if (served.stopping) return;
      const delay = served.backoff.next();
      this.options.logger.error({ volume: served.volume, err: error, delayMs: delay }, 'strata-ublk restart failed');
      served.restartTimer = setTimeout(() => void this.restart(served), delay);
    }
  }

  /** `strata-ublk info ID` exits 0 while the kernel has the device. */
  private async deviceExists(id: number): Promise<boolean> {
    return (await this.oneShotOutput(['info', String(id)])).code === 0;
  }

  private async deleteDevice(id: number): Promise<void> {
    const { code } = await this.oneShotOutput(['delete', String(id)]);
    if (code !== 0) this.options.logger.error({ id }, `strata-ublk delete ${id} failed (status ${code})`);
  }

  /** Runs a short command of the server binary; resolves with its exit status and what it printed. */
  private oneShotOutput(args: string[]): Promise<{ code: number | null; stdout: string }> {
    const process = this.launch(this.binary, args);
    let stdout = '';
    // Its output may arrive after the exit event: both are awaited.
    const output = new Promise<void>((resolve) => {
      if (!process.stdout) return resolve();
      process.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
      process.stdout.once('end', resolve).once('error', () => resolve());
    });
    process.stderr?.resume();
    const exited = new Promise<number | null>((resolve) => process.once('exit', (code) => resolve(code)));
    return Promise.all([exited, output]).then(([code]) => ({ code, stdout }));
  }

  private async within(promise: Promise<void>, ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    try {
      return await Promise.race([promise.then(() => true), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * A server started by an earlier agent: not this process's child, so its exit is seen by polling
 * its pid; signals go to it by pid. It has no pipes to this process.
 */
class AdoptedServer implements ServerProcess {
  readonly stdout = null;
  readonly stderr = null;
  readonly exited: Promise<void>;
  private readonly listeners: ((code: number | null, signal: NodeJS.Signals | null) => void)[] = [];

  constructor(
    readonly pid: number,
    pollMs: number,
    alive: (pid: number) => boolean,
  ) {
    this.exited = new Promise((resolve) => {
      const timer = setInterval(() => {
        if (alive(pid)) return;
        clearInterval(timer);
        for (const listener of this.listeners.splice(0)) listener(null, null);
        resolve();
      }, pollMs);
      timer.unref();
    });
  }

  kill(signal: NodeJS.Signals): boolean {
    try {
      process.kill(this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  once(_event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this {
    this.listeners.push(listener);
    return this;
  }
}
