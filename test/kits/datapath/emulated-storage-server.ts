// Test support: a storage server whose agent is the real one (startAgent) with its data path
// driving an nvmet tree in a temp directory and a file pool (emulated-datapath.ts), its NVMe
// device in a fake sysfs. Integration tests start several against a real control plane and etcd.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agentSettings, resolveAgentConfig } from '../../../agent/config.js';
import { startAgent, type RunningAgent } from '../../../agent/agent.js';
import { FilePool } from '../../../agent/datapath/pool/storage-pool.js';
import { loadConfig } from '../../../lib/config.js';
import type { DataPathParts } from '../../../agent/datapath/datapath.js';
import type { Logger } from '../../../lib/logger.js';
import { removeDir, spawnDaemon, type DaemonProcess } from '../../helpers/processes.js';
import { silentLogger } from '../../helpers/silent-logger.js';
import { createFakeSysfs, type FakeSysfs } from '../../helpers/sysfs-fixture.js';
import { emulatedDataPath } from './emulated-datapath.js';

const GiB = 1024n ** 3n;

export interface EmulatedStorageServer {
  readonly hostname: string;
  readonly sysfs: FakeSysfs;
  readonly stateDir: string;
  readonly nvmetRoot: string;
  readonly poolDir: string;
  agent?: RunningAgent;
}

/** A server with one 200 GiB NVMe device `<hostname>-SN0`, its directories in the temp dir. */
export function createEmulatedStorageServer(hostname: string): EmulatedStorageServer {
  const sysfs = createFakeSysfs();
  sysfs.addController({ name: 'nvme0', serial: `${hostname}-SN0`, namespaces: [{ name: 'nvme0n1', sectors: (200n * GiB) / 512n }] });
  return {
    hostname,
    sysfs,
    stateDir: mkdtempSync(join(tmpdir(), `strata-${hostname}-`)),
    nvmetRoot: mkdtempSync(join(tmpdir(), `strata-nvmet-${hostname}-`)),
    poolDir: mkdtempSync(join(tmpdir(), `strata-pool-${hostname}-`)),
  };
}

/** The agent's flags for `server` (the same in-process and in a process of its own). */
function emulatedAgentArgv(server: EmulatedStorageServer, etcdEndpoint: string, grpcEndpoint: string): string[] {
  return [
    '--etcd-endpoints', etcdEndpoint,
    '--control-plane-endpoints', grpcEndpoint,
    '--state-dir', server.stateDir,
    '--sysfs-root', server.sysfs.root,
    '--mounts-path', server.sysfs.mountsPath,
    '--swaps-path', server.sysfs.swapsPath,
    '--hostname', server.hostname,
    '--data-devices', `${server.hostname}-SN0`,
    '--lease-ttl-seconds', '2',
    '--pool-dir', server.poolDir,
    // No host test listens on 0.0.0.0:8009: a free loopback port.
    '--discovery-port', '0', '--discovery-listen-address', '127.0.0.1',
  ];
}

/** The emulated data path of a server: its nvmet tree and a file pool per node under its pool directory. */
export function emulatedServerDataPath(nvmetRoot: string, poolDir: string, logger: Logger): DataPathParts {
  return emulatedDataPath({
    nvmetRoot,
    openPool: (nodeUUID, cluster) => FilePool.open({ dir: join(poolDir, nodeUUID), clusterUUID: cluster.clusterUUID, logger }),
  });
}

/** Starts (or starts again) the server's agent and waits until it is ready. */
export async function startEmulatedAgent(server: EmulatedStorageServer, etcdEndpoint: string, grpcEndpoint: string): Promise<RunningAgent> {
  const config = resolveAgentConfig(loadConfig(agentSettings, { program: 'strata-agent', summary: 'test', env: {}, argv: emulatedAgentArgv(server, etcdEndpoint, grpcEndpoint) }));
  const logger = silentLogger(server.hostname);
  server.agent = await startAgent(config, logger, { dataPath: emulatedServerDataPath(server.nvmetRoot, server.poolDir, logger) });
  await server.agent.ready;
  return server.agent;
}

/**
 * Starts the server's agent in a process of its own (emulated-agent-main.ts: the real agent, the
 * same emulated data path), so that a test can SIGKILL it; waits until it is ready. Its JSON log
 * is the process's `logs`.
 */
export async function spawnEmulatedAgent(server: EmulatedStorageServer, etcdEndpoint: string, grpcEndpoint: string): Promise<DaemonProcess> {
  const agent = spawnDaemon('test/kits/datapath/emulated-agent-main.js', [server.nvmetRoot, ...emulatedAgentArgv(server, etcdEndpoint, grpcEndpoint), '--log-level', 'debug']);
  try {
    await agent.waitForLog((r) => r['msg'] === 'strata-agent ready', 60_000);
  } catch (err) {
    await agent.kill();
    throw err;
  }
  return agent;
}

/** Stops the agent and removes the server's directories. */
export async function removeEmulatedStorageServer(server: EmulatedStorageServer): Promise<void> {
  await server.agent?.stop();
  server.sysfs.cleanup();
  for (const dir of [server.stateDir, server.nvmetRoot, server.poolDir]) removeDir(dir);
}
