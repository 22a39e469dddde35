// The control plane's composition root: builds stores, services and transports from the
// config and starts them. main.ts adds the process concerns (config, signals, systemd).
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { hostname } from 'node:os';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Etcd3 } from 'etcd3';
import type Router from '@koa/router';
import { createEtcdClient } from '../lib/etcd/client.js';
import { KeptLease } from '../lib/etcd/lease.js';
import type { Logger } from '../lib/logger.js';
import { productVersion } from '../lib/paths.js';
import { AgentSessions } from './agents/agent-sessions.js';
import { bindGrpcServer, createAgentGrpcServer } from './agents/agent-grpc-server.js';
import { InventoryService } from './agents/inventory-service.js';
import { InventoryStore } from './agents/inventory-store.js';
import { Authenticator } from './auth/authenticator.js';
import { CredentialStore } from './auth/credentials-store.js';
import { bootstrapCluster, type BootstrapResult } from './bootstrap/bootstrap.js';
import { ControlPlaneRegistry } from './control-planes/control-plane-registry.js';
import { createControlPlaneRoutes } from './control-planes/control-plane-routes.js';
import { instanceIdOf, type ControlPlaneConfig } from './config.js';
import { createHttpApp } from './http/app.js';
import { LeaderElection } from './leadership/leader-election.js';
import { LeaderTasks } from './leadership/leader-tasks.js';
import { VolumeController } from './volume-controller/volume-controller.js';
import { VolumeReportService } from './agents/volume-report-service.js';
import { VolumeStatusStore } from './agents/volume-status-store.js';
import type { EventRecorder } from './events/event-recorder.js';
import { EtcdEventLog } from './events/etcd-event-log.js';
import { startEventRetention } from './events/event-retention.js';
import { EventStore, EventsService, EtcdProjectExistence } from './events/events-service.js';
import { createEventsRoutes } from './events/events-routes.js';
import { startMembershipEvents } from './membership-events/membership-events.js';
import { ConnectedHostsService } from './connected-hosts/connected-hosts-service.js';
import { ConnectedHostsStore } from './connected-hosts/connected-hosts-store.js';
import { createConnectedHostsRoutes } from './connected-hosts/connected-hosts-routes.js';
import { StrataError } from '../lib/errors.js';
import { createVersionRoutes } from './version/version-routes.js';
import { InventoryReader } from './inventory/inventory-reader.js';
import { ClusterService } from './cluster/cluster-service.js';
import { createClusterRoutes } from './cluster/cluster-routes.js';
import { NodesService } from './nodes/nodes-service.js';
import { createNodesRoutes } from './nodes/nodes-routes.js';
import { ServersService } from './servers/servers-service.js';
import { createServersRoutes } from './servers/servers-routes.js';
import { NvmeDevicesService } from './nvme-devices/nvme-devices-service.js';
import { createNvmeDevicesRoutes } from './nvme-devices/nvme-devices-routes.js';

export interface RunningControlPlane {
  readonly instanceId: string;
  readonly bootstrap: BootstrapResult;
  readonly apiPort: number;
  readonly grpcPort: number;
  readonly election: LeaderElection;
  stop(): Promise<void>;
}

export async function startControlPlane(config: ControlPlaneConfig, logger: Logger): Promise<RunningControlPlane> {
  const instanceId = instanceIdOf(config);
  const etcd = createEtcdClient(config.etcdEndpoints);
  const bootstrap = await untilEtcdAnswers(logger, () =>
    bootstrapCluster({
      etcd,
      logger,
      instanceId,
      clusterName: config.clusterName,
      subsystemNqnPrefix: config.subsystemNqnPrefix,
      stateDir: config.stateDir,
      adminTokenTtlDays: config.adminTokenTtlDays,
    }),
  );

  // Stores and domain services.
  const auth = new Authenticator(new CredentialStore(etcd));
  const sessions = new AgentSessions();
  const inventory = new InventoryService(new InventoryStore(etcd), instanceId);
  const election = new LeaderElection(etcd, instanceId, logger.child({ component: 'leadership' }));
  if (config.volumePortMin > config.volumePortMax) {
    throw new StrataError('CONFIG_INVALID', `volumePortMin ${config.volumePortMin} is above volumePortMax ${config.volumePortMax}`);
  }
  const events = new EtcdEventLog(etcd, logger.child({ component: 'events' }));
  const leaderTasks = new LeaderTasks(election, [
    { name: 'event retention', start: async () => startEventRetention(etcd, logger.child({ component: 'event-retention' })) },
    {
      name: 'membership events',
      start: async () =>
        startMembershipEvents({ etcd, events, logger: logger.child({ component: 'membership-events' }), fencedWrite: (ops) => election.fencedWrite(ops) }),
    },
    {
      name: 'volume controller',
      start: async () => {
        const controller = new VolumeController({
          etcd,
          election,
          logger: logger.child({ component: 'volume-controller' }),
          events,
          clusterUUID: bootstrap.cluster.UUID,
          clusterSubsystemNQN: bootstrap.cluster.subsystemNQN,
          volumePorts: { min: config.volumePortMin, max: config.volumePortMax },
          overcommitRatio: config.overcommitRatio,
          creatingTimeoutMs: config.creatingTimeoutSeconds * 1000,
        });
        await controller.start();
        return controller;
      },
    },
  ], logger.child({ component: 'leader-tasks' }));
  leaderTasks.watch();

  // Transports. Listen first so the advertised endpoints carry the real ports (port 0 in tests).
  const volumeReports = new VolumeReportService(new VolumeStatusStore(etcd));
  const grpcServer = createAgentGrpcServer({ logger: logger.child({ component: 'agents' }), sessions, inventory, volumeReports, instanceId, clusterUUID: bootstrap.cluster.UUID });
  const grpcPort = await bindGrpcServer(grpcServer, config.grpcHost, config.grpcPort);
  const tls = config.tlsCert && config.tlsKey ? { cert: readFileSync(config.tlsCert), key: readFileSync(config.tlsKey) } : undefined;
  const httpServer: HttpServer = tls ? createHttpsServer(tls) : createHttpServer();
  httpServer.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(config.apiPort, config.apiHost, () => resolve());
  });
  const apiPort = (httpServer.address() as AddressInfo).port;

  const registry = new ControlPlaneRegistry(etcd, {
    instanceId,
    hostname: hostname(),
    apiEndpoint: `${config.advertiseAddress}:${apiPort}`,
    grpcEndpoint: `${config.advertiseAddress}:${grpcPort}`,
    version: productVersion,
    since: new Date().toISOString(),
  });
  const routers: Router[] = [
    createVersionRoutes({ auth }),
    createControlPlaneRoutes({ auth, registry }),
    ...resourceRoutes(etcd, auth, events),
  ];
  httpServer.on('request', createHttpApp(logger.child({ component: 'http' }), routers).callback());

  const lease = new KeptLease(etcd, {
    ttlSeconds: config.leaseTtlSeconds,
    logger: logger.child({ component: 'lease' }),
    onGranted: async (granted) => {
      await registry.register(granted);
      await election.start(granted);
    },
    onLost: () => election.leaseLost(),
  });
  await lease.start();
  logger.info({ instanceId, api: `${tls ? 'https' : 'http'}://${config.apiHost}:${apiPort}`, grpc: `${config.grpcHost}:${grpcPort}`, clusterUUID: bootstrap.cluster.UUID }, 'control plane started');

  return {
    instanceId,
    bootstrap,
    apiPort,
    grpcPort,
    election,
    async stop() {
      sessions.closeAll('control plane stopping');
      await new Promise<void>((resolve) => {
        httpServer.close(() => resolve());
        httpServer.closeAllConnections();
      });
      await new Promise<void>((resolve) => grpcServer.tryShutdown(() => resolve()));
      await leaderTasks.stop();
      await election.stop();
      await lease.stop();
      etcd.close();
      logger.info({ instanceId }, 'control plane stopped');
    },
  };
}

/** The resource folders' routes over their services and shared stores. */
function resourceRoutes(etcd: Etcd3, auth: Authenticator, _events: EventRecorder): Router[] {
  // One reader for all inventory views: it keeps the last snapshot and reads only changes.
  const inventory = new InventoryReader(etcd);
  return [
    createClusterRoutes({ auth, cluster: new ClusterService(inventory) }),
    createServersRoutes({ auth, servers: new ServersService(inventory) }),
    createNodesRoutes({ auth, nodes: new NodesService(inventory) }),
    createNvmeDevicesRoutes({ auth, devices: new NvmeDevicesService(inventory) }),
    createEventsRoutes({ auth, events: new EventsService(new EventStore(etcd), new EtcdProjectExistence(etcd)) }),
    createConnectedHostsRoutes({ auth, connectedHosts: new ConnectedHostsService(new ConnectedHostsStore(etcd)) }),
  ];
}

/** Retries `work` while etcd cannot be reached, so a control plane may start before etcd. */
async function untilEtcdAnswers<T>(logger: Logger, work: () => Promise<T>): Promise<T> {
  let delay = 250;
  for (;;) {
    try {
      return await work();
    } catch (err) {
      if (!/GRPC|ClientRuntimeError|ECONNREFUSED|Unavailable/i.test(String((err as Error).constructor?.name) + String((err as Error).message))) throw err;
      logger.warn({ err: (err as Error).message }, 'etcd not reachable yet; retrying');
      await sleep(delay);
      delay = Math.min(delay * 2, 5000);
    }
  }
}
