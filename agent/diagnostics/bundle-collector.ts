// The agent's part of the diagnostic bundle (GET /api/v2/logs, docs/diagnostics.md): this
// server's OS and hardware facts, the Strata units' status and journald logs, /var/log, the
// agent's view of the data path (nvmet configfs tree, md, btrfs, nftables), statistics
// snapshots and an optional five-second capture. Each item is produced into a temporary file,
// then handed to the sink (which streams it to the control plane in credited pieces) and
// deleted: memory holds one piece at a time, whatever the bundle's size. What cannot be
// collected here (a command not installed, no systemd, no nvmet) is listed in NOT-COLLECTED.txt
// with the reason instead of failing the bundle. An aborted signal stops every command at once.
import { spawn } from 'node:child_process';
import { createWriteStream, promises as fs } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { which } from '../../lib/executables.js';
import type { Logger } from '../../lib/logger.js';
import { sleep } from '../../lib/retry.js';
import type { CollectBundle__Output } from '../../proto/gen/strata/v1/CollectBundle.js';

/** Where the entries go: the control-plane session's credited upload. */
export interface BundleSink {
  /** Sends the file at `filePath` as the archive entry `path`; resolves once its last piece is out. */
  file(path: string, filePath: string, size: number, mtimeSeconds: number): Promise<void>;
}

/** The kernel target the data path drives, or why there is none. */
export type NvmetView = { readonly root: string } | { readonly absent: string };

export interface BundleCollectorOptions {
  readonly nvmet: () => Promise<NvmetView>;
  /** The agent's measured state, written as JSON (inventory, volume and pool reports). */
  readonly agentState: () => Record<string, unknown>;
  readonly poolDir: string;
  readonly logDir: string;
  /** systemd units whose status and journal are collected. */
  readonly units: readonly string[];
  /** Present when systemd runs this server (default /run/systemd/system, as sd_booted(3) checks). */
  readonly systemdRunDir?: string;
  readonly logger: Logger;
}

export type BundleOptions = CollectBundle__Output;

const COMMAND_TIMEOUT_MS = 120_000;
const CAPTURE_SECONDS = 5;
const NVMET_VALUE_BYTES = 4096;

/** One run of a collection: its temp directory, its notes, its signal. */
class Run {
  readonly notes: string[] = [];
  private counter = 0;

  constructor(
    readonly dir: string,
    readonly options: BundleOptions,
    readonly sink: BundleSink,
    readonly signal: AbortSignal,
    readonly ionice: string | undefined,
  ) {}

  tempFile(): string {
    this.counter += 1;
    return join(this.dir, `item-${this.counter}`);
  }

  note(path: string, reason: string): void {
    this.notes.push(`${path}: ${reason}`);
  }

  async send(path: string, filePath: string): Promise<void> {
    const stat = await fs.stat(filePath);
    await this.sink.file(path, filePath, stat.size, Math.floor(stat.mtimeMs / 1000));
  }

  /** Writes `text` as entry `path`. */
  async text(path: string, text: string): Promise<void> {
    const file = this.tempFile();
    await fs.writeFile(file, text);
    await this.send(path, file);
    await fs.rm(file, { force: true });
  }

  /**
   * Runs `command` (lowest priority with IoNice) with its output in entry `path`; a command this
   * server does not have is noted, not run. A non-zero exit is kept at the end of the output.
   */
  async command(path: string, command: string, args: readonly string[], options: { binary?: boolean; durationMs?: number } = {}): Promise<void> {
    if (this.signal.aborted) return;
    const resolved = await which(command);
    if (!resolved) return this.note(path, `${command} is not installed on this server`);
    const file = this.tempFile();
    const argv = this.ionice ? [this.ionice, '-c', '3', 'nice', '-n', '19', resolved, ...args] : [resolved, ...args];
    const outcome = await runToFile(argv, file, this.signal, options);
    if (this.signal.aborted) return;
    if (!options.binary && outcome) await fs.appendFile(file, `\n# ${[command, ...args].join(' ')}: ${outcome}\n`);
    else if (options.binary && outcome) this.note(path, `${command}: ${outcome}`);
    await this.send(path, file);
    await fs.rm(file, { force: true });
  }

  /** Sends a file of this server as it is; an absent or unreadable one is noted. */
  async copy(path: string, source: string): Promise<void> {
    if (this.signal.aborted) return;
    try {
      const stat = await fs.stat(source);
      // /proc files say size 0 until read: those are read whole (they are small).
      if (stat.isFile() && stat.size > 0) await this.sink.file(path, source, stat.size, Math.floor(stat.mtimeMs / 1000));
      else await this.text(path, await fs.readFile(source, 'utf8'));
    } catch (err) {
      this.note(path, `${source}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
}

export class BundleCollector {
  constructor(private readonly options: BundleCollectorOptions) {}

  /** Collects every item the options ask for into the sink; rejects only if the sink fails. */
  async collect(options: BundleOptions, sink: BundleSink, signal: AbortSignal): Promise<void> {
    const dir = await fs.mkdtemp(join(tmpdir(), 'strata-bundle-'));
    const ionice = options.io_nice ? await which('ionice') : undefined;
    const run = new Run(dir, options, sink, signal, ionice);
    if (options.io_nice && !ionice) run.note('(IoNice)', 'ionice is not installed: commands ran at normal priority');
    try {
      await run.text('bundle-options.json', `${JSON.stringify({ ...options, collectedAt: new Date().toISOString() }, null, 2)}\n`);
      await this.services(run);
      if (!options.services_only) {
        await this.system(run);
        await this.agentView(run);
        if (!options.skip_var_log) await this.varLog(run);
        if (!options.skip_statistics) await this.statistics(run);
        if (options.capture_cpu_and_tcpdump) await this.capture(run);
      }
      if (signal.aborted) return;
      await run.text('NOT-COLLECTED.txt', run.notes.length ? `${run.notes.join('\n')}\n` : 'everything asked for was collected\n');
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  }

  private async services(run: Run): Promise<void> {
    const systemd = await exists(this.options.systemdRunDir ?? '/run/systemd/system');
    const since = `@${Math.floor(Date.now() / 1000) - run.options.days_of_logs * 86_400}`;
    for (const unit of this.options.units) {
      if (!systemd) {
        run.note(`services/${unit}.*`, 'systemd is not running on this server (no /run/systemd/system): no unit status or journald logs');
        continue;
      }
      await run.command(`services/${unit}.status.txt`, 'systemctl', ['status', unit, '--no-pager', '--full']);
      if (!run.options.services_only) await run.command(`services/${unit}.journal.log`, 'journalctl', ['-u', unit, `--since=${since}`, '--no-pager', '-o', 'short-iso']);
    }
    if (systemd && !run.options.services_only) await run.command('services/kernel.journal.log', 'journalctl', ['-k', `--since=${since}`, '--no-pager', '-o', 'short-iso']);
  }

  private async system(run: Run): Promise<void> {
    await run.command('system/uname.txt', 'uname', ['-a']);
    for (const [path, source] of [
      ['system/os-release', '/etc/os-release'],
      ['system/cpuinfo', '/proc/cpuinfo'],
      ['system/meminfo', '/proc/meminfo'],
      ['system/mounts', '/proc/mounts'],
      ['system/uptime', '/proc/uptime'],
      ['system/cmdline', '/proc/cmdline'],
      ['system/modules', '/proc/modules'],
    ] as const) await run.copy(path, source);
    await run.command('system/lsblk.json', 'lsblk', ['-J', '-O']);
    await run.command('system/lspci.txt', 'lspci', ['-vv']);
    await run.command('system/ip-addr.txt', 'ip', ['-d', 'addr']);
    await run.command('system/ip-route.txt', 'ip', ['route', 'show', 'table', 'all']);
    await run.command('system/ss.txt', 'ss', ['-tanpi']);
    await run.command('system/df.txt', 'df', ['-h']);
    await run.command('system/dmesg.txt', 'dmesg', ['-T']);
  }

  private async agentView(run: Run): Promise<void> {
    await run.text('agent/state.json', `${JSON.stringify(this.options.agentState(), bigintAsString, 2)}\n`);
    const nvmet = await this.options.nvmet();
    if ('absent' in nvmet) run.note('agent/nvmet-configfs.txt', nvmet.absent);
    else await run.text('agent/nvmet-configfs.txt', await describeTree(nvmet.root));
    await run.copy('agent/mdstat', '/proc/mdstat');
    await run.command('agent/mdadm-detail.txt', 'mdadm', ['--detail', '--scan', '--verbose']);
    await run.command('agent/btrfs-show.txt', 'btrfs', ['filesystem', 'show']);
    if (await exists(this.options.poolDir)) await run.command('agent/btrfs-usage.txt', 'btrfs', ['filesystem', 'usage', '-b', this.options.poolDir]);
    else run.note('agent/btrfs-usage.txt', `the pool directory ${this.options.poolDir} does not exist`);
    await run.command('agent/nft-ruleset.txt', 'nft', ['list', 'ruleset']);
  }

  /** Regular files of the log directory changed within the days asked for (journal files: journalctl). */
  private async varLog(run: Run): Promise<void> {
    const oldest = Date.now() - run.options.days_of_logs * 86_400_000;
    const root = this.options.logDir;
    const walk = async (dir: string): Promise<void> => {
      let entries;
      try {
        entries = await fs.readdir(dir, { withFileTypes: true });
      } catch (err) {
        return run.note(`var-log/${relative(root, dir)}`, `${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      }
      for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
        if (run.signal.aborted) return;
        const path = join(dir, entry.name);
        if (entry.isDirectory()) {
          if (path !== join(root, 'journal')) await walk(path);
        } else if (entry.isFile()) {
          const stat = await fs.stat(path).catch(() => undefined);
          if (stat && stat.mtimeMs >= oldest) await run.copy(`var-log/${relative(root, path)}`, path);
        }
      }
    };
    await walk(root);
  }

  private async statistics(run: Run): Promise<void> {
    const cycles = Math.max(1, run.options.statistics_cycles);
    for (let cycle = 1; cycle <= cycles && !run.signal.aborted; cycle++) {
      const parts = [`# statistics cycle ${cycle} of ${cycles} at ${new Date().toISOString()}`];
      for (const source of ['/proc/loadavg', '/proc/stat', '/proc/diskstats', '/proc/net/dev', '/proc/mdstat']) {
        const text = await fs.readFile(source, 'utf8').catch((err: NodeJS.ErrnoException) => `(not readable: ${err.code ?? err.message})\n`);
        parts.push(`## ${source}`, text);
      }
      parts.push('## agent state', JSON.stringify(this.options.agentState(), bigintAsString, 2));
      await run.text(`statistics/cycle-${cycle}.txt`, `${parts.join('\n')}\n`);
      if (cycle < cycles) await sleep(run.options.statistics_interval_seconds * 1000, run.signal);
    }
  }

  /** Five seconds of packets (tcpdump) and CPU samples (top), side by side. */
  private async capture(run: Run): Promise<void> {
    await Promise.all([
      run.command('capture/packets.pcap', 'tcpdump', ['-i', 'any', '-n', '-s', '256', '-w', '-'], { binary: true, durationMs: CAPTURE_SECONDS * 1000 }),
      // n samples a second apart span n - 1 seconds: one more sample covers the whole capture.
      run.command('capture/top.txt', 'top', ['-b', '-d', '1', '-n', String(CAPTURE_SECONDS + 1)]),
    ]);
  }
}

/** Runs argv with stdout and stderr into `file`; resolves with '' on exit 0, else what happened. */
function runToFile(argv: readonly string[], file: string, signal: AbortSignal, options: { binary?: boolean; durationMs?: number }): Promise<string> {
  return new Promise((resolve) => {
    const out = createWriteStream(file);
    out.on('open', () => {
      const [program, ...args] = argv as [string, ...string[]];
      const child = spawn(program, args, { stdio: ['ignore', 'pipe', options.binary ? 'ignore' : 'pipe'], signal, timeout: COMMAND_TIMEOUT_MS });
      child.stdout?.pipe(out, { end: false });
      child.stderr?.pipe(out, { end: false });
      // A capture runs for its duration and is then asked to finish (tcpdump flushes on SIGINT).
      const stopAt = options.durationMs ? setTimeout(() => child.kill('SIGINT'), options.durationMs) : undefined;
      let outcome = '';
      child.on('error', (err) => {
        outcome = err.name === 'AbortError' ? 'cancelled' : err.message;
      });
      child.on('close', (code, sig) => {
        clearTimeout(stopAt);
        if (!outcome && code !== 0 && !(options.durationMs && sig === 'SIGINT')) outcome = sig ? `killed by ${sig}` : `exit status ${code}`;
        out.end(() => resolve(outcome));
      });
    });
    out.on('error', (err) => resolve(`cannot write: ${err.message}`));
  });
}

/** The configfs tree as text: every directory, attribute value and symlink. */
/**
 * nvmet attributes that hold secrets: a host's in-band authentication keys (`dhchap_key`,
 * `dhchap_ctrl_key`, written by in-band-auth) and any key, secret or PSK a later kernel adds there.
 */
const SECRET_ATTRIBUTE = /(^|_)(key|secret|psk)$/i;

async function describeTree(root: string): Promise<string> {
  const lines = [`# ${root}`];
  const walk = async (dir: string): Promise<void> => {
    let entries;
    try {
      entries = await fs.readdir(dir, { withFileTypes: true });
    } catch (err) {
      lines.push(`${relative(root, dir) || '.'}/ (not readable: ${(err as NodeJS.ErrnoException).code})`);
      return;
    }
    for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(dir, entry.name);
      const name = relative(root, path);
      if (entry.isSymbolicLink()) {
        lines.push(`${name} -> ${await fs.readlink(path).catch(() => '?')}`);
      } else if (entry.isDirectory()) {
        lines.push(`${name}/`);
        await walk(path);
      } else {
        const value = await readAttribute(path);
        // A set secret shows as set, never its value; an empty or unreadable one as it is.
        lines.push(`${name} = ${SECRET_ATTRIBUTE.test(entry.name) && value !== '""' && !value.startsWith('(') ? '<redacted>' : value}`);
      }
    }
  };
  await walk(root);
  return `${lines.join('\n')}\n`;
}

async function readAttribute(path: string): Promise<string> {
  let handle;
  try {
    handle = await fs.open(path, 'r');
    const buffer = Buffer.alloc(NVMET_VALUE_BYTES);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return JSON.stringify(buffer.subarray(0, bytesRead).toString('utf8').trimEnd());
  } catch (err) {
    return `(not readable: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
  } finally {
    await handle?.close();
  }
}

async function exists(path: string): Promise<boolean> {
  return fs.access(path).then(() => true, () => false);
}

function bigintAsString(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? value.toString() : value;
}
