// `strata servers list|get`: GET /api/v2/servers[/{UUID}] (spec 2.16, 4.12; needs a cluster role).
import type { Command } from 'commander';
import { contextOf } from '../context.js';
import { apiPath } from '../api-client.js';
import { list, type Column } from '../output.js';

interface Server {
  UUID: string;
  name: string;
  state: string;
  health: string;
  NodesUUIDs: string[];
  ProductVersion: string;
  ServerEndpoints: string[];
}

export function registerServerCommands(program: Command): void {
  const servers = program.command('servers').description('servers (machines running an agent)');
  servers
    .command('list')
    .description('list servers')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ servers: Server[] }>('/servers');
      print.list(answer, answer.servers, serverColumns, 'no servers (no agent has joined yet)');
    });
  servers
    .command('get <uuid>')
    .description('show one server')
    .action(async (uuid: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const server = await client.get<Server>(apiPath`/servers/${uuid}`);
      print.list(server, [server], serverColumns, '');
    });
}

const serverColumns: Column<Server>[] = [
  { header: 'UUID', value: (s) => s.UUID },
  { header: 'NAME', value: (s) => s.name },
  { header: 'STATE', value: (s) => s.state },
  { header: 'HEALTH', value: (s) => s.health },
  { header: 'NODES', value: (s) => String(s.NodesUUIDs.length) },
  { header: 'VERSION', value: (s) => s.ProductVersion },
  { header: 'ENDPOINTS', value: (s) => list(s.ServerEndpoints) },
];
