// Builds the data path of an agent: finds the kernel NVMe target (or decides there is none),
// opens one storage pool per node, and wires the reconciler. agent/agent.ts calls
// createDataPath; tests pass DataPathTestOptions through startAgent to run it on a plain
// directory instead of configfs.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { Logger } from '../../lib/logger.js';
import type { NodeRecord } from '../../lib/records.js';
import { prepareBtrfsMdPool } from './btrfs-md-pool.js';
import { SsConnectedHostsProbe, type ConnectedHostsProbe } from './connected-hosts.js';
import { DataPathState } from './datapath-state.js';
import type { ClusterFacts } from './desired-state.js';
import { DEFAULT_NVMET_ROOT, isOnConfigfs, NvmetConfigfs } from './nvmet-configfs.js';
import { DataPathReconciler, type DataPathBackend } from './reconciler.js';
import { FilePool, runCommand, type CommandRunner, type StoragePool } from './storage-pool.js';

export const NO_NVMET = 'this server has no NVMe target (nvmet) in its kernel';

/** The settings of agent/config.ts the data path uses. */
export interface DataPathConfig {
  readonly stateDir: string;
  readonly sysfsRoot: string;
  readonly mountsPath: string;
  readonly poolDir: string;
  readonly volumeListenAddress: string;
  readonly volumePortMin: number;
  readonly volumePortMax: number;
  readonly reconcileIntervalSeconds: number;
}

/**
 * Programmatic only (startAgent options), never settings: a configfs stand-in must not be
 * something an operator can configure by accident.
 */
export interface DataPathTestOptions {
  /** Root of the nvmet tree; a plain directory is used in emulated mode. */
  readonly nvmetRoot?: string;
  readonly openPool?: (nodeUUID: string, cluster: ClusterFacts) => Promise<StoragePool>;
  readonly connectedHosts?: ConnectedHostsProbe;
  readonly run?: CommandRunner;
}

export interface DataPathDeps {
  readonly etcd: Etcd3;
  readonly nodeUUIDs: readonly string[];
  readonly logger: Logger;
}

export async function createDataPath(config: DataPathConfig, deps: DataPathDeps, test: DataPathTestOptions = {}): Promise<DataPathReconciler> {
  const run = test.run ?? runCommand;
  const state = await DataPathState.load(config.stateDir);
  const logger = deps.logger;
  return new DataPathReconciler({
    etcd: deps.etcd,
    nodeUUIDs: deps.nodeUUIDs,
    backend: () => findBackend(config, test, run, logger),
    openPool: test.openPool ?? ((nodeUUID, cluster) => openNodePool(config, deps, run, nodeUUID, cluster)),
    state,
    settings: { listenAddress: config.volumeListenAddress, portIdMin: config.volumePortMin, portIdMax: config.volumePortMax },
    connectedHosts: test.connectedHosts ?? new SsConnectedHostsProbe(run),
    resyncIntervalMs: config.reconcileIntervalSeconds * 1000,
    logger,
  });
}

/**
 * A node with managed data devices gets the md + btrfs pool mounted at <poolDir>/<node>; a node
 * without any (labs, tests) keeps its volumes in that directory on whatever filesystem it is.
 */
async function openNodePool(config: DataPathConfig, deps: DataPathDeps, run: CommandRunner, nodeUUID: string, cluster: ClusterFacts): Promise<StoragePool> {
  const logger = deps.logger.child({ nodeUUID });
  const dir = join(config.poolDir, nodeUUID);
  const node = parseRecord<NodeRecord>(keys.node(nodeUUID), await deps.etcd.get(keys.node(nodeUUID)).string());
  if (!node) throw new Error(`node ${nodeUUID} is not registered in etcd yet`);
  if (node.managedDeviceSerials.length > 0) {
    const array = await prepareBtrfsMdPool({
      nodeUUID,
      devices: { dataSerials: node.managedDeviceSerials, journalSerial: node.journalDeviceSerial, ec: node.ec },
      mountPoint: dir,
      sysfsRoot: config.sysfsRoot,
      mountsPath: config.mountsPath,
      run,
      logger,
    });
    logger.info(array, 'node pool array ready');
  }
  return FilePool.open({ dir, clusterUUID: cluster.clusterUUID, logger, run });
}

/**
 * The real target: load the modules, then insist that the nvmet root is on a configfs mount.
 * Anything else means running without a data path (volumes reported Failed), never serving
 * from a directory that merely looks like configfs.
 */
export async function findBackend(config: DataPathConfig, test: DataPathTestOptions, run: CommandRunner, logger: Logger): Promise<DataPathBackend> {
  const root = test.nvmetRoot ?? DEFAULT_NVMET_ROOT;
  const mounts = await fs.readFile(config.mountsPath, 'utf8').catch(() => '');
  if (test.nvmetRoot !== undefined && !isOnConfigfs(root, mounts)) {
    const configfs = new NvmetConfigfs(root, { emulated: true });
    await configfs.prepareEmulatedRoot();
    logger.warn({ root }, 'the data path drives a plain directory instead of configfs (tests only)');
    return { kind: 'nvmet', configfs };
  }
  const moduleErrors: string[] = [];
  for (const module of ['nvmet', 'nvmet-tcp']) {
    try {
      await run('modprobe', [module]);
    } catch (err) {
      moduleErrors.push(`modprobe ${module}: ${String((err as { stderr?: unknown }).stderr ?? (err as Error).message).trim()}`);
    }
  }
  const unavailable = (reason: string): DataPathBackend => {
    logger.error({ root, moduleErrors }, reason);
    return { kind: 'unavailable', reason };
  };
  if (!(await isDirectory(root))) {
    if (!isOnConfigfs('/sys/kernel/config', mounts)) {
      return unavailable(`${NO_NVMET} (configfs is not mounted at /sys/kernel/config${moduleErrors.length ? `; ${moduleErrors.join('; ')}` : ''})`);
    }
    return unavailable(`${NO_NVMET}${moduleErrors.length ? ` (${moduleErrors.join('; ')})` : ''}`);
  }
  if (!isOnConfigfs(root, mounts)) return unavailable(`${root} is not on a configfs mount; refusing to drive it`);
  if (!(await isDirectory(join(config.sysfsRoot, 'module', 'nvmet_tcp')))) {
    return unavailable('this server’s kernel has the NVMe target (nvmet) but not its TCP transport (nvmet-tcp)');
  }
  logger.info({ root }, 'driving the kernel NVMe target');
  return { kind: 'nvmet', configfs: new NvmetConfigfs(root, { emulated: false }) };
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await fs.stat(path)).isDirectory();
  } catch {
    return false;
  }
}
