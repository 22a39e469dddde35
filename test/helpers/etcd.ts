// A private etcd for one test file: 127.0.0.1, free ports, a temp data dir; always stopped
// (stop(), process exit, or the parent-death signal of lib/etcd/local-etcd.ts).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { startLocalEtcd, type LocalEtcdOptions } from '../../lib/etcd/local-etcd.js';
import { freePort } from '../../lib/ports.js';
import { createCertificateAuthority, issueServerCertificate } from '../../lib/tls/certificates.js';

export interface TestEtcd {
  readonly endpoint: string;
  readonly clientPort: number;
  readonly dataDir: string;
  /** With `clientCertAuth`: the files a client needs (the daemons' etcdCaFile, etcdCertFile, etcdKeyFile). */
  readonly clientTls?: { readonly caFile: string; readonly certFile: string; readonly keyFile: string };
  stop(): Promise<void>;
  /** SIGKILL (a crash): the data stays for restart(). */
  kill(): Promise<void>;
  /** Starts it again on the same data and ports. */
  restart(): Promise<void>;
}

/** `clientCertAuth`: etcd serves TLS and admits only clients with a certificate from its own test CA. */
export async function startEtcd(options: { clientCertAuth?: boolean } = {}): Promise<TestEtcd> {
  const dataDir = mkdtempSync(join(tmpdir(), 'strata-etcd-'));
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  let tls: LocalEtcdOptions['tls'];
  let clientTls: TestEtcd['clientTls'];
  if (options.clientCertAuth) {
    const ca = await createCertificateAuthority('test-etcd');
    const server = await issueServerCertificate(ca, 'etcd', ['127.0.0.1', 'localhost']);
    const client = await issueServerCertificate(ca, 'strata', ['strata-client']);
    const file = (name: string, content: string) => {
      writeFileSync(join(dataDir, name), content, { mode: 0o600 });
      return join(dataDir, name);
    };
    tls = { certFile: file('server.pem', server.certificate), keyFile: file('server.key', server.privateKey), caFile: file('ca.pem', ca.certificate), metricsPort: await freePort() };
    clientTls = { caFile: tls.caFile, certFile: file('client.pem', client.certificate), keyFile: file('client.key', client.privateKey) };
  }
  let etcd = await startLocalEtcd({ dataDir, clientPort, peerPort, ...(tls ? { tls } : {}) });
  return {
    endpoint: etcd.endpoint,
    clientPort,
    dataDir,
    ...(clientTls ? { clientTls } : {}),
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
      etcd = await startLocalEtcd({ dataDir, clientPort, peerPort, ...(tls ? { tls } : {}) });
    },
  };
}

/** A private etcd and a client of it for the tests of one suite: started before them, stopped after (read them inside the tests). */
export function etcdForSuite(): { readonly etcd: TestEtcd; readonly client: Etcd3 } {
  const suite = {} as { etcd: TestEtcd; client: Etcd3 };
  before(async () => {
    suite.etcd = await startEtcd();
    suite.client = createEtcdClient([suite.etcd.endpoint]);
  });
  after(async () => {
    suite.client.close();
    await suite.etcd.stop();
  });
  return suite;
}

/** A private etcd and a client of it, for a test or a backend that starts its own: `close` closes the client, then stops the etcd. */
export async function startEtcdWithClient(): Promise<{ readonly client: Etcd3; close(): Promise<void> }> {
  const etcd = await startEtcd();
  const client = createEtcdClient([etcd.endpoint]);
  return {
    client,
    close: async () => {
      client.close();
      await etcd.stop();
    },
  };
}
