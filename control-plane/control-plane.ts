// The control plane's composition root: the etcd client, bootstrap, the two transports (REST
// and the agents' gRPC), leadership and its tasks, and the order of start and stop.
// resources.ts builds the resources' services and routers. main.ts adds the process concerns.
import { readFileSync } from 'node:fs';
import type { IncomingMessage, Server as HttpServer, ServerResponse } from 'node:http';
import { hostname } from 'node:os';
import type { AddressInfo } from 'node:net';
import { StrataError, toStrataError } from '../lib/errors.js';
import { createEtcdClient, etcdTlsOf } from '../lib/etcd/client.js';
import { KeptLease } from '../lib/etcd/lease.js';
import { LeaderStore } from '../lib/etcd/leader-store.js';
import { readMemberStatus } from '../lib/etcd/member-status.js';
import { startMetricsServer } from '../lib/metrics.js';
import type { Logger } from '../lib/logger.js';
import { productVersion } from '../lib/paths.js';
import { retry } from '../lib/retry.js';
import { AgentAuthenticator } from './agents/agent-authenticator.js';
import { AgentSessionStore } from './agents/agent-session-store.js';
import { AgentSessions } from './agents/agent-sessions.js';
import { SessionRouting } from './agents/session-routing.js';
import { bindGrpcServer, createAgentGrpcServer } from './agents/agent-grpc-server.js';
import { InventoryService } from './agents/inventory-service.js';
import { InventoryStore } from './agents/inventory-store.js';
import { NodePoolStore } from './agents/node-pool-store.js';
import { PoolReportService } from './agents/pool-report-service.js';
import { VolumeReportService } from './agents/volume-report-service.js';
import { VolumeStatusStore } from './agents/volume-status-store.js';
import { Authenticator } from './auth/authenticator.js';
import { bootstrapCluster, type BootstrapResult } from './bootstrap/bootstrap.js';
import { BootstrapStore } from './bootstrap/bootstrap-store.js';
import { ControlPlaneStore } from './control-planes/control-plane-store.js';
import { instanceIdOf, type ControlPlaneConfig } from './config.js';
import { EtcdCorruptionStore } from './etcd-corruption/etcd-corruption-store.js';
import { createHttpApp } from './http/app.js';
import { createApiServer } from './http/server.js';
import { writeError } from '../lib/http-errors.js';
import { InventoryReader } from './inventory/inventory-reader.js';
import { LeaderElection } from './leadership/leader-election.js';
import { LeaderTasks } from './leadership/leader-tasks.js';
import { observeControlPlane } from './metrics/control-plane-metrics.js';
import { buildResources } from './resources.js';
import { prepareControlPlaneTls } from './tls/control-plane-tls.js';
import { AgentSecretStore } from '../lib/etcd/agent-secret-store.js';
import { ClusterCaStore } from '../lib/etcd/cluster-ca-store.js';
import { NodeStore } from '../lib/etcd/node-store.js';
import { WatchCache } from './watch-cache/watch-cache.js';
import { HostSecretKey } from './in-band-auth/host-secret-key.js';

export interface RunningControlPlane {
  readonly instanceId: string;
  readonly bootstrap: BootstrapResult;
  readonly apiPort: number;
  readonly grpcPort: number;
  /** Port of GET /metrics; undefined when it could not listen (logged). */
  readonly metricsPort: number | undefined;
  readonly election: LeaderElection;
  stop(): Promise<void>;
}

export async function startControlPlane(config: ControlPlaneConfig, logger: Logger): Promise<RunningControlPlane> {
  if (config.volumePortMin > config.volumePortMax) {
    throw new StrataError('CONFIG_INVALID', `volumePortMin ${config.volumePortMin} is above volumePortMax ${config.volumePortMax}`);
  }
  const instanceId = instanceIdOf(config);
  const etcd = createEtcdClient(config.etcdEndpoints, undefined, etcdTlsOf(config));
  const bootstrap = await untilEtcdAnswers(logger, () =>
    bootstrapCluster({
      store: new BootstrapStore(etcd),
      logger,
      instanceId,
      clusterName: config.clusterName,
      subsystemNqnPrefix: config.subsystemNqnPrefix,
      stateDir: config.stateDir,
      adminTokenTtlDays: config.adminTokenTtlDays,
    }),
  );
  const child = (component: string) => logger.child({ component });
  const tls = await untilEtcdAnswers(logger, () => prepareControlPlaneTls(config, new ClusterCaStore(etcd), bootstrap.cluster.UUID, instanceId));

  // The agents' gRPC service. Listen first so advertised endpoints carry real ports (0 in tests).
  // The agent secret is read (created, on a cluster that has none yet) before agents can call.
  const agentAuthenticator = new AgentAuthenticator({ secrets: new AgentSecretStore(etcd), nodes: new NodeStore(etcd), clusterUUID: bootstrap.cluster.UUID, logger: child('agent-auth') });
  await untilEtcdAnswers(logger, () => agentAuthenticator.start());
  // Each session is recorded under this instance's lease (granted below), so that any control
  // plane can forward a request that needs it here (agents/session-routing.ts).
  const sessionStore = new AgentSessionStore(etcd, instanceId, child('agent-sessions'));
  const sessions = new AgentSessions(sessionStore);
  const grpcServer = createAgentGrpcServer({
    logger: child('agents'),
    sessions,
    authenticator: agentAuthenticator,
    inventory: new InventoryService(new InventoryStore(etcd), instanceId),
    volumeReports: new VolumeReportService(new VolumeStatusStore(etcd)),
    poolReports: new PoolReportService(new NodePoolStore(etcd)),
    instanceId,
    clusterUUID: bootstrap.cluster.UUID,
  });
  const grpcPort = await bindGrpcServer(grpcServer, config.grpcHost, config.grpcPort, tls.grpc);

  // The REST API: bound before the routes exist, so the registry can advertise its port.
  // Until the routes exist (the watch cache loads first), every request gets a 503 with the JSON
  // error body and Retry-After, never silence: a client polling a starting control plane retries.
  let handle: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const httpServer: HttpServer = createApiServer({
    headersTimeoutMs: config.apiHeadersTimeoutSeconds * 1000,
    requestTimeoutMs: config.apiRequestTimeoutSeconds * 1000,
    keepAliveTimeoutMs: config.apiKeepAliveTimeoutSeconds * 1000,
    maxConnections: config.apiMaxConnections,
  }, tls.rest);
  httpServer.on('request', (req, res) => {
    if (handle) return handle(req, res);
    writeError(res, new StrataError('UNAVAILABLE', 'the control plane is starting; retry'), { 'Retry-After': '1' });
  });
  await new Promise<void>((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(config.apiPort, config.apiHost, () => resolve());
  });
  const apiPort = (httpServer.address() as AddressInfo).port;

  const registry = new ControlPlaneStore(etcd, {
    instanceId,
    hostname: hostname(),
    apiEndpoint: `${config.advertiseAddress}:${apiPort}`,
    apiScheme: tls.rest ? 'https' : 'http',
    grpcEndpoint: `${config.advertiseAddress}:${grpcPort}`,
    version: productVersion,
    since: new Date().toISOString(),
  });
  // The process's one watched state: the API, leadership and the leader's tasks all read it.
  const cache = new WatchCache(etcd, child('watch-cache'));
  await untilEtcdAnswers(logger, () => cache.start());
  const election = new LeaderElection(new LeaderStore(etcd, cache.state), instanceId, child('leadership'));
  const auth = new Authenticator(cache);
  const resources = buildResources({
    etcd,
    cache,
    auth,
    election,
    registry,
    cluster: bootstrap.cluster,
    config,
    ports: { api: apiPort, grpc: grpcPort },
    apiCaFile: tls.restCaFile,
    hostSecretKey: HostSecretKey.load(config.stateDir),
    sessions,
    routing: new SessionRouting({
      sessions,
      store: sessionStore,
      registry,
      instanceId,
      clusterCa: readFileSync(tls.caPath, 'utf8'),
      logger: child('session-routing'),
    }),
    logger,
  });
  handle = createHttpApp(child('http'), resources.routers, { beforeApiRoutes: () => cache.sync(), authenticate: (headers) => auth.authenticate(headers) }).callback();

  // Membership and leadership: one lease for both, granted again whenever it is lost.
  const leaderTasks = new LeaderTasks(election, resources.leaderTasks, child('leader-tasks'));
  leaderTasks.watch();
  const lease = new KeptLease(etcd, {
    ttlSeconds: config.leaseTtlSeconds,
    logger: child('lease'),
    onGranted: async (granted) => {
      await registry.register(granted);
      await sessionStore.register(granted);
      await election.start(granted);
    },
    onLost: () => election.leaseLost(),
  });
  await lease.start();
  const unobserve = observeControlPlane({ cache, inventory: new InventoryReader(cache), sessions, election, etcdStatus: () => readMemberStatus(etcd), corruption: new EtcdCorruptionStore(etcd) });
  const metrics = await startMetricsServer(config.metricsHost, config.metricsPort, child('metrics'));
  logger.info(
    { instanceId, api: `${tls.rest ? 'https' : 'http'}://${config.apiHost}:${apiPort}`, caFile: tls.caPath, grpc: `${config.grpcHost}:${grpcPort}`, clusterUUID: bootstrap.cluster.UUID },
    'control plane started',
  );

  return {
    instanceId,
    bootstrap,
    apiPort,
    grpcPort,
    metricsPort: metrics.port,
    election,
    async stop() {
      await metrics.close();
      unobserve();
      sessions.closeAll('control plane stopping');
      await new Promise<void>((resolve) => {
        httpServer.close(() => resolve());
        httpServer.closeAllConnections();
      });
      await new Promise<void>((resolve) => grpcServer.tryShutdown(() => resolve()));
      await leaderTasks.stop();
      await election.stop();
      await lease.stop();
      await cache.stop();
      etcd.close();
      logger.info({ instanceId }, 'control plane stopped');
    },
  };
}

/** Retries `work` while etcd cannot be reached, so a control plane may start before etcd. */
function untilEtcdAnswers<T>(logger: Logger, work: () => Promise<T>): Promise<T> {
  return retry(work, {
    backoff: { initialMs: 250, maxMs: 5000, jitter: 0 },
    // The error registry knows which etcd3 errors mean "etcd cannot be reached".
    retryIf: (err) => toStrataError(err).code === 'UNAVAILABLE',
    onRetry: (err) => logger.warn({ err: err.message }, 'etcd not reachable yet; retrying'),
  });
}
