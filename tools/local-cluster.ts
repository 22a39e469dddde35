// `npm run cluster -- [--home DIR] [--api-port PORT] [--agent auto|host|guest] [--nodes N]`: a
// working Strata cluster on this one machine, in the foreground: etcd, a control plane and N
// storage nodes (default 1). State and logs live under DIR (default ~/.strata-cluster), so a
// second run picks up the same cluster. The admin token lands in DIR/admin.jwt. Ctrl-C (SIGINT)
// or SIGTERM stops everything it started.
//
// The agent serves volumes through the kernel NVMe target. With one node, where this machine's
// kernel has it, the agent runs here; where it does not, and always with N > 1 (one kernel target
// cannot be several nodes), each node is a QEMU guest booting Debian's kernel with emulated NVMe
// drives (the e2e lab, test/e2e/cluster-lab.ts), whose drive images and agent state stay under
// DIR/guest (node 1) and DIR/guest-<n> (node n). Each node's replication port is forwarded from
// this host and advertised to the other nodes as 10.0.2.2:<port>. A volume's port is the same on
// every node, so hosts on this machine reach node n's path at 127.0.0.1:<port + (n-1) * stride>,
// where stride is the width of the volume port range (node 1: the port itself). The launcher
// prints each node's name, UUID and QEMU PID; a guest killed by hand is reported and booted again
// with its drives (its volumes fail over meanwhile, and its copies resync when it is back).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command, Option } from 'commander';
import type { Etcd3 } from 'etcd3';
import { stopChild } from '../lib/child-process.js';
import { send } from '../lib/http-transport.js';
import { volumeSubsystemNQN } from '../lib/contract/nqn.js';
import { createEtcdClient, parseRecord } from '../lib/etcd/client.js';
import { keys } from '../lib/etcd/keys.js';
import { startLocalEtcd, type LocalEtcd } from '../lib/etcd/local-etcd.js';
import { packageRoot } from '../lib/paths.js';
import { freePort } from '../lib/ports.js';
import type { ClusterRecord, ReplicaSetRecord } from '../lib/records.js';
import { hostHasNvmet, readVolumePorts, startStorageGuest, VolumePortForwards, type StorageGuest, type StorageGuestOptions, type VolumePortPlacement } from '../test/e2e/cluster-lab.js';
import { DEFAULT_KERNEL_SUITE, execArgv, installPackages, labKernelSuite, prepareLab, type Lab } from '../test/e2e/lab/index.js';

/** Host ports of one guest node (node 1's discovery port is `Ports.discovery`, kept from earlier homes). */
interface NodePorts {
  discovery: number;
  /** Forwarded to the guest's replication port (4421). */
  replication: number;
}

interface Ports {
  etcdClient: number;
  etcdPeer: number;
  grpc: number;
  /** Node 1's discovery controller, forwarded from 127.0.0.1 (added later: may be absent). */
  discovery?: number;
  /** Node 1's replication port forward (added with --nodes: may be absent). */
  replication?: number;
  /** Nodes 2..N (added with --nodes: may be absent or shorter). */
  moreNodes?: NodePorts[];
  /** The control plane's and agents' volume port range (absent in homes made before --nodes: 20000-31999). */
  volumePorts?: { min: number; max: number };
}

/** The volume port range of homes made before --nodes (kept: their volumes hold these ports). */
const OLD_VOLUME_PORTS = { min: 20000, max: 31999 };
/** New homes: 5000 volume ports, so that nodes 2..9 get their own host port windows above. */
const NEW_VOLUME_PORTS = { min: 20000, max: 24999 };
const DRIVE_MIB = 16 * 1024;

const program = new Command('strata-cluster')
  .description('Start a local Strata cluster (etcd, control plane, N storage nodes) in the foreground')
  .option('--home <dir>', 'directory for all state and logs', join(homedir(), '.strata-cluster'))
  .option('--api-port <port>', 'port of the REST API on 127.0.0.1', '8080')
  .option('--nodes <n>', 'storage nodes to start (more than 1: each is a QEMU guest)', '1')
  .addOption(
    new Option('--agent <where>', 'where the agent runs: on this host, in a QEMU guest, or auto (the host when its kernel has nvmet); --nodes above 1 needs guest or auto')
      .choices(['auto', 'host', 'guest'])
      .default('auto'),
  )
  .option('--kernel-suite <suite>', `Debian suite whose kernel the guests boot (bookworm: Debian 12's 6.1); also $STRATA_E2E_KERNEL_SUITE`, process.env['STRATA_E2E_KERNEL_SUITE'] || DEFAULT_KERNEL_SUITE)
  .parse();
const options = program.opts<{ home: string; apiPort: string; agent: 'auto' | 'host' | 'guest'; nodes: string; kernelSuite: string }>();
try {
  process.env['STRATA_E2E_KERNEL_SUITE'] = labKernelSuite(options.kernelSuite); // what prepareLab() boots
} catch (error) {
  fail(`--kernel-suite: ${(error as Error).message}`);
}
const home = resolve(options.home);
const apiPort = Number(options.apiPort);
const nodeCount = Number(options.nodes);
if (!Number.isInteger(apiPort) || apiPort < 1 || apiPort > 65535) fail(`--api-port must be a port number, got ${options.apiPort}`);
if (!Number.isInteger(nodeCount) || nodeCount < 1) fail(`--nodes must be a positive integer, got ${options.nodes}`);
if (nodeCount > 1 && options.agent === 'host') fail('--agent host runs one node on this host: one kernel NVMe target cannot be several nodes; use --agent guest or auto with --nodes above 1');

const logs = join(home, 'logs');
mkdirSync(logs, { recursive: true });
const ports = await loadPorts(join(home, 'ports.json'), nodeCount);
const volumePorts = ports.volumePorts!;
/** Node n's window of host ports for volume paths starts this far above node n-1's. */
const stride = volumePorts.max - volumePorts.min + 1;
if (volumePorts.min + nodeCount * stride - 1 > 65535) {
  fail(`--nodes ${nodeCount}: each node needs its own window of ${stride} host ports for volume paths above ${volumePorts.min}; at most ${Math.floor((65536 - volumePorts.min) / stride)} nodes with this home`);
}
const children: ChildProcess[] = [];
let etcd: LocalEtcd | undefined;
let etcdClient: Etcd3 | undefined;
/** The guest nodes (empty when the agent runs on this host). */
const nodes: GuestNode[] = [];
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
    '--volume-port-min', String(volumePorts.min), '--volume-port-max', String(volumePorts.max),
  ]);
  await waitForApi(controlPlane);
  say(`control plane  https://127.0.0.1:${apiPort}/api/v2  (gRPC over TLS 127.0.0.1:${ports.grpc})`);
  say(`cluster CA     ${caPath()}  (the API's and the agents' channel's certificates are signed by it)`);

  const run = (file: string, args: string[]) => execArgv(file, args, { timeoutMs: 30_000 });
  const inGuest = nodeCount > 1 || options.agent === 'guest' || (options.agent === 'auto' && !(await hostHasNvmet(run)));
  etcdClient = createEtcdClient([etcd.endpoint]);
  if (inGuest) {
    await startGuestNodes();
  } else {
    daemon('agent', [
      '--etcd-endpoints', etcd.endpoint,
      '--control-plane-endpoints', `127.0.0.1:${ports.grpc}`,
      '--state-dir', join(home, 'agent'),
      '--volume-port-min', String(volumePorts.min), '--volume-port-max', String(volumePorts.max),
    ]);
    await waitForNodes(() => true, 1);
    say('agent          joined (on this host, serving through its kernel NVMe target)');
  }
  watcher = watchVolumes(etcdClient, inGuest);
  say('');
  say(`admin token    ${join(home, 'admin.jwt')}`);
  say(`try            curl -s --cacert ${caPath()} -H "Authorization: Bearer $(cat ${join(home, 'admin.jwt')})" https://127.0.0.1:${apiPort}/api/v2/cluster`);
  say(`cli            STRATA_ENDPOINT=https://127.0.0.1:${apiPort} STRATA_CA_FILE=${caPath()} STRATA_TOKEN=$(cat ${join(home, 'admin.jwt')}) npm run --silent cli -- cluster info`);
  say(`logs           ${logs}/`);
  say('Ctrl-C stops the cluster; run the same command again to resume it.');
} catch (err) {
  console.error(`local cluster failed to start: ${(err as Error).message}`);
  await stopAll('error', 1);
}

/** A storage node in a QEMU guest, booted again with the same options when its guest dies. */
interface GuestNode {
  /** 1-based, as printed. */
  readonly index: number;
  readonly options: StorageGuestOptions;
  storage?: StorageGuest;
  uuid: string;
}

/** Node n's name, directories and drive serials (node 1 keeps the single-node layout of earlier homes). */
function guestNodeOptions(index: number, lab: Lab): StorageGuestOptions {
  const suffix = index === 1 ? '' : `-${index}`;
  const tag = index === 1 ? 'LOCAL' : `LOCAL${index}`;
  const dir = join(home, `guest${suffix}`);
  mkdirSync(dir, { recursive: true });
  const nodePorts: NodePorts = index === 1 ? { discovery: ports.discovery!, replication: ports.replication! } : ports.moreNodes![index - 2]!;
  const drives = [`STRATA-${tag}-DATA0`, `STRATA-${tag}-SPARE0`];
  return {
    name: `strata-local${suffix}`,
    drives: drives.map((serial) => ({ serial, sizeMiB: DRIVE_MIB, image: join(dir, `${serial}.img`) })),
    dataSerials: [drives[0]!],
    etcdPort: ports.etcdClient,
    controlPlaneGrpcPort: ports.grpc,
    // Hosts on this machine dial 127.0.0.1:<volume port> (node 1) or the node's window, forwarded to the guest.
    advertiseAddress: '127.0.0.1',
    discoveryPort: nodePorts.discovery,
    // Primaries in other guests dial 10.0.2.2:<forward> to reach this node's replication port.
    replicationHostPort: nodePorts.replication,
    replicationAdvertiseAddress: '10.0.2.2',
    volumePortMin: volumePorts.min,
    volumePortMax: volumePorts.max,
    agentStateDir: join(dir, 'agent'),
    agentLogFile: join(logs, `agent${suffix}.log`),
    // An emulated guest starves for seconds when this machine is busy: the 5 s lease meant for
    // real servers would fence it and fail its volumes over for nothing (docs/replication.md).
    agentArgs: ['--reconcile-interval-seconds', '10', '--lease-ttl-seconds', '20'],
    memoryMiB: 1024,
    // Two vCPUs for a lone node; one each when several share this machine's cores.
    cpus: nodeCount === 1 ? 2 : 1,
    logDir: join(logs, 'guest'),
    lab,
    bootTimeoutMs: 240_000,
  };
}

/**
 * The nodes in QEMU guests: their drive images and identities live under DIR/guest*, so a second
 * run boots the same servers with the same md arrays and btrfs. Volume ports are forwarded as
 * volumes appear (watchVolumes).
 */
async function startGuestNodes(): Promise<void> {
  if (nodeCount === 1) say('agent          this kernel has no NVMe target (nvmet): running the agent in a QEMU guest');
  else say(`nodes          ${nodeCount} storage nodes, each a QEMU guest running the agent`);
  say('               booting Debian\'s kernel with emulated NVMe drives (docs/e2e.md)');
  let started = performance.now();
  const added = await installPackages();
  if (added.length > 0) say(`               installed ${added.join(' ')}`);
  const lab = await prepareLab();
  say(`               lab ready: kernel ${lab.kernel.release} (${Math.round(performance.now() - started)} ms)`);
  started = performance.now();
  for (let index = 1; index <= nodeCount; index++) nodes.push({ index, options: guestNodeOptions(index, lab), uuid: '' });
  await Promise.all(nodes.map((node) => bootNode(node)));
  await waitForNodes((uuid) => nodes.some((n) => n.uuid === uuid), nodeCount, 240_000);
  for (const node of nodes) await waitForCapacity(node.uuid);
  say(`               joined in ${Math.round(performance.now() - started)} ms`);
  for (const node of nodes) {
    say(`node ${String(node.index).padEnd(10)}${node.options.name.padEnd(16)} ${node.uuid}  QEMU pid ${node.storage!.guest.pid}  (manages ${node.options.dataSerials[0]}; spare ${node.options.drives[1]!.serial})`);
  }
  say(`               kill -9 <QEMU pid> cuts a node's power: its volumes fail over to an in-sync copy (the launcher prints it), then it boots again`);
  say('               with its drives and its copies resync; spare drives can be added with POST /api/v2/nvmeDevices');
  for (const node of nodes) {
    say(`discovery      nvme discover -t tcp -a 127.0.0.1 -s ${node.options.discoveryPort} -q <host NQN>   (${node.options.name}, forwarded to its guest)`);
  }
}

/** Boots a node's guest and starts its agent; when the guest or agent dies unexpectedly, says so and starts it again. */
async function bootNode(node: GuestNode): Promise<void> {
  const storage = await startStorageGuest(node.options);
  node.storage = storage;
  const { name } = node.options;
  let guestDown = false;
  void storage.guest.exited.then(({ code, signal }) => {
    guestDown = true;
    if (stopping) return;
    say(`node ${node.index}: ${name} (${node.uuid}) lost: its QEMU (pid ${storage.guest.pid}) exited (${signal ?? code}); booting it again with its drives`);
    void rebootNode(node);
  });
  await storage.startAgent({ timeoutMs: 240_000 });
  if (node.uuid && storage.nodeUUID() !== node.uuid) throw new Error(`${name}: came back as node ${storage.nodeUUID()}, not ${node.uuid}`);
  node.uuid = storage.nodeUUID();
  watchAgent(node, storage, () => guestDown);
}

function watchAgent(node: GuestNode, storage: StorageGuest, guestDown: () => boolean): void {
  void storage.agentExited().then(async (code) => {
    await sleep(2000); // a guest that died takes its agent with it: that is reported above
    if (stopping || guestDown() || node.storage !== storage) return;
    say(`node ${node.index}: ${node.options.name}'s agent exited (${code}); see ${storage.agentLogFile}; starting it again`);
    try {
      await storage.startAgent({ timeoutMs: 240_000 });
      watchAgent(node, storage, guestDown);
    } catch (err) {
      console.error(`node ${node.index}: ${(err as Error).message}`);
      void stopAll('agent exit', 1);
    }
  });
}

async function rebootNode(node: GuestNode): Promise<void> {
  try {
    await bootNode(node);
    if (!stopping) say(`node ${node.index}: ${node.options.name} (${node.uuid}) is back: QEMU pid ${node.storage!.guest.pid}`);
  } catch (err) {
    if (stopping) return;
    console.error(`node ${node.index}: ${node.options.name} did not come back: ${(err as Error).message}`);
    void stopAll('node lost', 1);
  }
}

/** Host port of node n's path to a volume port: the port itself for node 1, then one window per node. */
function hostPortOf(port: number, nodeIndex: number): number {
  return port + (nodeIndex - 1) * stride;
}

/**
 * Polls the volume records and replica sets: forwards each copy's port to its node's guest
 * (guest mode), prints how a host on this machine connects one path per node, and says when a
 * volume's paths, primary or in-sync copies change, or it is deleted.
 */
function watchVolumes(client: Etcd3, inGuest: boolean): NodeJS.Timeout {
  const nodeByUUID = (uuid: string) => nodes.find((n) => n.uuid === uuid);
  const pathsOf = (volume: VolumePortPlacement) =>
    volume.nodeList.flatMap((uuid) => {
      const node = nodeByUUID(uuid);
      return node ? [{ nodeUUID: uuid, hostPort: hostPortOf(volume.port, node.index) }] : [];
    }).sort((a, b) => a.hostPort - b.hostPort);
  const forwards = inGuest ? new VolumePortForwards(client, (uuid) => nodeByUUID(uuid)?.storage?.guest, pathsOf) : undefined;
  const nameOf = (uuid: string) => nodeByUUID(uuid)?.options.name ?? uuid;
  /** What was last printed per volume: its paths, and its replica set's state. */
  const announced = new Map<string, { paths: string; set: string; name: string }>();
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
      const sets = new Map<string, ReplicaSetRecord>();
      for (const value of Object.values(await client.getAll().prefix(keys.replicaSetsPrefix()).strings())) {
        const set = JSON.parse(value) as ReplicaSetRecord;
        sets.set(set.volumeUUID, set);
      }
      for (const volume of volumes.values()) {
        const paths = inGuest ? pathsOf(volume) : [{ nodeUUID: volume.nodeUUID, hostPort: volume.port }];
        const set = sets.get(volume.UUID);
        const seen = announced.get(volume.UUID);
        const pathsKey = paths.map((p) => `${p.nodeUUID}:${p.hostPort}`).join(',');
        const setKey = set ? `${set.epoch}|${set.primaryNodeUUID}|${[...set.inSync].sort().join(',')}` : '';
        if (seen?.paths !== pathsKey) {
          const copies = volume.nodeList.length;
          say(`volume         ${volume.name} (${volume.UUID}), port ${volume.port}${copies > 1 ? `, ${copies} copies` : ''}${forwards ? ' (forwarded 127.0.0.1 -> guest)' : ''}; once Available a host with nvme-tcp on this machine connects${paths.length > 1 ? ' one path per node' : ''} with:`);
          for (const path of paths) {
            const label = inGuest ? `   # ${nameOf(path.nodeUUID)}` : '';
            say(`               nvme connect -t tcp -a 127.0.0.1 -s ${path.hostPort} -n ${volumeSubsystemNQN(subsystemNQN, volume.UUID)} -q <host NQN in the volume's ACL>${label}`);
          }
        }
        if (set && seen?.set !== setKey) {
          say(`volume         ${volume.name}: primary ${nameOf(set.primaryNodeUUID)} (epoch ${set.epoch}), in sync: ${set.inSync.map(nameOf).join(', ') || 'none'}${set.reason ? ` (${set.reason})` : ''}`);
        }
        announced.set(volume.UUID, { paths: pathsKey, set: setKey, name: volume.name });
      }
      for (const [uuid, seen] of [...announced]) {
        if (volumes.has(uuid)) continue;
        announced.delete(uuid);
        say(`volume         ${seen.name} (${uuid}) deleted${forwards ? ': its forwards are removed' : ''}`);
      }
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

function fail(message: string): never {
  console.error(message);
  process.exit(2);
}

/**
 * The ports this home uses, kept across runs (the etcd member's peer URL is stored in its data
 * dir, hosts keep connecting to the same volume paths); ports a new option needs are added.
 */
async function loadPorts(file: string, nodeCount: number): Promise<Ports> {
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Ports) : undefined;
  const chosen: Ports = kept ? { ...kept } : { etcdClient: await freePort(), etcdPeer: await freePort(), grpc: await freePort(), volumePorts: NEW_VOLUME_PORTS };
  chosen.volumePorts ??= OLD_VOLUME_PORTS;
  chosen.discovery ??= await freePort();
  chosen.replication ??= await freePort();
  const more = [...(chosen.moreNodes ?? [])];
  while (more.length < nodeCount - 1) more.push({ discovery: await freePort(), replication: await freePort() });
  chosen.moreNodes = more;
  if (JSON.stringify(chosen) !== JSON.stringify(kept)) writeFileSync(file, JSON.stringify(chosen, null, 2));
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

/** The cluster CA the control plane writes to its state directory (this home). */
function caPath(): string {
  return join(home, 'ca.pem');
}

async function api(path: string): Promise<Response | undefined> {
  const token = adminToken();
  if (!token || !existsSync(caPath())) return undefined;
  try {
    // Bounded: a request that reaches a control plane still starting must not hang the launcher.
    // Verified against the cluster CA, as any client should.
    return await send(`https://127.0.0.1:${apiPort}${path}`, { method: 'GET', headers: { Authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) }, { ca: readFileSync(caPath(), 'utf8') });
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

/** Waits until `count` nodes that `ours` accepts are Active in the API. */
async function waitForNodes(ours: (uuid: string) => boolean, count: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const res = await api('/api/v2/nodes');
    if (res?.ok) {
      const body = (await res.json()) as { nodes?: { UUID: string; state: string }[] };
      if ((body.nodes ?? []).filter((n) => n.state === 'Active' && ours(n.UUID)).length >= count) return;
    }
    await sleep(250);
  }
  throw new Error(`${count === 1 ? 'the agent' : `${count} agents`} did not join in ${timeoutMs / 1000} s; see ${logs}/agent*.log`);
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
  // The guests' agents first (each hands its volumes over and revokes its lease), then the
  // guests, the daemons, and etcd. On SIGINT/SIGTERM the e2e lab has already killed the guests
  // by their PIDs (a power cut for them: md and btrfs come back at the next run, and what hosts
  // flushed is on the drive images).
  await Promise.all(nodes.map((node) => node.storage?.stop().catch(() => undefined)));
  for (const child of [...children].reverse()) await stopChild(child, 10_000);
  etcdClient?.close();
  await etcd?.stop();
  say('stopped');
  process.exit(exitCode);
}
