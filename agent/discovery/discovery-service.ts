// The agent's discovery controller as one piece: the listener (bound first, so the node record
// advertises the endpoint only if something listens there), the cluster's paths from etcd, and
// the per-host log pages between them. agent/agent.ts owns its life.
import type { Logger } from '../../lib/logger.js';
import type { VolumeReportSource } from '../datapath/reconcile/volume-report.js';
import { ClusterPaths } from './cluster-paths.js';
import type { ClusterPathsStore } from './cluster-paths-store.js';
import type { ControllerLimits } from './controller.js';
import { HostLogs } from './host-logs.js';
import type { PresentedHosts } from './presented-hosts.js';
import { DiscoveryServer } from './server.js';

export interface DiscoverySettings {
  readonly discoveryListenAddress: string;
  readonly discoveryPort: number;
  readonly discoveryMaxConnections: number;
}

export interface DiscoveryServiceDeps {
  /** The cluster's paths as etcd has them (cluster-paths-store.ts). */
  readonly store: ClusterPathsStore;
  readonly serverUUID: string;
  readonly nodeUUIDs: readonly string[];
  readonly firmware: string;
  readonly logger: Logger;
  readonly limits?: Partial<ControllerLimits>;
  /** Where the controller records the host NQNs hosts present (the data path names connected hosts from it). */
  readonly presented?: PresentedHosts;
  /** Tests: how long the view waits for the data path's first report (default 30 s). */
  readonly localReportGraceMs?: number;
}

export interface DiscoveryService {
  /** The port the controller listens on; undefined when it could not listen (not advertised). */
  readonly port: number | undefined;
  /** Starts following etcd and this node's data path; log pages are served from then on. */
  start(localReports: VolumeReportSource): void;
  stop(): Promise<void>;
  /** For tests: the listener and the cluster's paths. */
  readonly server: DiscoveryServer | undefined;
  readonly paths: ClusterPaths;
}

export async function openDiscoveryService(settings: DiscoverySettings, deps: DiscoveryServiceDeps): Promise<DiscoveryService> {
  const { logger } = deps;
  const logs = new HostLogs();
  const paths = new ClusterPaths({
    store: deps.store,
    logger,
    localServerUUID: deps.serverUUID,
    localNodeUUIDs: deps.nodeUUIDs,
    ...(deps.localReportGraceMs !== undefined ? { localReportGraceMs: deps.localReportGraceMs } : {}),
  });
  paths.onChange((view) => logs.setView(view));
  let server: DiscoveryServer | undefined;
  try {
    server = await DiscoveryServer.listen({
      listenAddress: settings.discoveryListenAddress,
      port: settings.discoveryPort,
      maxConnections: settings.discoveryMaxConnections,
      logs,
      identity: { serial: deps.serverUUID.replace(/-/g, '').slice(0, 20), model: 'Strata Discovery Controller', firmware: deps.firmware },
      ...(deps.limits ? { limits: deps.limits } : {}),
      ...(deps.presented ? { presented: deps.presented } : {}),
      logger,
    });
  } catch (err) {
    // The agent still serves volumes; hosts use another node's discovery endpoint.
    logger.error(
      { err, address: settings.discoveryListenAddress, port: settings.discoveryPort },
      'the NVMe/TCP discovery controller cannot listen; this node does not advertise a discovery endpoint',
    );
  }
  return {
    port: server?.port,
    server,
    paths,
    start: (localReports) => {
      if (server) paths.start(localReports);
    },
    stop: async () => {
      await server?.close();
      await paths.stop();
    },
  };
}
