// Real multi-member etcd clusters for tests (Debian's etcd-server): each member is its own
// process on free ports of a loopback address, with its own data dir, and can be stopped and
// started again on the same data (a member restart), restored from a snapshot, or added to a
// running cluster (`member add`, then started with --initial-cluster-state existing).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { freePort } from '../../lib/ports.js';

const run = promisify(execFile);
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export interface EtcdMemberSpec {
  readonly name: string;
  /** Loopback address the member listens on (127.0.0.1, 127.0.0.2, ...). */
  readonly host: string;
  readonly clientPort: number;
  readonly peerPort: number;
}

export class EtcdMemberProcess {
  readonly dataDir: string;
  private child: ChildProcess | undefined;
  private stderr = '';

  constructor(
    readonly spec: EtcdMemberSpec,
    /** `name=peerURL,...` of the cluster this member starts into. */
    public initialCluster: string,
    public initialState: 'new' | 'existing',
    readonly token: string,
    private readonly root: string,
  ) {
    this.dataDir = join(root, spec.name);
  }

  get clientURL(): string {
    return `http://${this.spec.host}:${this.spec.clientPort}`;
  }

  get peerURL(): string {
    return `http://${this.spec.host}:${this.spec.peerPort}`;
  }

  /** host:port for Strata's etcdEndpoints. */
  get endpoint(): string {
    return `${this.spec.host}:${this.spec.clientPort}`;
  }

  /** Starts the process; with `waitHealthy`, until /health says true (needs a quorum). */
  async start(waitHealthy = true): Promise<void> {
    const args = [
      '--name', this.spec.name, '--data-dir', this.dataDir,
      '--listen-client-urls', this.clientURL, '--advertise-client-urls', this.clientURL,
      '--listen-peer-urls', this.peerURL, '--initial-advertise-peer-urls', this.peerURL,
      '--initial-cluster', this.initialCluster, '--initial-cluster-state', this.initialState,
      '--initial-cluster-token', this.token,
      '--heartbeat-interval', '50', '--election-timeout', '500',
      '--log-level', 'warn', '--logger', 'zap',
    ];
    const stdio: ['ignore', 'ignore', 'pipe'] = ['ignore', 'ignore', 'pipe'];
    const child = existsSync('/usr/bin/setpriv') ? spawn('/usr/bin/setpriv', ['--pdeathsig', 'SIGKILL', '--', 'etcd', ...args], { stdio }) : spawn('etcd', args, { stdio });
    this.child = child;
    running.add(child);
    child.once('exit', () => running.delete(child));
    child.stderr?.on('data', (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-4000);
    });
    if (waitHealthy) await this.waitHealthy();
  }

  async waitHealthy(timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.child && this.child.exitCode !== null) throw new Error(`etcd ${this.spec.name} exited: ${this.stderr}`);
      try {
        const res = await fetch(`${this.clientURL}/health`, { signal: AbortSignal.timeout(1000) });
        if (((await res.json()) as { health?: string }).health === 'true') return;
      } catch {
        // not yet
      }
      if (Date.now() > deadline) throw new Error(`etcd ${this.spec.name} not healthy in ${timeoutMs} ms: ${this.stderr}`);
      await sleep(100);
    }
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }

  /** etcdctl against this member. */
  async etcdctl(...args: string[]): Promise<string> {
    const { stdout } = await run('etcdctl', [`--endpoints=${this.clientURL}`, ...args], { env: { ...process.env, ETCDCTL_API: '3' } });
    return stdout;
  }

  /**
   * Replaces this (stopped) member's data with a restore of `snapshotFile`, under its own name
   * and the cluster's membership: the member keeps its ID but starts from raft index 0 with the
   * snapshot's keys, so the entries the leader sends it are applied on top of data that already
   * holds them — its key-value history (revisions) no longer matches the others'.
   */
  async restoreFrom(snapshotFile: string): Promise<void> {
    rmSync(this.dataDir, { recursive: true, force: true });
    await run('etcdctl', [
      'snapshot', 'restore', snapshotFile, '--name', this.spec.name, '--data-dir', this.dataDir,
      '--initial-cluster', this.initialCluster, '--initial-cluster-token', this.token, '--initial-advertise-peer-urls', this.peerURL,
    ], { env: { ...process.env, ETCDCTL_API: '3' } });
  }
}

export interface EtcdCluster {
  readonly members: EtcdMemberProcess[];
  readonly root: string;
  readonly token: string;
  /** host:port of every member, for Strata's etcdEndpoints. */
  endpoints(): string[];
  /** A member spec on free ports of `host`, not started: for `member add`. */
  newMember(name: string, host: string, initialCluster: string): Promise<EtcdMemberProcess>;
  stop(): Promise<void>;
}

/** Starts `size` members on 127.0.0.1 as one new cluster. */
export async function startEtcdCluster(size: number, host = '127.0.0.1'): Promise<EtcdCluster> {
  const root = mkdtempSync(join(tmpdir(), 'strata-etcd-cluster-'));
  const token = `strata-test-${process.pid}-${Date.now()}`;
  const specs: EtcdMemberSpec[] = [];
  for (let i = 0; i < size; i++) specs.push({ name: `m${i}`, host, clientPort: await freePort(), peerPort: await freePort() });
  const initialCluster = specs.map((s) => `${s.name}=http://${s.host}:${s.peerPort}`).join(',');
  const members = specs.map((s) => new EtcdMemberProcess(s, initialCluster, 'new', token, root));
  await Promise.all(members.map((m) => m.start(false)));
  await Promise.all(members.map((m) => m.waitHealthy()));
  const cluster: EtcdCluster = {
    members,
    root,
    token,
    endpoints: () => members.map((m) => m.endpoint),
    async newMember(name, memberHost, memberInitialCluster) {
      const member = new EtcdMemberProcess({ name, host: memberHost, clientPort: await freePort(), peerPort: await freePort() }, memberInitialCluster, 'existing', token, root);
      members.push(member);
      return member;
    },
    async stop() {
      await Promise.all(members.map((m) => m.stop()));
      rmSync(root, { recursive: true, force: true });
    },
  };
  return cluster;
}
