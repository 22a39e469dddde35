// A private etcd for one test file: 127.0.0.1, free ports, a temp data dir; always stopped
// (stop(), process exit, or the parent-death signal of lib/etcd/local-etcd.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLocalEtcd } from '../../lib/etcd/local-etcd.js';
import { freePort } from '../../lib/ports.js';

export interface TestEtcd {
  readonly endpoint: string;
  readonly clientPort: number;
  readonly dataDir: string;
  stop(): Promise<void>;
  /** SIGKILL (a crash): the data stays for restart(). */
  kill(): Promise<void>;
  /** Starts it again on the same data and ports. */
  restart(): Promise<void>;
}

export async function startEtcd(): Promise<TestEtcd> {
  const dataDir = mkdtempSync(join(tmpdir(), 'strata-etcd-'));
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  let etcd = await startLocalEtcd({ dataDir, clientPort, peerPort });
  return {
    endpoint: etcd.endpoint,
    clientPort,
    dataDir,
    async stop() {
      await etcd.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
    async kill() {
      const { child } = etcd;
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
    async restart() {
      etcd = await startLocalEtcd({ dataDir, clientPort, peerPort });
    },
  };
}
