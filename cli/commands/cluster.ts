// `strata cluster info`: GET /api/v2/cluster (spec 2.7, 4.4; needs a cluster role): an admin wants
// health and capacity, and a 403 says plainly that the token is not an admin's. `cluster
// tenant-info` is the view any token may read (GET /api/v2/clusterinfo); `cluster version` the
// API version (GET /api/v2/version); `cluster control-planes` the control plane instances and the
// active cluster manager (GET /api/v2/controlPlanes, a Strata extension); `cluster etcd-scan`
// starts an etcd corruption check (POST /api/v2/cluster/etcdCorruption/scan; docs/api.md).
import type { Command } from 'commander';
import type { ControlPlaneRecord } from '../../lib/records.js';
import { contextOf } from '../context.js';
import { formatTime, list } from '../output.js';

interface ClusterInfo {
  UUID: string;
  subsystemNQN: string;
  currentMaxReplicas: number;
  supportedMaxReplicas: number;
  apiEndpoints: string[];
  discoveryEndpoints: string[];
  nvmeEndpoints: string[];
}
/** A control plane instance as GET /controlPlanes lists it (a type only: the CLI loads no daemon code). */
interface ControlPlane extends ControlPlaneRecord {
  isActiveClusterManager: boolean;
}

interface Cluster {
  UUID: string;
  clusterName: string;
  subsystemNQN: string;
  currentMaxReplicas: number;
  supportedMaxReplicas: number;
  health: { state: string; numDegradedVolumes: number; numReadOnlyVolumes: number; numNotAvailableVolumes: number; numInactiveNodes: number; numHealthyVolumes: number };
  statistics: Record<string, string | number>;
  MinVersionInCluster: string;
  MaxAllowedVersion: string;
  apiEndpoints: string[];
  discoveryEndpoints: string[];
  inBandAuthMode: string;
  encryptionStatus: { encryptionState: string };
}

export function registerClusterCommands(program: Command): void {
  const cluster = program.command('cluster').description('the cluster as a whole');
  cluster
    .command('info')
    .description('identity, health, endpoints and capacity of the cluster (needs a cluster role)')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const info = await client.get<Cluster>('/cluster');
      if (print.format === 'json') {
        print.json(info);
        return;
      }
      const h = info.health;
      const s = info.statistics;
      print.fields([
        ['Name', info.clusterName],
        ['UUID', info.UUID],
        ['Subsystem NQN', info.subsystemNQN],
        ['Health', `${h.state} (healthy volumes ${h.numHealthyVolumes}, degraded ${h.numDegradedVolumes}, read-only ${h.numReadOnlyVolumes}, not available ${h.numNotAvailableVolumes}; inactive nodes ${h.numInactiveNodes})`],
        ['Replicas', `up to ${info.currentMaxReplicas} now (supported ${info.supportedMaxReplicas})`],
        ['Version', `${info.MinVersionInCluster || '-'} (lowest in cluster; upgradable to ${info.MaxAllowedVersion || '-'})`],
        ['API endpoints', list(info.apiEndpoints)],
        ['Discovery', list(info.discoveryEndpoints)],
        ['Managed storage', print.size(s['managedPhysicalStorage'] as string)],
        ['Effective storage', print.size(s['effectivePhysicalStorage'] as string)],
        ['Provisioned', print.size(s['logicalStorage'] as string)],
        ['Used (logical)', print.size(s['logicalUsedStorage'] as string)],
        ['Used (physical)', print.size(s['physicalUsedStorage'] as string)],
        ['Free (physical)', print.size(s['freePhysicalStorage'] as string)],
        ['Compression ratio', String(s['compressionRatio'] ?? '-')],
        ['In-band auth', info.inBandAuthMode],
        ['Encryption', info.encryptionStatus.encryptionState],
      ]);
    });

  cluster
    .command('tenant-info')
    .description('what any token may read of the cluster: identity, replicas, endpoints')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const info = await client.get<ClusterInfo>('/clusterinfo');
      if (print.format === 'json') print.json(info);
      else
        print.fields([
          ['UUID', info.UUID],
          ['Subsystem NQN', info.subsystemNQN],
          ['Replicas', `up to ${info.currentMaxReplicas} now (supported ${info.supportedMaxReplicas})`],
          ['API endpoints', list(info.apiEndpoints)],
          ['Discovery', list(info.discoveryEndpoints)],
          ['NVMe endpoints', list(info.nvmeEndpoints)],
        ]);
    });
  cluster
    .command('version')
    .description('the REST API version the control plane serves')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ apiVersion: string }>('/version');
      print.done(answer, answer.apiVersion);
    });
  cluster
    .command('openapi')
    .description('the OpenAPI 3.1 document of /api/v2 the control plane serves (JSON)')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<object>('/openapi.json');
      print.done(answer, JSON.stringify(answer, null, 2));
    });
  cluster
    .command('control-planes')
    .description('the control plane instances and which one is the active cluster manager')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ controlPlanes: ControlPlane[] }>('/controlPlanes');
      print.list(answer, answer.controlPlanes, [
        { header: 'INSTANCE', value: (c) => c.instanceId },
        { header: 'HOSTNAME', value: (c) => c.hostname },
        { header: 'API', value: (c) => c.apiEndpoint },
        { header: 'GRPC', value: (c) => c.grpcEndpoint },
        { header: 'VERSION', value: (c) => c.version },
        { header: 'SINCE', value: (c) => formatTime(c.since) },
        { header: 'MANAGER', value: (c) => (c.isActiveClusterManager ? 'active' : '-') },
      ], 'no control planes registered');
    });
  cluster
    .command('etcd-scan')
    .description('start a check of every etcd member for corruption (the result is an event: `strata events list`)')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.post<unknown>('/cluster/etcdCorruption/scan', {});
      print.done(answer, 'etcd corruption scan started; its result is reported as an event (strata events list)');
    });
}
