// The agent's composition root: builds identity, etcd client, membership, inventory, the data
// path and the control-plane session from one AgentConfig, and stops them in order.
// agent/main.ts is the process entry around it (config, logger, signals, systemd); launchers
// and tests call startAgent directly.
import { randomUUID } from 'node:crypto';
import { release } from 'node:os';
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient, etcdTlsOf } from '../lib/etcd/client.js';
import type { Logger } from '../lib/logger.js';
import { hostPort } from '../lib/endpoints.js';
import { productVersion } from '../lib/paths.js';
import { ReplicaSetStore } from '../lib/etcd/replica-set-store.js';
import { AgentSecretStore } from '../lib/etcd/agent-secret-store.js';
import { ClusterCaStore } from '../lib/etcd/cluster-ca-store.js';
import { ClusterStore } from '../lib/etcd/cluster-store.js';
import { NodeStore } from '../lib/etcd/node-store.js';
import { retry } from '../lib/retry.js';
import type { AgentConfig } from './config.js';
import { agentWatchedState } from './agent-state-store.js';
import { AdminEndpointsEnforcer } from './admin-endpoints/admin-endpoints-enforcer.js';
import { AdminEndpointRecordsStore } from './admin-endpoints/admin-endpoints-store.js';
import { EtcdAgentTokenIssuer } from './control-plane-session/agent-token-issuer.js';
import { clusterCaCredentials, controlPlaneChannelOptions } from './control-plane-session/cluster-ca-credentials.js';
import { ControlPlaneSession } from './control-plane-session/control-plane-session.js';
import { createDataPathAndPools, type DataPathParts } from './datapath/datapath.js';
import { AssignmentStore } from './datapath/reconcile/assignment-store.js';
import { BundleCollector } from './diagnostics/bundle-collector.js';
import type { NodePools } from './datapath/pool/node-pools.js';
import { ClusterPathsStore } from './discovery/cluster-paths-store.js';
import { openDiscoveryService, type DiscoveryService } from './discovery/discovery-service.js';
import { PresentedHosts } from './discovery/presented-hosts.js';
import type { DataPathReconciler } from './datapath/reconcile/reconciler.js';
import { loadOrCreateIdentity, type AgentIdentity } from './identity/identity-store.js';
import { InventoryService } from './inventory/inventory-service.js';
import { probeKernelCapabilities } from './inventory/kernel-capabilities.js';
import { EtcdHostAuth } from './datapath/kernel/host-auth.js';
import { HostAuthStore } from './datapath/kernel/host-auth-store.js';
import { Membership } from './membership/membership.js';
import { PresenceStore } from './membership/presence-store.js';
import { RegistrationStore } from './membership/registration-store.js';
import { NodeCommandStore } from '../lib/etcd/node-command-store.js';
import { NodeOperations } from './node-ops/node-operations.js';
import { observeAgent } from './metrics/agent-metrics.js';
import { startMetricsServer, type MetricsServer } from '../lib/metrics.js';

export interface RunningAgent {
  readonly identity: AgentIdentity;
  /** Random per process start (PresenceRecord.agentInstance, Hello.agent_instance). */
  readonly agentInstance: string;
  readonly membership: Membership;
  readonly inventory: InventoryService;
  readonly session: ControlPlaneSession;
  /** Assignments → storage pool + kernel NVMe target → volume reports. */
  readonly dataPath: DataPathReconciler;
  /** The nodes' storage pools: brought up, grown when devices are added, measured and reported. */
  readonly pools: NodePools;
  /** The NVMe/TCP discovery controller (port undefined when it could not listen). */
  readonly discovery: DiscoveryService;
  /** Port of GET /metrics; undefined when it could not listen (logged). */
  readonly metricsPort: number | undefined;
  readonly etcd: Etcd3;
  /**
   * Resolves once registered in etcd (retrying until etcd answers) with a first inventory
   * taken, and the control-plane session started; rejects if sysfs cannot be read.
   */
  readonly ready: Promise<void>;
  /** Stops the session, revokes the lease (the server goes Inactive at once), closes etcd. */
  stop(): Promise<void>;
}

export interface StartAgentOptions {
  /** Called once registered in etcd and the first inventory is taken (systemd READY=1). */
  readonly onReady?: () => void;
  /** Parts of the data path the caller brings (tests: test/kits/datapath/emulated-datapath.ts); never a setting. */
  readonly dataPath?: DataPathParts;
}

/**
 * Starts the agent. Resolves as soon as it runs (identity loaded); `ready` tells when it is
 * registered with a first inventory. stop() may be called at any time, also before ready.
 */
export async function startAgent(config: AgentConfig, logger: Logger, options: StartAgentOptions = {}): Promise<RunningAgent> {
  const identity = await loadOrCreateIdentity(config.stateDir, config.nodesPerServer, config.serverUuid);
  const agentInstance = randomUUID();
  logger.info(
    {
      event: 'agent.starting',
      serverUUID: identity.serverUUID,
      nodeUUIDs: identity.nodeUUIDs,
      agentInstance,
      version: productVersion,
      hostname: config.hostname,
      etcdEndpoints: config.etcdEndpoints,
      controlPlaneEndpoints: config.controlPlaneEndpoints,
    },
    'strata-agent starting',
  );

  const etcd = createEtcdClient(config.etcdEndpoints, undefined, etcdTlsOf(config));
  // Every key the agent follows, in memory through ONE etcd watch (agent-state-store.ts): the
  // stores below read it. Loaded first thing once running (`ready`), stopped last.
  const state = agentWatchedState(etcd, identity.serverUUID, logger.child({ component: 'watched-state' }));
  // Listen before registering: the node record advertises the discovery endpoint only when the
  // controller really listens (a port taken by another process is logged, not advertised).
  const metrics: MetricsServer = await startMetricsServer(config.metricsHost, config.metricsPort, logger.child({ component: 'metrics' }));
  // Host NQNs presented to the discovery controller, by address: the data path names the hosts
  // of live volume connections from it (docs/connected-hosts.md).
  const presentedHosts = new PresentedHosts();
  const discoveryLogger = logger.child({ component: 'discovery' });
  const discovery = await openDiscoveryService(config, {
    store: new ClusterPathsStore(state),
    presented: presentedHosts,
    serverUUID: identity.serverUUID,
    nodeUUIDs: identity.nodeUUIDs,
    firmware: productVersion,
    logger: discoveryLogger,
  });
  const membership = new Membership({
    store: new RegistrationStore(etcd),
    presence: new PresenceStore(etcd),
    facts: {
      serverUUID: identity.serverUUID,
      nodeUUIDs: identity.nodeUUIDs,
      hostname: config.hostname,
      advertiseAddress: config.advertiseAddress,
      // The node's NVMe/TCP entry point is its discovery controller: every volume has its own
      // port (its own subsystem), so no one port serves them all, but a host that connects here
      // (nvme discover / connect-all) is referred to every volume its NQN may reach. Clients that
      // parse nvmeEndpoint as IP:port (CSI, Cinder) get an address something listens on; the
      // shared 4420 (config nvmePort) has no listener, and '' while discovery does not listen
      // (docs/decisions.md).
      nvmePort: discovery.port,
      discoveryPort: discovery.port,
      // Listened on as soon as this node holds a copy of a replicated volume (the data path makes
      // the port with the first replication export); primaries dial it only then.
      replicationEndpoint: config.replicationAdvertiseEndpoint || hostPort(config.advertiseAddress, config.replicationPort),
      failureDomain: config.failureDomain,
      maxNvmeDevices: config.maxNvmeDevices,
      dataDevices: config.dataDevices,
      journalDevice: config.journalDevice,
    },
    leaseTtlSeconds: config.leaseTtlSeconds,
    agentVersion: productVersion,
    agentInstance,
    logger: logger.child({ component: 'membership' }),
  });
  const inventory = new InventoryService({
    sysfsRoot: config.sysfsRoot,
    mountsPath: config.mountsPath,
    swapsPath: config.swapsPath,
    hostname: config.hostname,
    journalDeviceSerial: config.journalDevice,
    rescanIntervalMs: config.inventoryRescanSeconds * 1000,
    logger: logger.child({ component: 'inventory' }),
    // After the data path decided on the kernel target (modules loaded): inventory starts later.
    kernelCapabilities: async () => {
      const decided = await backend();
      return probeKernelCapabilities({
        sysfsRoot: config.sysfsRoot,
        nvmetRoot: decided.kind === 'nvmet' ? decided.configfs.kernelRoot : undefined,
        modulesDir: join('/lib/modules', release()),
      });
    },
  });

  // The cluster UUID goes in Hello so a control plane of another cluster refuses the agent;
  // read after each registration ('' until the cluster is bootstrapped).
  let clusterUUID = '';
  const clusterStore = new ClusterStore(etcd, state);
  const refreshClusterUUID = async () => {
    try {
      const record = await clusterStore.read();
      clusterUUID = record?.UUID ?? '';
    } catch (err) {
      logger.debug({ err }, 'reading the cluster record failed');
    }
  };
  membership.on('registered', () => void refreshClusterUUID());

  const hostAuth = new EtcdHostAuth({
    store: new HostAuthStore(etcd, identity.serverUUID, state),
    cluster: clusterStore,
    serverUUID: identity.serverUUID,
    stateDir: config.stateDir,
    logger: logger.child({ component: 'host-auth' }),
  });
  const replicaSets = new ReplicaSetStore(etcd);
  const { dataPath, pools, backend, ipAcls } = await createDataPathAndPools(
    config,
    {
      stores: { assignments: new AssignmentStore(state), cluster: clusterStore, nodes: new NodeStore(etcd, state), replicaSets },
      nodeUUIDs: identity.nodeUUIDs,
      logger: logger.child({ component: 'datapath' }),
      hostAuth,
    },
    { presentedHosts, ...options.dataPath },
  );
  // Admin endpoints: nftables entries in the same table as the volumes' IP ACLs.
  const adminEndpoints = new AdminEndpointsEnforcer({
    store: new AdminEndpointRecordsStore(etcd, state),
    target: ipAcls,
    resyncIntervalMs: config.reconcileIntervalSeconds * 1000,
    logger: logger.child({ component: 'admin-endpoints' }),
  });
  // Fencing (docs/replication.md): a primary whose lease may expire stops serving before it can,
  // and serves again only when the lease was renewed in time, or when etcd, read after the new
  // registration, still names it the primary.
  const fencing = new AbortController();
  membership.on('renewalOverdue', () => dataPath.fence());
  membership.on('renewed', () => dataPath.unfenceRenewed());
  membership.on('registered', () => {
    void retry(
      () =>
        dataPath.unfenceRegistered(async (volumeUUID) => {
          const stored = await replicaSets.get(volumeUUID);
          return stored ? { epoch: stored.record.epoch, primaryNodeUUID: stored.record.primaryNodeUUID } : undefined;
        }),
      { signal: fencing.signal, onRetry: (err) => logger.warn({ err }, 'checking the replica sets after registering failed; retrying') },
    ).catch(() => undefined);
  });
  // Node stop/start/restart (docs/node-operations.md): a node an administrator stopped stays
  // stopped across agent restarts, so the commands are read before registering or serving.
  const nodeOps = new NodeOperations({
    store: new NodeCommandStore(etcd, state),
    nodeUUIDs: identity.nodeUUIDs,
    dataPath,
    pools,
    presence: membership,
    logger: logger.child({ component: 'node-ops' }),
  });
  // Paths are read from etcd at once (retrying while it is unreachable); this node's own come
  // from its data path.
  discovery.start(dataPath);

  // The diagnostic bundle's server part (GET /api/v2/logs): the nvmet tree is the one the data
  // path drives, or the reason there is none.
  const bundles = new BundleCollector({
    nvmet: async () => {
      const decided = await backend();
      return decided.kind === 'nvmet' ? { root: decided.configfs.root } : { absent: decided.reason };
    },
    agentState: (): Record<string, unknown> => ({
      identity: { serverUUID: identity.serverUUID, nodeUUIDs: identity.nodeUUIDs },
      agentInstance,
      membership: membership.state(),
      stoppedNodes: nodeOps.stoppedNodes(),
      session: session.state(),
      inventory: inventory.current(),
      volumeReport: dataPath.current(),
      poolReport: pools.current(),
    }),
    poolDir: config.poolDir,
    logDir: '/var/log',
    units: ['strata-agent', 'strata-control-plane', 'etcd'],
    logger: logger.child({ component: 'bundle' }),
  });
  const session = new ControlPlaneSession({
    endpoints: config.controlPlaneEndpoints,
    identity,
    agentVersion: productVersion,
    agentInstance,
    clusterUUID: () => clusterUUID,
    inventory,
    volumeReports: dataPath,
    poolReports: pools,
    commands: {
      setLed: (serial, state) => inventory.setLed(serial, state),
      collectBundle: (options, sink, signal) => bundles.collect(options, sink, signal),
    },
    // Proof of membership for the control plane's gRPC port, from the secret in etcd.
    tokens: new EtcdAgentTokenIssuer({ cluster: clusterStore, secrets: new AgentSecretStore(etcd), identity, logger: logger.child({ component: 'agent-token' }) }),
    // TLS, the control plane verified against the cluster CA in etcd.
    credentials: clusterCaCredentials(new ClusterCaStore(etcd)),
    channelOptions: controlPlaneChannelOptions,
    heartbeatMs: config.heartbeatSeconds * 1000,
    logger: logger.child({ component: 'control-plane-session' }),
  });
  session.on('connected', (s) => logger.debug({ endpoint: s.endpoint }, 'session connected'));
  let lastPass: { served: number; failed: number } | undefined;
  const unwatchPasses = dataPath.onPass((summary) => (lastPass = summary));
  const unobserve = observeAgent({
    discoveryConnections: () => discovery.server?.connectionCount,
    session: () => ({ connected: session.state().connected, established: session.state().sessions }),
    lastPass: () => lastPass,
  });

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    fencing.abort();
    // Planned failover first: replicated volumes this node is the primary of go to another copy
    // (hosts wait from the hand-over to the promotion, so it starts before anything else stops),
    // while the data path stops; a pass that is still running changes nothing more (it neither
    // applies nor serves a handed-over volume, and a node command's hand-over of the same volume
    // finds it gone). Waiting for that pass first could take longer than the stop's deadline on a
    // slow server.
    const handedOver = dataPath.handOver();
    await nodeOps.stop();
    unwatchPasses();
    unobserve();
    await adminEndpoints.stop();
    const dataPathStopped = dataPath.stop().then(() => hostAuth.stop());
    await handedOver;
    await dataPathStopped;
    await membership.stop();
    await dataPath.finishHandOver();
    await session.stop();
    await discovery.stop();
    await pools.stop();
    inventory.stop();
    await metrics.close();
    await state.stop();
    etcd.close();
    logger.info({ serverUUID: identity.serverUUID }, 'strata-agent stopped');
  };

  const ready = (async () => {
    try {
      // The watched state first: every reader below reads it (it retries while etcd is away).
      await retry(() => state.start(), { signal: fencing.signal, onRetry: (err) => logger.warn({ err }, 'reading etcd failed; retrying') });
      await nodeOps.load();
      await Promise.all([membership.start(), inventory.start()]);
    } catch (err) {
      await stop().catch(() => undefined);
      throw err;
    }
    if (stopped) throw new Error('the agent was stopped while starting');
    await refreshClusterUUID();
    // After registration: a node's pool is described by its node record. Until then the kernel
    // target simply keeps serving what it serves.
    pools.start();
    // The data path applies in-band authentication only once its state is known: starting with
    // "disabled" would clear the keys of an enabled cluster's hosts.
    await retry(() => hostAuth.start(), { signal: fencing.signal, onRetry: (err) => logger.warn({ err }, 'reading the in-band authentication state failed; retrying') });
    dataPath.start();
    await adminEndpoints.start();
    session.start();
    nodeOps.start();
    logger.info(
      {
        event: 'agent.started',
        serverUUID: identity.serverUUID,
        nodeUUIDs: identity.nodeUUIDs,
        agentInstance,
        leaseId: membership.state().leaseId,
        inventorySequence: inventory.current()?.sequence,
        devices: inventory.current()?.devices.map((d) => d.serial),
      },
      'strata-agent ready',
    );
    options.onReady?.();
  })();
  // Callers that only stop() must not see an unhandled rejection.
  ready.catch(() => undefined);
  return { identity, agentInstance, membership, inventory, session, dataPath, pools, discovery, metricsPort: metrics.port, etcd, ready, stop };
}
