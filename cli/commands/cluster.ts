// `strata cluster info`: GET /api/v2/cluster (spec 2.7, 4.4; needs a cluster role). Project tokens
// may read only the tenant view, /api/v2/clusterinfo, which this command does not use: an admin
// wants health and capacity, and a 403 says plainly that the token is not an admin's.
import type { Command } from 'commander';
import { contextOf } from '../context.js';
import { list } from '../output.js';

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
}
