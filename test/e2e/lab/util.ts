// Shared helpers of the e2e lab: locations, child processes (argument arrays only, every one
// bounded by a timeout), small file helpers and timing.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, accessSync, constants as fsConstants } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The checkout: the first directory above this file holding package.json and test/e2e. */
export const repoRoot: string = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'test', 'e2e'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`e2e lab: no checkout found above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
})();

/** Source files the lab ships to guests (shell scripts), by path in the checkout. */
export const labSourceDir = join(repoRoot, 'test', 'e2e', 'lab', 'guest');
/** Guest-side helper scripts tests run with `guest.run(['sh', script(...), ...])`. */
export const scriptsDir = join(repoRoot, 'test', 'e2e', 'scripts');
export function script(name: string): string {
  return join(scriptsDir, name);
}

/**
 * Cache of kernels and initramfs images: $STRATA_E2E_CACHE, else /var/cache/strata-e2e when
 * writable, else ~/.cache/strata-e2e.
 */
export function cacheDir(): string {
  const fromEnv = process.env['STRATA_E2E_CACHE'];
  if (fromEnv) {
    mkdirSync(fromEnv, { recursive: true });
    return fromEnv;
  }
  const system = '/var/cache/strata-e2e';
  try {
    mkdirSync(system, { recursive: true });
    accessSync(system, fsConstants.W_OK);
    return system;
  } catch {
    const user = join(homedir(), '.cache', 'strata-e2e');
    mkdirSync(user, { recursive: true });
    return user;
  }
}

export interface ExecOptions {
  /** Hard limit; the child is killed with SIGKILL when it expires. */
  readonly timeoutMs: number;
  /** Bytes written to the child's stdin (stdin is /dev/null otherwise). */
  readonly input?: Buffer | string;
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  /** Resolve with the result even when the exit code is not 0. */
  readonly allowFailure?: boolean;
}

export interface ExecResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: Buffer;
  readonly stderr: string;
}

/** Runs `file` with an argument array (never through a shell), bounded by timeoutMs. */
export function execArgv(file: string, args: readonly string[], options: ExecOptions): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, options.timeoutMs);
    child.stdout?.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr?.on('data', (chunk: Buffer) => err.push(chunk));
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${file}: ${error.message}`));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      const result: ExecResult = { code, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() };
      const command = [file, ...args].join(' ');
      if (timedOut) reject(new Error(`${command}: timed out after ${options.timeoutMs} ms; stderr: ${tail(result.stderr)}`));
      else if (code !== 0 && !options.allowFailure)
        reject(new Error(`${command}: exit ${code ?? signal}; stderr: ${tail(result.stderr)}`));
      else resolve(result);
    });
    if (options.input !== undefined && child.stdin) {
      child.stdin.on('error', () => {
        /* the child may exit before reading all of its input; its exit code tells */
      });
      child.stdin.end(options.input);
    }
  });
}

/** True when `command` is found on PATH (or is an existing absolute path). */
/** True while a process with this PID exists (signal 0). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function haveCommand(command: string): boolean {
  if (command.includes('/')) return existsSync(command);
  const path = process.env['PATH'] ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
  return path.split(':').some((dir) => dir !== '' && existsSync(join(dir, command)));
}

export function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

export function tail(text: string, chars = 2000): string {
  return text.length > chars ? `…${text.slice(-chars)}` : text;
}

/** Milliseconds since `start` (a performance.now() value), rounded. */
export function since(start: number): number {
  return Math.round(performance.now() - start);
}

/** Rejects with a labelled error if `promise` does not settle within timeoutMs. */
export async function withTimeout<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: timed out after ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
  } finally {
    if (timer) clearTimeout(timer);
  }
}

/** Prints a lab progress line on stderr when STRATA_E2E_VERBOSE is set (setup always prints). */
export function labLog(message: string): void {
  if (process.env['STRATA_E2E_VERBOSE']) process.stderr.write(`e2e-lab: ${message}\n`);
}

/** Times the labelled steps of an end-to-end test; the timings are printed at its end. */
export class StepTimer {
  readonly timings: string[] = [];
  /**
   * Runs fn and records how long it took (also when it failed). A failure's message starts with
   * the step's label: a CI log shows the failing test's error but not always the suite's timings.
   */
  readonly step = async <T>(label: string, fn: () => Promise<T>): Promise<T> => {
    const started = performance.now();
    try {
      return await fn();
    } catch (err) {
      if (err instanceof Error && !err.message.startsWith(`[${label}`)) {
        const plain = err.message;
        err.message = `[${label}, after ${since(started)} ms] ${plain}`;
        // The reporter prints the stack, written when the error was made.
        if (err.stack) err.stack = err.stack.replace(plain, err.message);
      }
      throw err;
    } finally {
      this.timings.push(`${label} ${since(started)} ms`);
    }
  };
}

/**
 * nvme-cli's host identity for `hostnqn`: `--hostnqn <nqn> --hostid <uuid>`. Since 6.x (seen on
 * Debian 13's 6.12) the kernel refuses a second host NQN under a host ID already in use ("found
 * same hostid but different hostnqn"), and nvme-cli sends /etc/nvme/hostid for every NQN unless
 * told otherwise. A real host has one NQN and one ID; a test initiator playing several hosts gives
 * each its own: the UUID of an `...:uuid:<UUID>` NQN, else one derived from the NQN.
 */
export function nvmeHostArgs(hostnqn: string): string[] {
  const uuid = /:uuid:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/i.exec(hostnqn)?.[1];
  const hex = uuid ?? createHash('sha256').update(hostnqn).digest('hex').slice(0, 32);
  const id = uuid ?? `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-8${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
  return ['--hostnqn', hostnqn, '--hostid', id];
}
