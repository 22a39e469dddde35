// A Strata cluster whose storage servers are QEMU guests: the real agent (dist/agent/main.js)
// runs in a guest booting Debian's kernel (nvmet, md, btrfs) against an etcd and a control plane
// on this host, which the guest reaches at 10.0.2.2. Guests use QEMU user networking only, so a
// volume's TCP port (VolumePlacement.port, the same on every node serving it) is forwarded from
// the host's 127.0.0.1:<port> to the guest that serves it, at runtime through QEMU's monitor.
// Hosts then dial 127.0.0.1:<port> on this machine, or 10.0.2.2:<port> from another guest.
//
// Used by test/e2e/cluster.e2e.test.ts and by `npm run cluster` (tools/local-cluster.ts) on
// machines whose kernel has no NVMe target.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { VolumeRecord } from '../../lib/records.js';
import { repoRoot, startGuest, type Guest, type Lab, type NvmeDriveSpec } from './lab/index.js';
import { linkAddress, type PrivateLinkSpec } from './lab/link.js';
import { tail } from './lab/util.js';
import { GUEST_AGENT_LEASE_ARGS } from './guest-agent.js';
import type { TestEtcd } from '../helpers/etcd.js';
import type { ControlPlaneProcess } from '../helpers/processes.js';

/** Where agents in guests put their pools (guest-local; the node's btrfs is mounted below it). */
const GUEST_POOL_DIR = '/var/lib/strata/pool';
const GUEST_STATE_DIR = '/var/lib/strata/agent';
const GUEST_LOG_DIR = '/var/log/strata';
/** The agents' replication port in guests. */
const GUEST_REPLICATION_PORT = 4421;
/** setTimeout's limit: an agent job lives as long as the guest. */
const FOREVER_MS = 2 ** 31 - 1;

export interface StorageGuestOptions {
  /** Guest name; also the agent's hostname (the server's and node's name in the API). */
  readonly name: string;
  readonly drives: readonly NvmeDriveSpec[];
  /** Serials of the drives the agent's node manages from its creation (--data-devices). */
  readonly dataSerials: readonly string[];
  readonly journalSerial?: string;
  /** Ports on this host's 127.0.0.1 (10.0.2.2 from the guest). */
  readonly etcdPort: number;
  readonly controlPlaneGrpcPort: number;
  /** What the node advertises to hosts: 10.0.2.2 for hosts in other guests, 127.0.0.1 for this machine. */
  readonly advertiseAddress: string;
  /**
   * The agent's discovery controller port, forwarded one to one from the host's 127.0.0.1 (the
   * node advertises advertiseAddress:discoveryPort); distinct per guest. Default: agent default, not forwarded.
   */
  readonly discoveryPort?: number;
  /**
   * The node's replication port (4421 in the guest) forwarded from this host's 127.0.0.1:<port>;
   * the node advertises advertiseAddress:<port> to primaries. Default: not forwarded.
   */
  readonly replicationHostPort?: number;
  /**
   * The address primaries in other guests dial for the replication port (default
   * advertiseAddress): 10.0.2.2 when the node advertises 127.0.0.1 to hosts on this machine.
   */
  readonly replicationAdvertiseAddress?: string;
  /**
   * A second NIC on a private segment between guests (lab/link.ts): the node advertises its
   * replication port (4421) at that address, so primaries in other guests reach their replicas
   * over it and not through QEMU's user network (replicationHostPort is then not needed).
   */
  readonly privateLink?: PrivateLinkSpec;
  /** The volume port range; must equal the control plane's volumePortMin/Max. */
  readonly volumePortMin: number;
  readonly volumePortMax: number;
  /** Host directory for the agent's state (identity), kept across guest boots; default guest-local. */
  readonly agentStateDir?: string;
  /** Host file the agent logs to (its directory is shared with the guest); default the guest's share. */
  readonly agentLogFile?: string;
  /** More agent flags (e.g. --reconcile-interval-seconds 5). */
  readonly agentArgs?: readonly string[];
  readonly memoryMiB?: number;
  readonly cpus?: number;
  readonly logDir?: string;
  readonly lab?: Lab;
  readonly bootTimeoutMs?: number;
}

/**
 * What a timed-out wait shows: any guest kernel's crash first (seen once on 6.12 under TCG: a
 * storage guest's double fault, its volumes failed over; docs/e2e.md, "Stalls"), then each
 * agent's last lines.
 */
export function storageLogs(storage: readonly StorageGuest[], chars = 3000): string {
  return [...storage.flatMap((s) => s.guest.kernelCrash() ?? []), ...storage.map((s) => `--- ${s.name} agent log:\n${s.agentLogTail(chars)}`)].join('\n');
}

export interface StorageGuest {
  readonly name: string;
  readonly guest: Guest;
  /** Host path of the agent's log. */
  readonly agentLogFile: string;
  /** The agent's node, known once the agent wrote its identity (after startAgent()). */
  nodeUUID(): string;
  /**
   * Starts the agent as a background job; resolves once its identity exists. `extraArgs` come
   * after the options' flags (a flag given again there wins, e.g. --lease-ttl-seconds).
   */
  startAgent(options?: { timeoutMs?: number; extraArgs?: readonly string[] }): Promise<void>;
  /** Signals the agent and returns at once (stopAgent() waits for it to go). */
  signalAgent(signal: 'TERM' | 'KILL'): Promise<void>;
  /** Signals the agent and waits until its process is gone. */
  stopAgent(signal?: 'TERM' | 'KILL', timeoutMs?: number): Promise<void>;
  /** Resolves when the agent process started last exits (with its exit code). */
  agentExited(): Promise<number>;
  agentLogTail(chars?: number): string;
  /** Stops the agent (SIGTERM) and powers the guest off. */
  stop(): Promise<void>;
}

/** Boots a storage guest (its agent not started yet). */
export async function startStorageGuest(options: StorageGuestOptions): Promise<StorageGuest> {
  const shares = [];
  if (options.agentStateDir) shares.push({ hostDir: options.agentStateDir, guestPath: GUEST_STATE_DIR });
  if (options.agentLogFile) shares.push({ hostDir: dirname(options.agentLogFile), guestPath: GUEST_LOG_DIR });
  const guest = await startGuest({
    name: options.name,
    nvmeDrives: options.drives,
    hostForwards: [
      ...(options.discoveryPort ? [{ hostPort: options.discoveryPort, guestPort: options.discoveryPort }] : []),
      ...(options.replicationHostPort ? [{ hostPort: options.replicationHostPort, guestPort: GUEST_REPLICATION_PORT }] : []),
    ],
    shares,
    ...(options.privateLink ? { privateLink: options.privateLink } : {}),
    memoryMiB: options.memoryMiB ?? 1024,
    cpus: options.cpus ?? 1,
    ...(options.logDir ? { logDir: options.logDir } : {}),
    ...(options.lab ? { lab: options.lab } : {}),
    ...(options.bootTimeoutMs ? { bootTimeoutMs: options.bootTimeoutMs } : {}),
  });
  const agentLogFile = options.agentLogFile ?? join(guest.shareDir, 'agent.log');
  const guestLogFile = options.agentLogFile ? `${GUEST_LOG_DIR}/${basename(options.agentLogFile)}` : `${guest.guestShareDir}/agent.log`;
  const pidFile = '/run/strata-agent.pid';
  const host = guest.hostAddressFromGuest;
  const args = [
    '--etcd-endpoints', `${host}:${options.etcdPort}`,
    '--control-plane-endpoints', `${host}:${options.controlPlaneGrpcPort}`,
    '--state-dir', GUEST_STATE_DIR,
    '--pool-dir', GUEST_POOL_DIR,
    '--hostname', options.name,
    '--advertise-address', options.advertiseAddress,
    '--volume-port-min', String(options.volumePortMin),
    '--volume-port-max', String(options.volumePortMax),
    ...(options.dataSerials.length > 0 ? ['--data-devices', options.dataSerials.join(',')] : []),
    ...(options.journalSerial ? ['--journal-device', options.journalSerial] : []),
    ...(options.discoveryPort ? ['--discovery-port', String(options.discoveryPort)] : []),
    ...(options.privateLink
      ? ['--replication-port', String(GUEST_REPLICATION_PORT), '--replication-advertise-endpoint', `${linkAddress(options.privateLink.address)}:${GUEST_REPLICATION_PORT}`]
      : options.replicationHostPort
      ? ['--replication-port', String(GUEST_REPLICATION_PORT), '--replication-advertise-endpoint', `${options.replicationAdvertiseAddress ?? options.advertiseAddress}:${options.replicationHostPort}`]
      : []),
    ...GUEST_AGENT_LEASE_ARGS,
    ...(options.agentArgs ?? []),
  ];
  let node = '';
  let exited: Promise<number> = Promise.resolve(0);
  let running = false;

  const agentRunning = async () => (await guest.run(['sh', '-c', `kill -0 "$(cat ${pidFile} 2>/dev/null)" 2>/dev/null`], { timeoutMs: 15_000 })).code === 0;

  const storageGuest: StorageGuest = {
    name: options.name,
    guest,
    agentLogFile,
    nodeUUID() {
      if (!node) throw new Error(`${options.name}: the agent has not started`);
      return node;
    },
    async startAgent({ timeoutMs = 120_000, extraArgs = [] } = {}) {
      if (running) throw new Error(`${options.name}: the agent is already running`);
      // The guest's clock from this host's: a guest came up 15 s ahead under load (TCG), and the
      // control plane refuses agent tokens issued in its future (beyond a 5 s tolerance).
      await guest.runOk(['date', '-u', '-s', `@${(Date.now() / 1000).toFixed(3)}`], { timeoutMs: 15_000 });
      running = true;
      // As systemd runs it (systemd/strata-agent.service): the exit fence after the agent process
      // ends, however it ended, on the agent's state dir. The pid file holds node's pid (the
      // background job's, a simple command the forked shell execs), so stopAgent's signal reaches
      // the agent itself, never the shell; the job ends (and stopAgent returns) only after the
      // fence ran. The agent's exit status is the job's.
      const runner = `node "$0" "$@" >> "$LOG" 2>&1 & agent=$!; echo $agent > ${pidFile}; wait $agent; rc=$?; sh "$EXIT_FENCE" ${GUEST_STATE_DIR} >> "$LOG" 2>&1; exit $rc`;
      exited = guest
        .run(['sh', '-c', runner, `${repoRoot}/dist/agent/main.js`, ...args, ...extraArgs], {
          timeoutMs: FOREVER_MS,
          env: { LOG: guestLogFile, EXIT_FENCE: `${repoRoot}/systemd/strata-agent-exit-fence` },
        })
        .then((r) => r.code, () => -1)
        .finally(() => {
          running = false;
        });
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        // A look that times out (a starved guest under TCG: seen at load 23) is only a look; the deadline bounds the wait.
        const identity = await guest.run(['cat', `${GUEST_STATE_DIR}/identity.json`], { timeoutMs: 15_000 }).catch(() => undefined);
        if (identity?.code === 0 && identity.stdout.trim() !== '') {
          node = (JSON.parse(identity.stdout) as { nodeUUIDs: string[] }).nodeUUIDs[0] ?? '';
          if (node) return;
        }
        if (!running) throw new Error(`${options.name}: the agent exited while starting; log:\n${storageGuest.agentLogTail()}`);
        if (Date.now() > deadline) throw new Error(`${options.name}: no agent identity after ${timeoutMs} ms; log:\n${storageGuest.agentLogTail()}`);
        await sleep(250);
      }
    },
    async signalAgent(signal) {
      await guest.run(['sh', '-c', `kill -${signal} "$(cat ${pidFile})"`], { timeoutMs: 15_000 });
    },
    async stopAgent(signal = 'TERM', timeoutMs = 60_000) {
      if (!running) return;
      await storageGuest.signalAgent(signal);
      const deadline = Date.now() + timeoutMs;
      while (running || (await agentRunning())) {
        if (Date.now() > deadline) throw new Error(`${options.name}: the agent did not exit within ${timeoutMs} ms after SIG${signal}`);
        await sleep(250);
      }
    },
    agentExited: () => exited,
    agentLogTail(chars = 3000) {
      try {
        return tail(readFileSync(agentLogFile, 'utf8'), chars);
      } catch {
        return '(no agent log)';
      }
    },
    async stop() {
      await storageGuest.stopAgent('TERM', 30_000).catch(() => undefined);
      await guest.stop();
    },
  };
  return storageGuest;
}

/** What a forward needs to know about a volume. */
export interface VolumePortPlacement {
  readonly UUID: string;
  readonly name: string;
  readonly port: number;
  /** The node hosts should reach: the primary at placement (a replica set's current primary is in its own record). */
  readonly nodeUUID: string;
  /** Every node holding a copy (each serves the volume's port). */
  readonly nodeList: readonly string[];
}

/** Every placed volume's port and primary node, from etcd (VolumePlacement of the volume records). */
export async function readVolumePorts(etcd: Etcd3): Promise<Map<string, VolumePortPlacement>> {
  const records = await etcd.getAll().prefix(keys.volumesPrefix()).strings();
  const ports = new Map<string, VolumePortPlacement>();
  for (const value of Object.values(records)) {
    const record = JSON.parse(value) as VolumeRecord;
    if (record.placement && record.placement.port > 0) ports.set(record.UUID, { UUID: record.UUID, name: record.name, port: record.placement.port, nodeUUID: record.placement.primaryNodeUUID, nodeList: record.placement.nodeList });
  }
  return ports;
}

/** One forward of a volume's port: 127.0.0.1:hostPort → the node's guest, at the volume's port. */
export interface VolumePath {
  readonly nodeUUID: string;
  readonly hostPort: number;
}

/** The default: the volume's own port, forwarded to its primary at placement. */
const primaryPath = (volume: VolumePortPlacement): VolumePath[] => [{ nodeUUID: volume.nodeUUID, hostPort: volume.port }];

/**
 * Keeps 127.0.0.1:<host port> forwarded to the guests serving each volume: by default the
 * volume's own port to its primary; with `pathsOf`, any paths (one per node holding a copy, on
 * distinct host ports, as `npm run cluster -- --nodes N` does). sync() adds missing forwards,
 * moves ones whose volume moved or whose guest was booted again, and removes those of deleted
 * volumes (a port may be handed to a new volume on another node afterwards).
 */
export class VolumePortForwards {
  private readonly current = new Map<number, { guest: Guest; guestPort: number }>();

  constructor(
    private readonly etcd: Etcd3,
    /** The storage guest of a node, undefined for nodes not in a guest. */
    private readonly guestOfNode: (nodeUUID: string) => Guest | undefined,
    private readonly pathsOf: (volume: VolumePortPlacement) => readonly VolumePath[] = primaryPath,
  ) {}

  /** Applies the forwards the volumes in etcd need; returns the volumes whose forwards it added. */
  async sync(): Promise<VolumePortPlacement[]> {
    const desired = new Map<number, { guest: Guest; volume: VolumePortPlacement }>();
    for (const volume of (await readVolumePorts(this.etcd)).values()) {
      for (const path of this.pathsOf(volume)) {
        const guest = this.guestOfNode(path.nodeUUID);
        if (guest) desired.set(path.hostPort, { guest, volume });
      }
    }
    for (const [hostPort, { guest, guestPort }] of [...this.current]) {
      const want = desired.get(hostPort);
      if (want?.guest === guest && want.volume.port === guestPort) continue;
      await guest.removeHostForward(hostPort).catch(() => undefined); // a stopped guest forwards nothing
      this.current.delete(hostPort);
    }
    const added = new Map<string, VolumePortPlacement>();
    for (const [hostPort, { guest, volume }] of desired) {
      if (this.current.has(hostPort)) continue;
      await guest.addHostForward(hostPort, volume.port);
      this.current.set(hostPort, { guest, guestPort: volume.port });
      added.set(volume.UUID, volume);
    }
    return [...added.values()];
  }

  /** The host ports forwarded now. */
  ports(): number[] {
    return [...this.current.keys()].sort((a, b) => a - b);
  }
}

/**
 * True when this machine's kernel has the NVMe/TCP target (the agent can serve from the host).
 * Loads the modules first, as the agent does; their absence is the answer, not an error.
 */
export async function hostHasNvmet(run: (file: string, args: string[]) => Promise<unknown>): Promise<boolean> {
  for (const module of ['nvmet', 'nvmet-tcp']) await run('modprobe', [module]).catch(() => undefined);
  return existsSync('/sys/kernel/config/nvmet') && existsSync('/sys/module/nvmet_tcp');
}

/**
 * The end of a suite's host side: the control plane's log kept in `logDir`, the control plane,
 * the etcd client and etcd stopped, and the suite's timings and log location printed.
 */
export async function stopHostSide(options: { plane?: ControlPlaneProcess; client?: Etcd3; etcd?: TestEtcd; logDir: string; suite: string; timings: readonly string[] }): Promise<void> {
  const { plane, logDir } = options;
  if (plane) {
    mkdirSync(logDir, { recursive: true });
    writeFileSync(join(logDir, `control-plane.${process.pid}.log`), plane.logs.map((l) => JSON.stringify(l)).join('\n'));
    await plane.stop();
    rmSync(plane.stateDir, { recursive: true, force: true });
  }
  options.client?.close();
  await options.etcd?.stop();
  console.log(`# ${options.suite} e2e timings: ${options.timings.join(', ')}`);
  console.log(`# logs: ${logDir} (*.${process.pid}.*)`);
}
