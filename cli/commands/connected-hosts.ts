// `strata connected-hosts list|get` (GET /connectedHosts[/{hostNQN}]; docs/connected-hosts.md).
import type { Command } from 'commander';
import type { ConnectedHostWire } from '../../control-plane/connected-hosts/connected-hosts-service.js';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { list } from '../output.js';

/** The API's connected host (a type only: the CLI loads no control-plane code). */
type ConnectedHost = ConnectedHostWire;

const hostColumns = [
  { header: 'HOST NQN', value: (h: ConnectedHost) => h.hostNQN || '(not known)' },
  { header: 'NQN FROM', value: (h: ConnectedHost) => h.hostNQNSource },
  { header: 'ADDRESS', value: (h: ConnectedHost) => h.iPAddress },
  { header: 'VOLUMES', value: (h: ConnectedHost) => list(h.volumeUUIDs) },
  { header: 'CONNECTED NODES', value: (h: ConnectedHost) => list(h.connectedNodesUUID) },
  { header: 'UNCONNECTED NODES', value: (h: ConnectedHost) => list(h.unconnectedNodesUUID) },
];

export function registerConnectedHostCommands(program: Command): void {
  const hosts = program.command('connected-hosts').description('hosts connected to the cluster\'s volumes');
  hosts
    .command('list')
    .description('list every live connection by host (a host whose NQN is not known: by address)')
    .option('--volume <UUID>', 'only the hosts connected to this volume')
    .action(async (options: { volume?: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ connectedHosts: ConnectedHost[] }>('/connectedHosts', { volumeUUID: options.volume });
      print.list(answer, answer.connectedHosts, hostColumns, 'no connected hosts');
    });
  hosts
    .command('get <hostNQN>')
    .description('show one connected host')
    .action(async (hostNQN: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const host = await client.get<ConnectedHost>(apiPath`/connectedHosts/${hostNQN}`);
      print.list(host, [host], hostColumns, '');
    });
}
