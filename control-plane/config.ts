// The control plane's settings. `strata-control-plane --help` lists each with its env and flag.
import { hostname } from 'node:os';
import { z } from 'zod';
import { loadConfigOrExit, settings, type ConfigOf, type LoadOptions } from '../lib/config.js';
import { etcdTlsSettings } from '../lib/etcd/client.js';

export const controlPlaneSettings = {
  etcdEndpoints: { description: 'etcd client endpoints (host:port, comma-separated)', schema: settings.list(), default: ['127.0.0.1:2379'] },
  ...etcdTlsSettings,
  apiHost: { description: 'address the REST API listens on', schema: settings.string(), default: '127.0.0.1' },
  apiPort: { description: 'port of the REST API', schema: settings.port(), default: 8080 },
  metricsHost: { description: 'address the Prometheus metrics endpoint (GET /metrics) listens on', schema: settings.string(), default: '127.0.0.1' },
  metricsPort: { description: 'port of the Prometheus metrics endpoint (0: any free port)', schema: settings.port(), default: 9480 },
  grpcHost: { description: 'address the agents gRPC service listens on', schema: settings.string(), default: '127.0.0.1' },
  grpcPort: { description: 'port of the agents gRPC service', schema: settings.port(), default: 7443 },
  advertiseAddress: { description: 'host clients and agents reach this instance at (in apiEndpoints)', schema: settings.string(), default: '127.0.0.1' },
  stateDir: { description: 'directory for the root key and admin token written at bootstrap', schema: settings.string(), default: '/var/lib/strata/control-plane' },
  clusterName: { description: 'cluster name recorded at bootstrap (first start on an empty etcd only)', schema: settings.string(), default: 'strata' },
  subsystemNqnPrefix: { description: 'NQN prefix for the cluster subsystem NQN (the cluster UUID is appended)', schema: z.string().regex(/^nqn\.\d{4}-\d{2}\.[a-z0-9.-]+$/, 'must look like nqn.YYYY-MM.reverse.domain'), default: 'nqn.2024-01.io.strata' },
  adminTokenTtlDays: { description: 'lifetime of the admin token minted at bootstrap', schema: settings.positiveInt(), default: 365 },
  leaseTtlSeconds: { description: 'TTL of this instance\'s etcd lease (leadership and registration)', schema: settings.positiveInt().min(2), default: 10 },
  instanceId: { description: 'stable id of this instance (default: hostname:apiPort)', schema: z.string().optional(), default: undefined },
  tlsCert: { description: 'PEM certificate file (with its chain) the REST API serves instead of the one this instance issues from the cluster CA; set with tlsKey', schema: z.string().optional(), default: undefined },
  tlsKey: { description: 'PEM private key file for tlsCert', schema: z.string().optional(), default: undefined },
  tlsNames: { description: 'more host names or IP addresses for the certificate this instance issues itself (it always has advertiseAddress, apiHost, grpcHost, the hostname, localhost and 127.0.0.1)', schema: settings.list(), default: [] },
  apiInsecureHttp: { description: 'DEVELOPMENT ONLY: serve the REST API over plain HTTP (tokens travel in clear text)', schema: settings.boolean(), default: false },
  apiHeadersTimeoutSeconds: { description: 'the REST API closes a connection with 408 when a request line and headers take longer than this', schema: settings.positiveInt().max(3600), default: 10 },
  apiRequestTimeoutSeconds: { description: 'the REST API closes a connection with 408 when a whole request (headers and body) takes longer than this', schema: settings.positiveInt().max(3600), default: 30 },
  apiKeepAliveTimeoutSeconds: { description: 'the REST API closes a kept-alive connection idle this long', schema: settings.positiveInt().max(3600), default: 65 },
  apiMaxConnections: { description: 'concurrent connections the REST API accepts; more are closed as they arrive', schema: settings.positiveInt(), default: 1024 },
  volumePortMin: { description: 'lowest TCP port a volume is exported on (each volume has its own port)', schema: settings.port().min(1024), default: 20000 },
  volumePortMax: { description: 'highest TCP port a volume is exported on (below 32768: Linux hands out ephemeral ports from there)', schema: settings.port().min(1024), default: 31999 },
  overcommitRatio: { description: 'how many times its capacity a node may have allocated to volumes (1 = no thin overcommit)', schema: z.coerce.number().min(1).max(100), default: 1 },
  creatingTimeoutSeconds: { description: 'a volume not placed and served within this time becomes Failed', schema: settings.positiveInt(), default: 120 },
  permanentFailureTimeoutSeconds: {
    description: 'a node Inactive this long is a permanent failure: the copies of replicated volumes it held are re-created on other nodes when capacity allows (not while the fail-in-place feature flag is on); 0 = never',
    schema: z.coerce.number().int().min(0),
    default: 3600,
  },
  maxNodeCommandsInProgress: {
    description: 'node stop/start/restart/replace commands that may be in progress in the cluster at once; one more is refused with 429',
    schema: settings.positiveInt(),
    default: 2,
  },
  nodeReplaceTimeoutSeconds: {
    description: 'a node replace not finished within this time fails: the copies it moved go back to the source (NodeReplaceFailed); 0 = never',
    schema: z.coerce.number().int().min(0),
    default: 86400,
  },
  nodeReplaceTargetGraceSeconds: {
    description: 'a node replace whose target node has been Inactive this long fails (its moved copies go back to the source)',
    schema: settings.positiveInt(),
    default: 60,
  },
  logLevel: { description: 'log level', schema: settings.logLevel(), default: 'info' },
} as const;

export type ControlPlaneConfig = ConfigOf<typeof controlPlaneSettings>;

export function loadControlPlaneConfig(options: Partial<LoadOptions> = {}): ControlPlaneConfig {
  return loadConfigOrExit(controlPlaneSettings, {
    program: 'strata-control-plane',
    summary: 'Strata control plane: REST API, agent gRPC service, active cluster manager',
    ...options,
  });
}

export function instanceIdOf(config: ControlPlaneConfig): string {
  return config.instanceId ?? `${hostname()}:${config.apiPort}`;
}
