// The agent's settings: one flat spec (file + STRATA_* environment + --flags, see lib/config.ts).
// Defaults fit a single-node lab on 127.0.0.1; production units override the endpoints.
import { hostname as osHostname } from 'node:os';
import { z } from 'zod';
import { etcdTlsSettings } from '../lib/etcd/client.js';
import { loadConfig, settings, type ConfigOf, type LoadOptions, type SettingsSpec } from '../lib/config.js';
import { StrataError } from '../lib/errors.js';
import { UUID_PATTERN } from '../lib/contract/uuid.js';

/** host:port with a non-empty host and a numeric port (IPv6 hosts in brackets). */
const hostPortPattern = /^(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):(\d{1,5})$/;
const endpointList = () =>
  settings
    .list()
    .pipe(z.array(z.string().regex(hostPortPattern, 'expected host:port')).min(1, 'at least one endpoint is required'));

export const agentSettings = {
  etcdEndpoints: {
    description: 'etcd client endpoints (host:port), comma-separated',
    schema: endpointList(),
    default: ['127.0.0.1:2379'],
  },
  ...etcdTlsSettings,
  controlPlaneEndpoints: {
    description: 'control-plane gRPC endpoints (host:port) the agent reports to, tried in order',
    schema: endpointList(),
    default: ['127.0.0.1:7443'],
  },
  stateDir: {
    description: 'directory for the agent’s persistent state (identity.json)',
    schema: settings.string(),
    default: '/var/lib/strata/agent',
  },
  serverUuid: {
    description: 'the server UUID to take when the state dir has no identity yet: the serverUUID given to POST /api/v2/servers (empty: a new random one)',
    schema: z.string().trim().toLowerCase().refine((v) => v === '' || UUID_PATTERN.test(v), 'must be a UUID'),
    default: '',
  },
  sysfsRoot: {
    description: 'root of sysfs (tests point it at a fixture tree)',
    schema: settings.string(),
    default: '/sys',
  },
  mountsPath: {
    description: 'mount table used to find the devices that hold the OS',
    schema: settings.string(),
    default: '/proc/self/mounts',
  },
  swapsPath: {
    description: 'swap table used to find the devices that hold the OS',
    schema: settings.string(),
    default: '/proc/swaps',
  },
  advertiseAddress: {
    description: 'address (no port) other servers and hosts reach this server at',
    schema: settings.string().refine((v) => !/\s/.test(v), 'must not contain spaces'),
    default: '127.0.0.1',
  },
  nvmePort: { description: 'NVMe/TCP target port', schema: settings.port(), default: 4420 },
  metricsHost: { description: 'address the Prometheus metrics endpoint (GET /metrics) listens on', schema: settings.string(), default: '127.0.0.1' },
  metricsPort: { description: 'port of the Prometheus metrics endpoint (0: any free port)', schema: settings.port(), default: 9481 },
  discoveryPort: { description: 'NVMe/TCP discovery controller port (0: any free port, for tests)', schema: settings.port(), default: 8009 },
  discoveryListenAddress: {
    description: 'address the NVMe/TCP discovery controller listens on (0.0.0.0: every IPv4 address, :: every address)',
    schema: settings.string().refine((v) => /^[0-9a-fA-F.:]+$/.test(v), 'must be an IPv4 or IPv6 address'),
    default: '0.0.0.0',
  },
  discoveryMaxConnections: {
    description: 'most host connections the discovery controller holds at once; more are refused',
    schema: z.coerce.number().int().min(1).max(65536),
    default: 1024,
  },
  leaseTtlSeconds: {
    description: 'TTL of the membership lease: how long after the agent dies its server turns Inactive and its replicated volumes fail over; the agent fences itself after 65% of it without a renewal (docs/replication.md, "Timeouts")',
    schema: z.coerce.number().int().min(2).max(300),
    default: 5,
  },
  heartbeatSeconds: {
    description: 'interval of heartbeats on the control-plane session',
    schema: settings.positiveInt(),
    default: 5,
  },
  inventoryRescanSeconds: {
    description: 'interval of the NVMe/sysfs rescan; a changed inventory is reported at once',
    schema: settings.positiveInt(),
    default: 30,
  },
  nodesPerServer: {
    description: 'number of storage nodes this server hosts; raising it adds nodes, lowering it removes none',
    schema: z.coerce.number().int().min(1).max(16),
    default: 1,
  },
  failureDomain: {
    description: 'failure domain of this server’s nodes (empty: the hostname)',
    schema: z.string(),
    default: '',
  },
  maxNvmeDevices: {
    description: 'maximum number of data devices a node may manage',
    schema: settings.positiveInt(),
    default: 32,
  },
  dataDevices: {
    description: 'serials of the NVMe devices the (first) node manages at creation, comma-separated',
    schema: settings.list(),
    default: [] as string[],
  },
  journalDevice: {
    description: 'serial of the journal NVMe device, empty for none',
    schema: z.string().trim(),
    default: '',
  },
  poolDir: {
    description: 'directory of the file storage pool that holds volume backings (one subdirectory per node)',
    schema: settings.string(),
    default: '/var/lib/strata/pool',
  },
  volumeListenAddress: {
    description: 'address the volumes’ NVMe/TCP ports listen on (0.0.0.0: every IPv4 address)',
    schema: settings.string().refine((v) => /^[0-9a-fA-F.:]+$/.test(v), 'must be an IPv4 or IPv6 address'),
    default: '0.0.0.0',
  },
  volumePortMin: {
    description: 'lowest volume port (and nvmet port id) this agent owns; must match the control plane’s volumePortMin',
    schema: settings.port().min(1024),
    default: 20000,
  },
  volumePortMax: {
    description: 'highest volume port (and nvmet port id) this agent owns; must match the control plane’s volumePortMax',
    schema: settings.port().min(1024),
    default: 31999,
  },
  replicationPort: {
    description: 'TCP port (and nvmet port id) this node exports its copies of replicated volumes on, to their primaries only; outside the volume port range',
    schema: settings.port().min(1024),
    default: 4421,
  },
  replicationAdvertiseEndpoint: {
    description: 'host:port other nodes reach the replication port at (default: advertiseAddress:replicationPort)',
    schema: z.string().trim().refine((v) => v === '' || /^\S+:\d+$/.test(v), 'must be host:port'),
    default: '',
  },
  replicaLossGraceSeconds: {
    description: 'a primary waits this long for a lost replica to come back before it records the copy out of sync and writes on without it (writes wait meanwhile)',
    schema: z.coerce.number().min(0.5).max(60),
    default: 2,
  },
  replicaBitmapChunkKib: {
    description: "md write-intent bitmap chunk of a new replicated volume's mirror: a copy that was away resyncs every chunk written meanwhile, in whole (a power of two, 64 KiB-64 MiB)",
    schema: z.coerce.number().int().min(64).max(65536).refine((v) => (v & (v - 1)) === 0, 'must be a power of two'),
    default: 1024,
  },
  reconcileIntervalSeconds: {
    description: 'interval of the full data-path pass (assignments re-read, kernel target and pool checked); changes apply at once',
    schema: settings.positiveInt(),
    default: 30,
  },
  hostname: {
    description: 'hostname reported for this server',
    schema: settings.string(),
    default: osHostname(),
  },
  logLevel: { description: 'log level', schema: settings.logLevel(), default: 'info' },
} satisfies SettingsSpec;

export type AgentConfig = ConfigOf<typeof agentSettings>;

export const agentProgram = {
  program: 'strata-agent',
  summary: 'Strata storage agent: server membership, NVMe inventory, the data path (kernel NVMe target + storage pool) and the control-plane session',
} as const;

/**
 * Fills defaults that depend on other settings and checks cross-setting rules. Call it on the
 * result of loadConfig/loadConfigOrExit with agentSettings.
 */
export function resolveAgentConfig(raw: AgentConfig): AgentConfig {
  const resolved: AgentConfig = { ...raw, failureDomain: raw.failureDomain.trim() || raw.hostname };
  if (resolved.journalDevice !== '' && resolved.dataDevices.includes(resolved.journalDevice)) {
    throw new StrataError(
      'CONFIG_INVALID',
      `invalid configuration: journalDevice ${resolved.journalDevice} is also listed in dataDevices`,
    );
  }
  if (resolved.volumePortMin > resolved.volumePortMax) {
    throw new StrataError('CONFIG_INVALID', `invalid configuration: volumePortMin ${resolved.volumePortMin} is above volumePortMax ${resolved.volumePortMax}`);
  }
  if (resolved.replicationPort >= resolved.volumePortMin && resolved.replicationPort <= resolved.volumePortMax) {
    throw new StrataError('CONFIG_INVALID', `invalid configuration: replicationPort ${resolved.replicationPort} is inside the volume port range ${resolved.volumePortMin}-${resolved.volumePortMax}`);
  }
  if (new Set(resolved.dataDevices).size !== resolved.dataDevices.length) {
    throw new StrataError('CONFIG_INVALID', 'invalid configuration: dataDevices lists a serial twice');
  }
  return Object.freeze(resolved);
}

/** loadConfig + resolveAgentConfig, for tests and launchers that build the config in code. */
export function loadAgentConfig(options: Partial<Pick<LoadOptions, 'argv' | 'env'>> = {}): AgentConfig {
  return resolveAgentConfig(loadConfig(agentSettings, { ...agentProgram, ...options }));
}
