// Starts the real daemons (dist/control-plane/main.js, dist/agent/main.js) as child processes,
// collects their JSON logs, and stops them (SIGTERM, or SIGKILL to simulate a crash).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../../lib/paths.js';
import { freePort } from './ports.js';

export interface DaemonProcess {
  readonly child: ChildProcess;
  readonly logs: Record<string, unknown>[];
  /** Resolves with the first log record matching, or rejects after timeoutMs. */
  waitForLog(predicate: (record: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** SIGTERM and wait; resolves with the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL: a crash, no cleanup. */
  kill(): Promise<void>;
}

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

export function spawnDaemon(script: string, args: string[], env: NodeJS.ProcessEnv = {}): DaemonProcess {
  const child = spawn(process.execPath, [join(packageRoot, 'dist', script), ...args], {
    cwd: packageRoot,
    env: { ...process.env, NOTIFY_SOCKET: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const logs: Record<string, unknown>[] = [];
  const waiters = new Set<{ predicate: (r: Record<string, unknown>) => boolean; resolve: (r: Record<string, unknown>) => void }>();
  let buffer = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      let record: Record<string, unknown>;
      try {
        record = JSON.parse(line) as Record<string, unknown>;
      } catch {
        record = { msg: line };
      }
      logs.push(record);
      for (const waiter of waiters) {
        if (waiter.predicate(record)) {
          waiters.delete(waiter);
          waiter.resolve(record);
        }
      }
    }
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-8000);
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      children.delete(child);
      resolve(code);
    }),
  );
  return {
    child,
    logs,
    waitForLog(predicate, timeoutMs = 20_000) {
      const found = logs.find(predicate);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        const waiter = { predicate, resolve };
        waiters.add(waiter);
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(new Error(`${script}: no matching log in ${timeoutMs} ms; exit=${child.exitCode}; stderr=${stderr}; last logs=${JSON.stringify(logs.slice(-5))}`));
        }, timeoutMs);
        void exited.then(() => {
          if (!waiters.has(waiter)) return;
          waiters.delete(waiter);
          clearTimeout(timer);
          reject(new Error(`${script} exited (${child.exitCode}) before the expected log; stderr=${stderr}; last logs=${JSON.stringify(logs.slice(-5))}`));
        });
        const originalResolve = waiter.resolve;
        waiter.resolve = (r) => {
          clearTimeout(timer);
          originalResolve(r);
        };
      });
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * Waits for the daemon's ready line (up to a minute: a start that issues certificates with openssl
 * took over 20 s on a loaded 2-core machine); a daemon that never says it is killed before the
 * error goes up (left running, its pipes would keep the test process, and so the whole run, from
 * ending).
 */
async function readyOrKilled(daemon: DaemonProcess, ready: (r: Record<string, unknown>) => boolean): Promise<void> {
  try {
    await daemon.waitForLog(ready, 60_000);
  } catch (err) {
    await daemon.kill();
    throw err;
  }
}

export interface ControlPlaneProcess extends DaemonProcess {
  /** https://127.0.0.1:<port> (with `https`), else http://. */
  readonly apiUrl: string;
  /** The cluster CA certificate the instance wrote (<stateDir>/ca.pem): what verifies its API and gRPC certificates. */
  readonly caPath: string;
  readonly grpcEndpoint: string;
  readonly stateDir: string;
  readonly instanceId: string;
  /** The admin token, when this instance bootstrapped the cluster. */
  adminToken(): string;
}

export interface ControlPlaneOptions {
  readonly etcdEndpoint: string;
  readonly stateDir?: string;
  readonly leaseTtlSeconds?: number;
  /** Reuse these ports (a restart on the same address, as systemd would do). */
  readonly apiPort?: number;
  readonly grpcPort?: number;
  readonly extraArgs?: string[];
  /**
   * Serve the REST API as production does, over HTTPS. Default false: suites about other things
   * talk to it with Node's fetch, which cannot be given the cluster CA, so the helper starts it
   * with the development setting --api-insecure-http (the agents' gRPC is TLS either way).
   * test/integration/tls.test.ts covers the HTTPS default.
   */
  readonly https?: boolean;
}

/**
 * Starts a control plane on free ports and waits until it serves. A port picked free can still be
 * taken by another test file's server before ours binds it: then, when the ports were ours to
 * pick, it starts again on new ones.
 */
export async function startControlPlaneProcess(options: ControlPlaneOptions): Promise<ControlPlaneProcess> {
  const portsOurs = options.apiPort === undefined || options.grpcPort === undefined;
  for (let attempt = 1; ; attempt++) {
    try {
      return await startControlPlaneOnce(options);
    } catch (err) {
      if (!portsOurs || attempt >= 3 || !String((err as Error).message).includes('EADDRINUSE')) throw err;
    }
  }
}

async function startControlPlaneOnce(options: ControlPlaneOptions): Promise<ControlPlaneProcess> {
  const stateDir = options.stateDir ?? mkdtempSync(join(tmpdir(), 'strata-cp-'));
  const apiPort = options.apiPort ?? (await freePort());
  const grpcPort = options.grpcPort ?? (await freePort());
  const instanceId = `cp-${apiPort}`;
  const daemon = spawnDaemon('control-plane/main.js', [
    '--etcd-endpoints', options.etcdEndpoint,
    '--api-port', String(apiPort),
    '--grpc-port', String(grpcPort),
    '--state-dir', stateDir,
    '--instance-id', instanceId,
    '--lease-ttl-seconds', String(options.leaseTtlSeconds ?? 2),
    '--log-level', 'debug',
    // Many control planes on one machine: metrics on a free port each (a test may name one).
    '--metrics-port', '0',
    ...(options.https ? [] : ['--api-insecure-http', 'true']),
    ...(options.extraArgs ?? []),
  ]);
  await readyOrKilled(daemon, (r) => r['msg'] === 'control plane started');
  return {
    ...daemon,
    apiUrl: `${options.https ? 'https' : 'http'}://127.0.0.1:${apiPort}`,
    caPath: join(stateDir, 'ca.pem'),
    grpcEndpoint: `127.0.0.1:${grpcPort}`,
    stateDir,
    instanceId,
    adminToken: () => readFileSync(join(stateDir, 'admin.jwt'), 'utf8').trim(),
  };
}

export interface SysfsAgentOptions {
  readonly etcdEndpoint: string;
  readonly plane: Pick<ControlPlaneProcess, 'grpcEndpoint'>;
  readonly stateDir: string;
  /** A fake sysfs (test/helpers/sysfs-fixture.ts): the agent reads its devices there, with no kernel target. */
  readonly sysfs: { readonly root: string; readonly mountsPath: string; readonly swapsPath: string };
  readonly hostname: string;
  readonly dataDevices: string;
  readonly extraArgs?: string[];
}

/** Starts an agent over a fake sysfs on 127.0.0.1 (a 2 s lease) and waits until it is ready. */
export async function startSysfsAgent(options: SysfsAgentOptions): Promise<DaemonProcess> {
  const agent = spawnDaemon('agent/main.js', [
    '--etcd-endpoints', options.etcdEndpoint,
    '--control-plane-endpoints', options.plane.grpcEndpoint,
    '--state-dir', options.stateDir,
    '--sysfs-root', options.sysfs.root,
    '--mounts-path', options.sysfs.mountsPath,
    '--swaps-path', options.sysfs.swapsPath,
    '--hostname', options.hostname,
    '--advertise-address', '127.0.0.1',
    '--discovery-listen-address', '127.0.0.1',
    '--discovery-port', '0',
    '--data-devices', options.dataDevices,
    '--lease-ttl-seconds', '2',
    ...(options.extraArgs ?? []),
  ]);
  await readyOrKilled(agent, (r) => r['msg'] === 'strata-agent ready');
  return agent;
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
