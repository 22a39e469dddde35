// `npm run cluster -- [--home DIR] [--api-port PORT] [--agent auto|host|guest]`: a working
// Strata cluster on this one machine, in the foreground: etcd, a control plane and an agent.
// State and logs live under DIR (default ~/.strata-cluster), so a second run picks up the same
// cluster. The admin token lands in DIR/admin.jwt. Ctrl-C (SIGINT) or SIGTERM stops everything
// it started.
//
// The agent serves volumes through the kernel NVMe target. Where this machine's kernel has it,
// the agent runs here; where it does not, the agent runs in a QEMU guest booting Debian's kernel
// with emulated NVMe drives (the e2e lab, test/e2e/cluster-lab.ts), whose drive images and agent
// state stay under DIR/guest, and each volume's port is forwarded from 127.0.0.1 to the guest.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command, Option } from 'commander';
import type { Etcd3 } from 'etcd3';
import { volumeSubsystemNQN } from '../lib/contract/nqn.js';
import { createEtcdClient, parseRecord } from '../lib/etcd/client.js';
import { keys } from '../lib/etcd/keys.js';
import { startLocalEtcd, type LocalEtcd } from '../lib/etcd/local-etcd.js';
import { packageRoot } from '../lib/paths.js';
import { freePort } from '../lib/ports.js';
import type { ClusterRecord } from '../lib/records.js';
import { hostHasNvmet, readVolumePorts, startStorageGuest, VolumePortForwards, type StorageGuest } from '../test/e2e/cluster-lab.js';
import { execArgv, installPackages, prepareLab } from '../test/e2e/lab/index.js';

interface Ports {
  etcdClient: number;
  etcdPeer: number;
  grpc: number;
  /** The guest agent's discovery controller, forwarded from 127.0.0.1 (added later: may be absent). */
  discovery?: number;
}

/** The guest's drives: one data device the node manages, one spare to add through the API. */
const GUEST_DRIVES = [
  { serial: 'STRATA-LOCAL-DATA0', sizeMiB: 16 * 1024 },
  { serial: 'STRATA-LOCAL-SPARE0', sizeMiB: 16 * 1024 },
] as const;
/** The control plane's and agent's default volume port range (both sides must agree). */
const VOLUME_PORT_MIN = 20000;
const VOLUME_PORT_MAX = 31999;

const program = new Command('strata-cluster')
  .description('Start a local Strata cluster (etcd, control plane, agent) in the foreground')
  .option('--home <dir>', 'directory for all state and logs', join(homedir(), '.strata-cluster'))
  .option('--api-port <port>', 'port of the REST API on 127.0.0.1', '8080')
  .addOption(
    new Option('--agent <where>', 'where the agent runs: on this host, in a QEMU guest, or auto (the host when its kernel has nvmet)')
      .choices(['auto', 'host', 'guest'])
      .default('auto'),
  )
  .parse();
const options = program.opts<{ home: string; apiPort: string; agent: 'auto' | 'host' | 'guest' }>();
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
let etcdClient: Etcd3 | undefined;
let storageGuest: StorageGuest | undefined;
let watcher: NodeJS.Timeout | undefined;
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
    '--volume-port-min', String(VOLUME_PORT_MIN), '--volume-port-max', String(VOLUME_PORT_MAX),
  ]);
  await waitForApi(controlPlane);
  say(`control plane  http://127.0.0.1:${apiPort}/api/v2  (gRPC 127.0.0.1:${ports.grpc})`);

  const run = (file: string, args: string[]) => execArgv(file, args, { timeoutMs: 30_000 });
  const inGuest = options.agent === 'guest' || (options.agent === 'auto' && !(await hostHasNvmet(run)));
  etcdClient = createEtcdClient([etcd.endpoint]);
  if (inGuest) {
    await startAgentInGuest();
  } else {
    daemon('agent', [
      '--etcd-endpoints', etcd.endpoint,
      '--control-plane-endpoints', `127.0.0.1:${ports.grpc}`,
      '--state-dir', join(home, 'agent'),
      '--volume-port-min', String(VOLUME_PORT_MIN), '--volume-port-max', String(VOLUME_PORT_MAX),
    ]);
    await waitForNode();
    say('agent          joined (on this host, serving through its kernel NVMe target)');
  }
  watcher = watchVolumes(etcdClient, inGuest);
  say('');
  say(`admin token    ${join(home, 'admin.jwt')}`);
  say(`try            curl -s -H "Authorization: Bearer $(cat ${join(home, 'admin.jwt')})" http://127.0.0.1:${apiPort}/api/v2/cluster`);
  say(`logs           ${logs}/`);
  say('Ctrl-C stops the cluster; run the same command again to resume it.');
} catch (err) {
  console.error(`local cluster failed to start: ${(err as Error).message}`);
  await stopAll('error', 1);
}

/**
 * The agent in a QEMU guest: its drive images and identity live under DIR/guest, so a second run
 * boots the same server with the same md array and btrfs. Volume ports are forwarded as volumes
 * appear (watchVolumes).
 */
async function startAgentInGuest(): Promise<void> {
  say('agent          this kernel has no NVMe target (nvmet): running the agent in a QEMU guest');
  say('               booting Debian\'s kernel with emulated NVMe drives (docs/e2e.md)');
  let started = performance.now();
  const added = await installPackages();
  if (added.length > 0) say(`               installed ${added.join(' ')}`);
  const lab = await prepareLab();
  say(`               lab ready: kernel ${lab.kernel.release} (${Math.round(performance.now() - started)} ms)`);
  const guestDir = join(home, 'guest');
  mkdirSync(guestDir, { recursive: true });
  started = performance.now();
  storageGuest = await startStorageGuest({
    name: 'strata-local',
    drives: GUEST_DRIVES.map((d) => ({ ...d, image: join(guestDir, `${d.serial}.img`) })),
    dataSerials: [GUEST_DRIVES[0].serial],
    etcdPort: ports.etcdClient,
    controlPlaneGrpcPort: ports.grpc,
    // Hosts on this machine dial 127.0.0.1:<volume port>, forwarded to the guest.
    advertiseAddress: '127.0.0.1',
    volumePortMin: VOLUME_PORT_MIN,
    volumePortMax: VOLUME_PORT_MAX,
    ...(ports.discovery ? { discoveryPort: ports.discovery } : {}),
    agentStateDir: join(guestDir, 'agent'),
    agentLogFile: join(logs, 'agent.log'),
    agentArgs: ['--reconcile-interval-seconds', '10'],
    memoryMiB: 1024,
    cpus: 2,
    logDir: join(logs, 'guest'),
    lab,
    bootTimeoutMs: 180_000,
  });
  say(`               guest up in ${storageGuest.guest.bootMs} ms (QEMU pid ${storageGuest.guest.pid}, console ${storageGuest.guest.consoleLog})`);
  void storageGuest.guest.exited.then(({ code, signal }) => {
    if (!stopping) {
      console.error(`the agent's QEMU guest exited unexpectedly (${signal ?? code}); see ${storageGuest?.guest.consoleLog}`);
      void stopAll('guest exit', 1);
    }
  });
  await storageGuest.startAgent({ timeoutMs: 180_000 });
  void storageGuest.agentExited().then((code) => {
    if (!stopping) {
      console.error(`the agent in the guest exited unexpectedly (${code}); see ${join(logs, 'agent.log')}`);
      void stopAll('agent exit', 1);
    }
  });
  await waitForNode(180_000);
  await waitForCapacity(storageGuest.nodeUUID());
  say(`agent          joined from the guest in ${Math.round(performance.now() - started)} ms; node ${storageGuest.nodeUUID()} manages ${GUEST_DRIVES[0].serial}`);
  say(`               (spare drive ${GUEST_DRIVES[1].serial} can be added: POST /api/v2/nvmeDevices)`);
  if (ports.discovery) say(`discovery      nvme discover -t tcp -a 127.0.0.1 -s ${ports.discovery} -q <host NQN>   (forwarded to the guest)`);
}

/**
 * Polls the volume records: forwards each new volume's port to the guest (guest mode) and
 * prints how a host connects to it.
 */
function watchVolumes(client: Etcd3, inGuest: boolean): NodeJS.Timeout {
  const forwards = inGuest && storageGuest ? new VolumePortForwards(client, (node) => (node === storageGuest!.nodeUUID() ? storageGuest!.guest : undefined)) : undefined;
  const announced = new Set<string>();
  let busy = false;
  let lastError = '';
  let subsystemNQN = '';
  const tick = async () => {
    if (busy || stopping) return;
    busy = true;
    try {
      subsystemNQN ||= parseRecord<ClusterRecord>(keys.cluster(), await client.get(keys.cluster()).string())?.subsystemNQN ?? '';
      await forwards?.sync();
      const volumes = await readVolumePorts(client);
      for (const volume of volumes.values()) {
        if (announced.has(volume.UUID)) continue;
        announced.add(volume.UUID);
        say(`volume         ${volume.name} (${volume.UUID}) on port ${volume.port}${forwards ? ' (forwarded 127.0.0.1 -> guest)' : ''}; once Available a host with nvme-tcp connects with:`);
        say(`               nvme connect -t tcp -a 127.0.0.1 -s ${volume.port} -n ${volumeSubsystemNQN(subsystemNQN, volume.UUID)} -q <host NQN in the volume's ACL>`);
      }
      for (const uuid of [...announced]) if (!volumes.has(uuid)) announced.delete(uuid);
      lastError = '';
    } catch (err) {
      const message = (err as Error).message;
      if (message !== lastError) console.error(`volume watch: ${message}`);
      lastError = message;
    } finally {
      busy = false;
    }
  };
  void tick();
  return setInterval(() => void tick(), 1000);
}

function say(line: string): void {
  process.stdout.write(`${line}\n`);
}

async function loadPorts(file: string): Promise<Ports> {
  // The etcd member's peer URL is stored in its data dir: keep the ports across restarts.
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Ports) : undefined;
  if (kept?.discovery !== undefined) return kept;
  const chosen: Ports = kept ? { ...kept, discovery: await freePort() } : { etcdClient: await freePort(), etcdPeer: await freePort(), grpc: await freePort(), discovery: await freePort() };
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
    // Bounded: a request that reaches a control plane still starting must not hang the launcher.
    return await fetch(`http://127.0.0.1:${apiPort}${path}`, { headers: { Authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) });
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

async function waitForNode(timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const res = await api('/api/v2/nodes');
    if (res?.ok) {
      const body = (await res.json()) as { nodes?: { state: string }[] };
      if (body.nodes?.some((n) => n.state === 'Active')) return;
    }
    await sleep(100);
  }
  throw new Error(`agent did not join in ${timeoutMs / 1000} s; see ${join(logs, 'agent.log')}`);
}

/** A node's devices are reported shortly after it joins; placement counts capacity from them. */
async function waitForCapacity(nodeUUID: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const res = await api(`/api/v2/nodes/${nodeUUID}`);
    if (res?.ok) {
      const node = (await res.json()) as { statistics?: { managedPhysicalStorage?: string } };
      if (BigInt(node.statistics?.managedPhysicalStorage ?? '0') > 0n) return;
    }
    await sleep(250);
  }
  throw new Error(`node ${nodeUUID} reported no capacity in ${timeoutMs / 1000} s; see ${join(logs, 'agent.log')}`);
}

async function stopAll(reason: string, exitCode = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  if (reason !== 'error') say(`\nstopping (${reason})...`);
  if (watcher) clearInterval(watcher);
  // The guest's agent first (revokes its lease), then the guest, the daemons, and etcd. On
  // SIGINT/SIGTERM the e2e lab has already killed the guest by its PID (a power cut for it:
  // md and btrfs come back at the next run, and what hosts flushed is on the drive images).
  await storageGuest?.stop().catch(() => undefined);
  for (const child of [...children].reverse()) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  etcdClient?.close();
  await etcd?.stop();
  say('stopped');
  process.exit(exitCode);
}
