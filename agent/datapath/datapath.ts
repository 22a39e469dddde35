// Builds the data path of an agent: finds the kernel NVMe target (or decides there is none),
// the node pools (pool/node-pools.ts: one storage pool per node, grown and measured), and wires the
// reconciler (reconcile/). agent/agent.ts calls createDataPathAndPools; a caller may bring some
// parts itself (DataPathParts, through startAgent): tests bring test/kits/datapath/emulated-datapath.ts's.
// The rooms of agent/datapath/ (docs/datapath.md): reconcile/ (what to serve), kernel/ (nvmet,
// nftables, host keys), pool/ (the storage pool), replication/; this file composes them.
import type { HostAuthSource } from './kernel/host-auth.js';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../lib/logger.js';
import { SsConnectedHostsProbe, type ConnectedHostsProbe } from './reconcile/connected-hosts.js';
import type { PresentedHostsView } from '../discovery/presented-hosts.js';
import { DataPathState } from './reconcile/datapath-state.js';
import { IpAclEnforcer } from './kernel/ip-acl-enforcer.js';
import { NftablesDriver } from './kernel/nftables.js';
import type { ClusterFacts } from './pool/node-pools.js';
import { DEFAULT_NVMET_ROOT, isOnConfigfs, NvmetConfigfs } from './kernel/nvmet-configfs.js';
import { DataPathReconciler, type DataPathBackend } from './reconcile/reconciler.js';
import { NodePools } from './pool/node-pools.js';
import { runCommand, type CommandRunner, type StoragePool } from './pool/storage-pool.js';
import type { ClusterReader } from '../../lib/etcd/cluster-store.js';
import type { NodeStore } from '../../lib/etcd/node-store.js';
import type { ReplicaSetStore } from '../../lib/etcd/replica-set-store.js';
import type { AssignmentStore } from './reconcile/assignment-store.js';
import { BlockStack, type BlockIoctls } from './replication/block-stack.js';
import { SingleCopyPaths } from './replication/single-copy.js';
import { ReplicaManager } from './replication/replica-manager.js';
import { installMdAssemblyGuard, MD_ASSEMBLY_GUARD_RULE, UDEV_RUNTIME_RULES_DIR } from './replication/md-assembly-guard.js';
import { QosStage } from './kernel/qos-stage.js';
import { loadNativeAddon } from '../../lib/native-addon.js';
import { isDirectory } from '../../lib/files.js';

/**
 * The sparse file under the replication fence's loop device (block-stack.ts): on /run (tmpfs),
 * which goes at a reboot with the loop devices, and holds sparse files larger than ext4 can (16 TiB).
 */
const REPLICATION_FENCE_FILE = '/run/strata/replication-fence.img';

/**
 * The QoS servers' limits files and records (kernel/qos-stage.ts): on /run, gone at a reboot with
 * the ublk devices they describe, kept across agent restarts, which adopt the servers.
 */
const QOS_STATE_DIR = '/run/strata/qos';

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
  readonly replicationPort: number;
  readonly replicaLossGraceSeconds: number;
  readonly replicaBitmapChunkKib?: number;
}

/**
 * Parts a caller brings instead of the ones built here. Programmatic only (startAgent options),
 * never settings: a configfs stand-in must not be something an operator can configure by accident.
 */
export interface DataPathParts {
  /**
   * Finds the kernel target; default: findBackend on the real nvmet root. A caller that brings
   * its own target or its own pools (openPool) gets no node pool brought up, grown or reported.
   */
  readonly backend?: (config: DataPathConfig, run: CommandRunner, logger: Logger) => Promise<DataPathBackend>;
  readonly openPool?: (nodeUUID: string, cluster: ClusterFacts) => Promise<StoragePool>;
  readonly connectedHosts?: ConnectedHostsProbe;
  /** The discovery controller's record of host NQNs by address (names connected hosts). */
  readonly presentedHosts?: PresentedHostsView;
  readonly run?: CommandRunner;
  /** What applies IP ACLs, or why they cannot be (volumes with one are then Failed); default: nft. */
  readonly ipAcls?: NftablesDriver | string;
}

/** What the data path reads and writes in etcd, made by the agent's composition root (agent/agent.ts). */
export interface DataPathStores {
  /** The cluster record and the nodes' assignments, watched (reconcile/). */
  readonly assignments: AssignmentStore;
  /** The cluster record (the node pools). */
  readonly cluster: ClusterReader;
  /** This server's node records, watched (the node pools). */
  readonly nodes: Pick<NodeStore, 'read' | 'watchPuts'>;
  /** Replica sets (replication/: the replica manager's writes). */
  readonly replicaSets: ReplicaSetStore;
}

export interface DataPathDeps {
  readonly stores: DataPathStores;
  readonly nodeUUIDs: readonly string[];
  readonly logger: Logger;
  /** In-band authentication of volume hosts (host-auth.ts); without it, no host entry has a key. */
  readonly hostAuth?: HostAuthSource;
}

export async function createDataPath(config: DataPathConfig, deps: DataPathDeps, parts: DataPathParts = {}): Promise<DataPathReconciler> {
  return (await createDataPathAndPools(config, deps, parts)).dataPath;
}

/** The data path and the node pools it keeps volumes in, with one kernel-target decision for both. */
export async function createDataPathAndPools(
  config: DataPathConfig,
  deps: DataPathDeps,
  parts: DataPathParts = {},
): Promise<{ dataPath: DataPathReconciler; pools: NodePools; backend: () => Promise<DataPathBackend>; ipAcls: IpAclEnforcer }> {
  const run = parts.run ?? runCommand;
  const state = await DataPathState.load(config.stateDir);
  const logger = deps.logger;
  let decided: Promise<DataPathBackend> | undefined;
  const backend = () => (decided ??= parts.backend ? parts.backend(config, run, logger) : realBackend(config, run, logger));
  const pools = new NodePools({
    cluster: deps.stores.cluster,
    nodes: deps.stores.nodes,
    nodeUUIDs: deps.nodeUUIDs,
    poolDir: config.poolDir,
    sysfsRoot: config.sysfsRoot,
    mountsPath: config.mountsPath,
    stateDir: config.stateDir,
    run,
    // No pool is brought up, grown or reported on a server that cannot serve volumes, nor when
    // the caller brings its own target or pools.
    enabled: async () => parts.backend === undefined && parts.openPool === undefined && (await backend()).kind === 'nvmet',
    intervalMs: config.reconcileIntervalSeconds * 1000,
    logger: logger.child({ component: 'node-pools' }),
  });
  // Replicated volumes and single copies' device-mapper stage need the real kernel (device-mapper,
  // loop, md, the NVMe/TCP initiator): not with a target the caller brings (a plain directory
  // standing in for configfs), whose single copies point straight at their files.
  const qos = parts.backend === undefined ? new QosStage({ stateDir: QOS_STATE_DIR, logger: logger.child({ component: 'qos' }), onDeviceReplaced: (volume) => void onQosDeviceReplaced(volume) }) : undefined;
  const stack = parts.backend === undefined ? new BlockStack({ run, sysfsRoot: config.sysfsRoot, devRoot: '/dev', fenceFile: REPLICATION_FENCE_FILE, ioctls: blockIoctls(), reconnectDelaySeconds: 1, keepAliveSeconds: 5, ...(config.replicaBitmapChunkKib ? { bitmapChunkKiB: config.replicaBitmapChunkKib } : {}) }) : undefined;
  const singles = stack ? new SingleCopyPaths({ stack, qos, logger: logger.child({ component: 'single-copy' }) }) : undefined;
  const onQosDeviceReplaced = (volume: string) =>
    Promise.all([replicas?.qosDeviceReplaced(volume), singles?.qosDeviceReplaced(volume)]).catch((err: unknown) => logger.error({ err, volume }, 'moving the volume onto its new QoS device failed'));
  const replicas =
    stack
      ? new ReplicaManager({
          stack,
          writer: deps.stores.replicaSets,
          clusterSubsystemNQN: () => dataPath.clusterSubsystemNQN(),
          logger: logger.child({ component: 'replication' }),
          monitorIntervalMs: 500,
          legLossGraceMs: config.replicaLossGraceSeconds * 1000,
          rejoinIntervalMs: 5000,
          ...(qos ? { qos } : {}),
        })
      : undefined;
  // The volume ports' IP ACLs and the admin endpoints (ports outside the volume range): one table.
  const ipAcls = new IpAclEnforcer(parts.ipAcls ?? new NftablesDriver(), logger, { min: config.volumePortMin, max: config.volumePortMax });
  const dataPath: DataPathReconciler = new DataPathReconciler({
    store: deps.stores.assignments,
    nodeUUIDs: deps.nodeUUIDs,
    backend,
    openPool: parts.openPool ?? ((nodeUUID, cluster) => pools.open(nodeUUID, cluster)),
    state,
    settings: { listenAddress: config.volumeListenAddress, portIdMin: config.volumePortMin, portIdMax: config.volumePortMax, replicationPort: config.replicationPort },
    ...(replicas ? { replicas } : {}),
    ...(singles ? { singles } : {}),
    connectedHosts: parts.connectedHosts ?? new SsConnectedHostsProbe(run),
    ...(parts.presentedHosts ? { presentedHosts: parts.presentedHosts } : {}),
    ipAcls,
    resyncIntervalMs: config.reconcileIntervalSeconds * 1000,
    ...(deps.hostAuth ? { hostAuth: deps.hostAuth } : {}),
    logger,
  });
  return { dataPath, pools, backend, ipAcls };
}

/**
 * The kernel's target, and before any volume is served on it, the udev rule that keeps md's
 * incremental assembly off replicated volumes' devices (replication/md-assembly-guard.ts).
 */
async function realBackend(config: DataPathConfig, run: CommandRunner, logger: Logger): Promise<DataPathBackend> {
  const found = await findBackend(config, run, logger);
  if (found.kind !== 'nvmet') return found;
  try {
    const guard = await installMdAssemblyGuard({ run, logger });
    if (guard === 'written') logger.info({ rule: join(UDEV_RUNTIME_RULES_DIR, MD_ASSEMBLY_GUARD_RULE) }, "udev rule written: md's incremental assembly leaves replicated volumes' devices to the agent");
  } catch (err) {
    // Not fatal: with `AUTO -all` in mdadm.conf (docs/install.md) nothing assembles on its own either.
    logger.error({ err }, "the udev rule that keeps md's incremental assembly off replicated volumes could not be written: without AUTO -all in mdadm.conf, udev may assemble a copy's array beside the agent's");
  }
  return found;
}

/**
 * The real target: load the modules, then insist that the nvmet root is on a configfs mount.
 * Anything else means running without a data path (volumes reported Failed), never serving
 * from a directory that merely looks like configfs.
 */
export async function findBackend(config: DataPathConfig, run: CommandRunner, logger: Logger, root = DEFAULT_NVMET_ROOT): Promise<DataPathBackend> {
  const mounts = await fs.readFile(config.mountsPath, 'utf8').catch(() => '');
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
  return { kind: 'nvmet', configfs: new NvmetConfigfs(root) };
}

/** The native addon's device-mapper and loop calls, null without them (not built, or built before they existed): dmsetup and losetup then. */
function blockIoctls(): BlockIoctls | null {
  const addon = loadNativeAddon();
  return addon && typeof addon.dmTable === 'function' && typeof addon.dmReload === 'function' && typeof addon.loopAttach === 'function' ? addon : null;
}
