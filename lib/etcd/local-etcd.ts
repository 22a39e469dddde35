// Runs a single-member etcd (Debian's etcd-server) on 127.0.0.1 as a child process: used by
// tests (temp data dir, free ports) and by the local cluster (`npm run cluster`). The child is
// started under `setpriv --pdeathsig SIGKILL` so it dies with its parent even on a crash.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface LocalEtcdOptions {
  readonly dataDir: string;
  readonly clientPort: number;
  readonly peerPort: number;
  /** File that receives etcd's own log; default: discarded (kept in memory for errors). */
  readonly logFile?: string;
  /**
   * Serve clients over TLS and require client certificates signed by `caFile` (etcd's
   * --client-cert-auth). Health is then read from a plain-HTTP metrics listener on `metricsPort`.
   */
  readonly tls?: { readonly certFile: string; readonly keyFile: string; readonly caFile: string; readonly metricsPort: number };
}

export interface LocalEtcd {
  readonly endpoint: string;
  readonly child: ChildProcess;
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function startLocalEtcd(options: LocalEtcdOptions): Promise<LocalEtcd> {
  const client = `${options.tls ? 'https' : 'http'}://127.0.0.1:${options.clientPort}`;
  const health = options.tls ? `http://127.0.0.1:${options.tls.metricsPort}` : client;
  const peer = `http://127.0.0.1:${options.peerPort}`;
  const args = [
    '--name', 'strata', '--data-dir', join(options.dataDir, 'data'),
    '--listen-client-urls', client, '--advertise-client-urls', client,
    '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer,
    '--initial-cluster', `strata=${peer}`, '--initial-cluster-state', 'new',
    '--log-level', 'warn', '--logger', 'zap',
    ...(options.tls
      ? ['--cert-file', options.tls.certFile, '--key-file', options.tls.keyFile, '--trusted-ca-file', options.tls.caFile, '--client-cert-auth', '--listen-metrics-urls', health]
      : []),
  ];
  const stderrTarget = options.logFile ? openSync(options.logFile, 'a') : 'pipe';
  const stdio: ['ignore', 'ignore', typeof stderrTarget] = ['ignore', 'ignore', stderrTarget];
  const child = existsSync('/usr/bin/setpriv')
    ? spawn('/usr/bin/setpriv', ['--pdeathsig', 'SIGKILL', '--', 'etcd', ...args], { stdio })
    : spawn('etcd', args, { stdio });
  running.add(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const spawnFailed = new Promise<Error>((resolve) => child.once('error', resolve));
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      running.delete(child);
      resolve();
    }),
  );

  const deadline = Date.now() + 20_000;
  for (;;) {
    const failure = await Promise.race([spawnFailed, sleep(50).then(() => undefined)]);
    if (failure) throw new Error(`cannot run etcd (install Debian's etcd-server): ${failure.message}`);
    if (child.exitCode !== null) throw new Error(`etcd exited during start: ${stderr || `see ${options.logFile}`}`);
    try {
      const res = await fetch(`${health}/health`);
      if (res.ok && ((await res.json()) as { health?: string }).health === 'true') break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`etcd did not become healthy in 20 s: ${stderr}`);
    }
  }

  return {
    endpoint: `127.0.0.1:${options.clientPort}`,
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
    },
  };
}
