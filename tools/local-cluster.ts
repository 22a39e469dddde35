// `npm run cluster -- [--home DIR] [--api-port PORT]`: a working Strata cluster on this one
// machine, in the foreground: etcd, a control plane and an agent. State and logs live under
// DIR (default ~/.strata-cluster), so a second run picks up the same cluster. The admin token
// lands in DIR/admin.jwt. Ctrl-C (SIGINT) or SIGTERM stops everything it started.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command } from 'commander';
import { startLocalEtcd, type LocalEtcd } from '../lib/etcd/local-etcd.js';
import { packageRoot } from '../lib/paths.js';
import { freePort } from '../lib/ports.js';

interface Ports {
  etcdClient: number;
  etcdPeer: number;
  grpc: number;
}

const program = new Command('strata-cluster')
  .description('Start a local Strata cluster (etcd, control plane, agent) in the foreground')
  .option('--home <dir>', 'directory for all state and logs', join(homedir(), '.strata-cluster'))
  .option('--api-port <port>', 'port of the REST API on 127.0.0.1', '8080')
  .parse();
const options = program.opts<{ home: string; apiPort: string }>();
const home = resolve(options.home);
const apiPort = Number(options.apiPort);
if (!Number.isInteger(apiPort) || apiPort < 1 || apiPort > 65535) {
  console.error(`--api-port must be a port number, got ${options.apiPort}`);
  process.exit(2);
}

const logs = join(home, 'logs');
mkdirSync(logs, { recursive: true });
const ports = await loadPorts(join(home, 'ports.json'));
const children: ChildProcess[] = [];
let etcd: LocalEtcd | undefined;
let stopping = false;

process.on('SIGINT', () => void stopAll('SIGINT'));
process.on('SIGTERM', () => void stopAll('SIGTERM'));

try {
  etcd = await startLocalEtcd({ dataDir: join(home, 'etcd'), clientPort: ports.etcdClient, peerPort: ports.etcdPeer, logFile: join(logs, 'etcd.log') });
  say(`etcd           ${etcd.endpoint}  (data ${join(home, 'etcd')})`);

  const controlPlane = daemon('control-plane', [
    '--etcd-endpoints', etcd.endpoint,
    '--api-host', '127.0.0.1', '--api-port', String(apiPort),
    '--grpc-host', '127.0.0.1', '--grpc-port', String(ports.grpc),
    '--state-dir', home,
    '--instance-id', 'local',
  ]);
  await waitForApi(controlPlane);
  say(`control plane  http://127.0.0.1:${apiPort}/api/v2  (gRPC 127.0.0.1:${ports.grpc})`);

  daemon('agent', [
    '--etcd-endpoints', etcd.endpoint,
    '--control-plane-endpoints', `127.0.0.1:${ports.grpc}`,
    '--state-dir', join(home, 'agent'),
  ]);
  await waitForNode();
  say('agent          joined; its server and node are listed by the API');
  say('');
  say(`admin token    ${join(home, 'admin.jwt')}`);
  say(`try            curl -s -H "Authorization: Bearer $(cat ${join(home, 'admin.jwt')})" http://127.0.0.1:${apiPort}/api/v2/cluster`);
  say(`logs           ${logs}/`);
  say('Ctrl-C stops the cluster; run the same command again to resume it.');
} catch (err) {
  console.error(`local cluster failed to start: ${(err as Error).message}`);
  await stopAll('error', 1);
}

function say(line: string): void {
  process.stdout.write(`${line}\n`);
}

async function loadPorts(file: string): Promise<Ports> {
  // The etcd member's peer URL is stored in its data dir: keep the ports across restarts.
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8')) as Ports;
  const chosen: Ports = { etcdClient: await freePort(), etcdPeer: await freePort(), grpc: await freePort() };
  writeFileSync(file, JSON.stringify(chosen, null, 2));
  return chosen;
}

function daemon(name: 'control-plane' | 'agent', args: string[]): ChildProcess {
  const log = openSync(join(logs, `${name}.log`), 'a');
  const child = spawn(process.execPath, [join(packageRoot, 'dist', name, 'main.js'), ...args], {
    stdio: ['ignore', log, log],
    env: { ...process.env, NOTIFY_SOCKET: '' },
  });
  children.push(child);
  child.once('exit', (code, signal) => {
    if (!stopping) {
      console.error(`${name} exited unexpectedly (${signal ?? code}); see ${join(logs, `${name}.log`)}`);
      void stopAll('child exit', 1);
    }
  });
  return child;
}

function adminToken(): string | undefined {
  const file = join(home, 'admin.jwt');
  return existsSync(file) ? readFileSync(file, 'utf8').trim() : undefined;
}

async function api(path: string): Promise<Response | undefined> {
  const token = adminToken();
  if (!token) return undefined;
  try {
    return await fetch(`http://127.0.0.1:${apiPort}${path}`, { headers: { Authorization: `Bearer ${token}` } });
  } catch {
    return undefined;
  }
}

async function waitForApi(child: ChildProcess): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (child.exitCode !== null) throw new Error(`control plane exited; see ${join(logs, 'control-plane.log')}`);
    if ((await api('/api/v2/version'))?.ok) return;
    await sleep(100);
  }
  throw new Error(`control plane did not answer in 30 s; see ${join(logs, 'control-plane.log')}`);
}

async function waitForNode(): Promise<void> {
  for (let i = 0; i < 300; i++) {
    const res = await api('/api/v2/nodes');
    if (res?.ok) {
      const body = (await res.json()) as { nodes?: { state: string }[] };
      if (body.nodes?.some((n) => n.state === 'Active')) return;
    }
    await sleep(100);
  }
  throw new Error(`agent did not join in 30 s; see ${join(logs, 'agent.log')}`);
}

async function stopAll(reason: string, exitCode = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  if (reason !== 'error') say(`\nstopping (${reason})...`);
  // Agent first (revokes its lease), then the control plane, then etcd.
  for (const child of [...children].reverse()) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  await etcd?.stop();
  say('stopped');
  process.exit(exitCode);
}
