// `strata nodes list|get`: GET /api/v2/nodes[/{UUID}] (spec 2.12, 4.8; needs a cluster role).
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import type { Column, Printer } from '../output.js';

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
      print.list(answer, answer.nodes, nodeColumns(print), 'no nodes (no agent has joined yet)');
    });
  nodes
    .command('get <uuid>')
    .description('show one node (STATE shows a local rebuild\'s progress)')
    .action(async (uuid: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const node = await client.get<Node>(apiPath`/nodes/${uuid}`);
      print.list(node, [node], nodeColumns(print), '');
    });
}

function nodeColumns(print: Printer): Column<Node>[] {
  return [
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
  ];
}
