// `strata nodes list`: GET /api/v2/nodes (spec 2.12, 4.8; needs a cluster role).
import type { Command } from 'commander';
import { contextOf } from '../context.js';

interface Node {
  UUID: string;
  name: string;
  state: string;
  status: string;
  hostname: string;
  nvmeEndpoint: string;
  serverUUID: string;
  numManagedDevices: number;
  inLocalRebuild: boolean;
  localRebuildProgress: number;
  statistics: { effectivePhysicalStorage: string; freePhysicalStorage: string; logicalStorage: string };
}

export function registerNodeCommands(program: Command): void {
  const nodes = program.command('nodes').description('storage nodes (one or more per server)');
  nodes
    .command('list')
    .description('list nodes with their state and capacity')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ nodes: Node[] }>('/nodes');
      print.list(answer, answer.nodes, [
        { header: 'UUID', value: (n) => n.UUID },
        { header: 'NAME', value: (n) => n.name },
        { header: 'STATE', value: (n) => (n.inLocalRebuild ? `${n.state} (rebuild ${n.localRebuildProgress}%)` : n.state) },
        { header: 'STATUS', value: (n) => n.status },
        { header: 'HOSTNAME', value: (n) => n.hostname },
        { header: 'NVME ENDPOINT', value: (n) => n.nvmeEndpoint },
        { header: 'DEVICES', value: (n) => String(n.numManagedDevices) },
        { header: 'CAPACITY', value: (n) => print.size(n.statistics.effectivePhysicalStorage) },
        { header: 'PROVISIONED', value: (n) => print.size(n.statistics.logicalStorage) },
        { header: 'FREE', value: (n) => print.size(n.statistics.freePhysicalStorage) },
      ], 'no nodes (no agent has joined yet)');
    });
}
