// Part of the control plane's composition root: builds every resource's store and service,
// the REST routers, and the work only the active cluster manager does. control-plane.ts owns
// the process-level pieces (etcd client, bootstrap, transports, lifecycle).
import type Router from '@koa/router';
import { hostname } from 'node:os';
import type { Etcd3 } from 'etcd3';
import { hashMembers } from '../lib/etcd/hash-scan.js';
import { clusterKeyDump } from '../lib/etcd/key-dump.js';
import { EtcdMembers } from '../lib/etcd/members.js';
import { EtcdMembership } from '../lib/etcd/membership.js';
import { RecordStore } from '../lib/etcd/record-store.js';
import type { Logger } from '../lib/logger.js';
import type { ClusterRecord } from '../lib/records.js';
import type { AgentSessions } from './agents/agent-sessions.js';
import type { SessionRouting } from './agents/session-routing.js';
import type { Authenticator } from './auth/authenticator.js';
import { AdminEndpointsService } from './admin-endpoints/admin-endpoints-service.js';
import { AdminEndpointsStore } from './admin-endpoints/admin-endpoints-store.js';
import { createAdminEndpointsRoutes } from './admin-endpoints/admin-endpoints-routes.js';
import { ClusterService } from './cluster/cluster-service.js';
import { NodeCapacityCeiling } from './cluster/capacity-ceiling.js';
import { PresenceReplicaLimits } from './cluster/presence-replica-limits.js';
import { WatchedVolumeHealth } from './cluster/volume-health.js';
import { WatchedReplicationRisk } from './servers/replication-risk.js';
import { createClusterRoutes } from './cluster/cluster-routes.js';
import { ConnectedHostsService } from './connected-hosts/connected-hosts-service.js';
import { ConnectedHostsStore } from './connected-hosts/connected-hosts-store.js';
import { createConnectedHostsRoutes } from './connected-hosts/connected-hosts-routes.js';
import type { ControlPlaneConfig } from './config.js';
import { ControlPlaneStore } from './control-planes/control-plane-store.js';
import { createControlPlaneRoutes } from './control-planes/control-plane-routes.js';
import { CredentialsService } from './credentials/credentials-service.js';
import { CredentialRecordsStore } from './credentials/credentials-store.js';
import { createCredentialsRoutes } from './credentials/credentials-routes.js';
import { createEtcdCorruptionRoutes } from './etcd-corruption/etcd-corruption-routes.js';
import { startEtcdCorruptionScanner } from './etcd-corruption/etcd-corruption-scanner.js';
import { EtcdCorruptionService } from './etcd-corruption/etcd-corruption-service.js';
import { EtcdCorruptionStore } from './etcd-corruption/etcd-corruption-store.js';
import { scanEtcdHashes } from './etcd-corruption/etcd-hash-scan.js';
import { EtcdEventLog } from './events/etcd-event-log.js';
import { EventLogStore } from './events/event-log-store.js';
import { startEventRetention } from './events/event-retention.js';
import { EventStore } from './events/event-store.js';
import { EventsService } from './events/events-service.js';
import { createEventsRoutes } from './events/events-routes.js';
import { FeatureFlagsService } from './feature-flags/feature-flags-service.js';
import { FeatureFlagsStore } from './feature-flags/feature-flags-store.js';
import { createFeatureFlagsRoutes } from './feature-flags/feature-flags-routes.js';
import { createFederationRoutes } from './federation/federation-routes.js';
import { InventoryReader } from './inventory/inventory-reader.js';
import type { LeaderElection } from './leadership/leader-election.js';
import type { LeaderTask } from './leadership/leader-tasks.js';
import { startMembershipEvents } from './nodes/membership-events.js';
import { MembershipEventsStore } from './nodes/membership-events-store.js';
import { NodesService } from './nodes/nodes-service.js';
import { createNodesRoutes } from './nodes/nodes-routes.js';
import { NodeCommandsService } from './nodes/node-commands-service.js';
import { NodeCommandsStore } from './nodes/node-commands-store.js';
import { WatchedNodeCopies } from './nodes/node-copies.js';
import { NvmeDevicesService } from './nvme-devices/nvme-devices-service.js';
import { createNvmeDevicesRoutes } from './nvme-devices/nvme-devices-routes.js';
import { createOpenApiRoutes } from './openapi/openapi-routes.js';
import { NvmeDevicesStore } from './nvme-devices/nvme-devices-store.js';
import { PoliciesService } from './policies/policies-service.js';
import { PoliciesStore } from './policies/policies-store.js';
import { WatchedPolicyDirectory } from './policies/policy-directory.js';
import { createPoliciesRoutes } from './policies/policies-routes.js';
import { WatchedProjectDirectory } from './projects/project-directory.js';
import { ProjectsService } from './projects/projects-service.js';
import { ProjectsStore } from './projects/projects-store.js';
import { createProjectsRoutes } from './projects/projects-routes.js';
import { startEtcdMemberPromotion } from './servers/etcd-member-promotion.js';
import { ServerAdder } from './servers/server-add.js';
import { ServersService } from './servers/servers-service.js';
import { ServersStore } from './servers/servers-store.js';
import { KernelCapabilitiesService } from './kernel-capabilities/kernel-capabilities-service.js';
import { WatchedQosEnforcement } from './policies/qos-enforcement.js';
import { createKernelCapabilitiesRoutes } from './kernel-capabilities/kernel-capabilities-routes.js';
import type { HostSecretKey } from './in-band-auth/host-secret-key.js';
import { InBandAuthService } from './in-band-auth/in-band-auth-service.js';
import { TrustedHostStore } from './in-band-auth/trusted-host-store.js';
import { createInBandAuthRoutes } from './in-band-auth/in-band-auth-routes.js';
import { startResealTask } from './in-band-auth/reseal-task.js';
import { NvmeTcpTlsService } from './nvme-tcp-tls/nvme-tcp-tls-service.js';
import { TlsHostStore } from './nvme-tcp-tls/tls-host-store.js';
import { createNvmeTcpTlsRoutes } from './nvme-tcp-tls/nvme-tcp-tls-routes.js';
import { createServersRoutes } from './servers/servers-routes.js';
import { writeEtcdDump } from './logs/etcd-dump.js';
import { LogsService } from './logs/logs-service.js';
import { createLogsRoutes } from './logs/logs-routes.js';
import { EtcdSnapshotDirectory, SnapshotService } from './snapshots/snapshot-service.js';
import { SnapshotStore, WatchedSnapshots } from './snapshots/snapshot-store.js';
import { createSnapshotRoutes } from './snapshots/snapshot-routes.js';
import { startSnapshotRetention } from './snapshots/snapshot-retention.js';
import { createVersionRoutes } from './version/version-routes.js';
import { VolumeController } from './volumes/volume-controller.js';
import { VolumeControllerStore } from './volumes/volume-controller-store.js';
import { VolumeService, VolumeUsageCounter } from './volumes/volume-service.js';
import { VolumeStore } from './volumes/volume-store.js';
import { createVolumeRoutes } from './volumes/volume-routes.js';
import type { WatchCache } from './watch-cache/watch-cache.js';

/** The NVMe/TCP ports every storage node uses; admin endpoints may not take them. */
const NVME_PORT = 4420;
const DISCOVERY_PORT = 8009;

export interface ResourceContext {
  readonly etcd: Etcd3;
  /** The process's watched state, started; every /api request has called its sync() before a route runs. */
  readonly cache: WatchCache;
  readonly auth: Authenticator;
  readonly election: LeaderElection;
  readonly registry: ControlPlaneStore;
  readonly cluster: ClusterRecord;
  readonly config: ControlPlaneConfig;
  readonly ports: { readonly api: number; readonly grpc: number };
  /** How a local client verifies the REST API (undefined: it is plain HTTP, apiInsecureHttp). */
  readonly apiCaFile: string | undefined;
  /** The key trusted hosts' secrets are stored under (read from the state directory by the composition root). */
  readonly hostSecretKey: HostSecretKey;
  /** The agents' live sessions on this instance: commands (LEDs) and diagnostic bundles go down them. */
  readonly sessions: AgentSessions;
  /** Where each server's agent session is: LED and bundle requests for another control plane's go there. */
  readonly routing: SessionRouting;
  readonly logger: Logger;
}

export interface Resources {
  readonly routers: Router[];
  readonly leaderTasks: LeaderTask[];
}

export function buildResources(ctx: ResourceContext): Resources {
  const { etcd, cache, auth, config, logger } = ctx;
  const events = new EtcdEventLog(new EventLogStore(etcd), logger.child({ component: 'events' }));

  // Inventory views share one reader of the watched state: it keeps its last snapshot and builds
  // again only the maps whose records changed.
  const inventory = new InventoryReader(cache);
  const kernelCapabilities = new KernelCapabilitiesService(inventory);

  const projectsStore = new ProjectsStore(etcd);
  const policiesStore = new PoliciesStore(etcd);
  const projectDirectory = new WatchedProjectDirectory(cache);
  const volumeStore = new VolumeStore(new RecordStore(etcd), cache);
  const volumeUsage = new VolumeUsageCounter(volumeStore, () => cache.sync());
  const flags = new FeatureFlagsService(new FeatureFlagsStore(etcd), events);
  const inBandAuth: InBandAuthService = new InBandAuthService(
    new TrustedHostStore(etcd, ctx.hostSecretKey, (record) => inBandAuth.open(record)),
    ctx.hostSecretKey,
    kernelCapabilities,
    async (p) => (await projectsStore.get(p)) !== null,
  );
  flags.delegate('in-band-authentication', (enabled, actor) => inBandAuth.setEnabled(enabled, actor));
  const nvmeTcpTls: NvmeTcpTlsService = new NvmeTcpTlsService(
    new TlsHostStore(etcd, ctx.hostSecretKey, (record) => nvmeTcpTls.open(record)),
    ctx.hostSecretKey,
    kernelCapabilities,
  );
  const cluster = new ClusterService(inventory, new WatchedVolumeHealth(cache), { inBandAuth });
  const snapshotStore = new SnapshotStore(etcd);
  const volumes = new VolumeService({
    store: volumeStore,
    projects: projectDirectory,
    policies: new WatchedPolicyDirectory(cache),
    snapshots: new EtcdSnapshotDirectory(snapshotStore),
    flags,
    replicaLimits: new PresenceReplicaLimits(cache, ctx.cluster.supportedMaxReplicas),
    capacity: new NodeCapacityCeiling(cache, config.overcommitRatio),
    kernelCapabilities,
    events,
    clusterUUID: ctx.cluster.UUID,
    clusterSubsystemNQN: ctx.cluster.subsystemNQN,
  });
  const snapshots = new SnapshotService({ store: snapshotStore, projects: projectDirectory, clones: volumeUsage, events, logger: logger.child({ component: 'snapshots' }) });
  // The REST API's port is not reserved: an admin endpoint there protects it like any other
  // administrative port (issue 12 item 6). The gRPC port is: agents must always reach it.
  const reservedPorts = [
    { from: ctx.ports.grpc, to: ctx.ports.grpc, purpose: 'the agents gRPC service' },
    { from: NVME_PORT, to: NVME_PORT, purpose: 'NVMe/TCP' },
    { from: DISCOVERY_PORT, to: DISCOVERY_PORT, purpose: 'NVMe/TCP discovery' },
    { from: config.volumePortMin, to: config.volumePortMax, purpose: 'volume ports' },
  ];

  const routers: Router[] = [
    createVersionRoutes({ auth }),
    createControlPlaneRoutes({ auth, registry: ctx.registry }),
    createClusterRoutes({ auth, cluster }),
    createServersRoutes({ auth, servers: new ServersService(inventory, new EtcdMembers(etcd), new WatchedReplicationRisk(cache)), adder: new ServerAdder(new ServersStore(etcd), inventory, new EtcdMembership(etcd)) }),
    createNodesRoutes({
      auth,
      nodes: new NodesService(inventory),
      commands: new NodeCommandsService({
        inventory,
        copies: new WatchedNodeCopies(cache),
        store: new NodeCommandsStore(etcd),
        events,
        maxInProgress: config.maxNodeCommandsInProgress,
      }),
    }),
    createKernelCapabilitiesRoutes({ auth, capabilities: kernelCapabilities }),
    createInBandAuthRoutes({ auth, inBandAuth, flags }),
    createNvmeTcpTlsRoutes({ auth, tls: nvmeTcpTls }),
    createNvmeDevicesRoutes({ auth, devices: new NvmeDevicesService(inventory, { store: new NvmeDevicesStore(etcd), events }, ctx.sessions, ctx.routing) }),
    createProjectsRoutes({ auth, projects: new ProjectsService(projectsStore, policiesStore, volumeUsage) }),
    createCredentialsRoutes({ auth, credentials: new CredentialsService(new CredentialRecordsStore(etcd), projectsStore) }),
    createPoliciesRoutes({ auth, policies: new PoliciesService(policiesStore, projectsStore, volumeUsage, new WatchedQosEnforcement(cache)) }),
    createVolumeRoutes({ auth, volumes }),
    createSnapshotRoutes({ auth, snapshots }),
    createFeatureFlagsRoutes({ auth, flags }),
    createAdminEndpointsRoutes({ auth, adminEndpoints: new AdminEndpointsService(new AdminEndpointsStore(etcd), reservedPorts) }),
    createEventsRoutes({ auth, events: new EventsService(new EventStore(etcd), projectDirectory) }),
    createConnectedHostsRoutes({ auth, connectedHosts: new ConnectedHostsService(new ConnectedHostsStore(etcd)) }),
    createFederationRoutes({ auth }),
    createLogsRoutes({
      auth,
      logs: new LogsService({
        inventory,
        sessions: ctx.sessions,
        routing: ctx.routing,
        dumpEtcd: (file) => writeEtcdDump(clusterKeyDump(etcd), file),
        api: { endpoint: ownApiEndpoint(config, ctx.ports.api, ctx.apiCaFile !== undefined), caFile: ctx.apiCaFile },
        hostname: hostname(),
        logger: logger.child({ component: 'diagnostics' }),
      }),
    }),
    createEtcdCorruptionRoutes({ auth, etcdCorruption: new EtcdCorruptionService(new EtcdCorruptionStore(etcd)) }),
  ];
  routers.push(createOpenApiRoutes({ auth, routers })); // the document of every router above, and its own

  const child = (component: string) => logger.child({ component });
  const leaderTasks: LeaderTask[] = [
    { name: 'event retention', start: async () => startEventRetention(new EventStore(etcd), child('event-retention')) },
    { name: 'in-band auth sealing', start: async () => startResealTask(inBandAuth, child('in-band-auth'), 'in-band authentication') },
    { name: 'TLS PSK sealing', start: async () => startResealTask(nvmeTcpTls, child('nvme-tcp-tls'), 'TLS on NVMe/TCP') },
    {
      name: 'membership events',
      start: async () => startMembershipEvents({ store: new MembershipEventsStore(etcd, cache, (transaction) => ctx.election.fencedCommit(transaction)), inventory, events, logger: child('membership-events') }),
    },
    {
      name: 'etcd member promotion',
      start: () => startEtcdMemberPromotion({ store: new ServersStore(etcd, (transaction) => ctx.election.fencedCommit(transaction)), membership: new EtcdMembership(etcd), logger: child('etcd-members') }),
    },
    {
      name: 'etcd corruption scan',
      start: () => startEtcdCorruptionScanner({ store: new EtcdCorruptionStore(etcd, { fencedCommit: (transaction) => ctx.election.fencedCommit(transaction), cache }), events, cluster: ctx.cluster, scan: () => scanEtcdHashes(() => hashMembers(etcd)), logger: child('etcd-corruption') }),
    },
    { name: 'snapshot retention', start: async () => startSnapshotRetention({ store: snapshotStore, watched: new WatchedSnapshots(cache), logger: child('snapshot-retention'), events, clones: volumeUsage }) },
    {
      name: 'volume controller',
      start: async () => {
        const controller = new VolumeController({
          store: new VolumeControllerStore(cache, (transaction) => ctx.election.fencedCommit(transaction)),
          logger: child('volume-controller'),
          events,
          clusterUUID: ctx.cluster.UUID,
          clusterSubsystemNQN: ctx.cluster.subsystemNQN,
          volumePorts: { min: config.volumePortMin, max: config.volumePortMax },
          overcommitRatio: config.overcommitRatio,
          creatingTimeoutMs: config.creatingTimeoutSeconds * 1000,
          permanentFailureTimeoutMs: config.permanentFailureTimeoutSeconds * 1000,
          replaceTimeoutMs: config.nodeReplaceTimeoutSeconds * 1000,
          replaceTargetGraceMs: config.nodeReplaceTargetGraceSeconds * 1000,
        });
        await controller.start();
        return controller;
      },
    },
  ];
  return { routers, leaderTasks };
}

/** This instance's REST API as a local client reaches it (the CLI outputs of the bundle). */
function ownApiEndpoint(config: ControlPlaneConfig, port: number, https: boolean): string {
  const host = config.apiHost === '0.0.0.0' || config.apiHost === '::' || config.apiHost === '' ? '127.0.0.1' : config.apiHost;
  return `${https ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
