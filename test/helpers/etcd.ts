// Starts a private etcd (Debian's etcd-server) on 127.0.0.1 with free ports and a temp data dir,
// and always stops it: on stop(), on process exit, and (through setpriv --pdeathsig) when the
// test process dies without running its exit handlers.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './ports.js';

export interface TestEtcd {
  readonly endpoint: string;
  readonly clientPort: number;
  readonly dataDir: string;
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function startEtcd(): Promise<TestEtcd> {
  const dataDir = mkdtempSync(join(tmpdir(), 'strata-etcd-'));
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const client = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const args = [
    '--name', 'test', '--data-dir', join(dataDir, 'data'),
    '--listen-client-urls', client, '--advertise-client-urls', client,
    '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer,
    '--initial-cluster', `test=${peer}`, '--initial-cluster-state', 'new',
    '--log-level', 'error', '--logger', 'zap',
  ];
  const usePdeathsig = existsSync('/usr/bin/setpriv');
  const child = usePdeathsig
    ? spawn('/usr/bin/setpriv', ['--pdeathsig', 'SIGKILL', '--', 'etcd', ...args], { stdio: ['ignore', 'ignore', 'pipe'] })
    : spawn('etcd', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  running.add(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`etcd exited during start: ${stderr}`);
    try {
      const res = await fetch(`${client}/health`);
      if (res.ok && ((await res.json()) as { health?: string }).health === 'true') break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`etcd did not become healthy in 20 s: ${stderr}`);
    }
    await sleep(50);
  }

  return {
    endpoint: `127.0.0.1:${clientPort}`,
    clientPort,
    dataDir,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      running.delete(child);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
