// `strata servers add <etcd-peer-url> --uuid <UUID> [--extend-cluster] [--reuse-ip]`: POST
// /api/v2/servers {serverEndpoints: [url], serverUUID, extendCluster, reuseIP} (spec 4.12; needs
// cluster write). Prints the new server (Creating until its agent joined and its etcd learner was
// promoted) and the settings the new server's etcd and agent start with (docs/install.md).
import { randomUUID } from 'node:crypto';
import type { Command } from 'commander';
import { contextOf } from '../context.js';
import { list } from '../output.js';

interface Server {
  UUID: string;
  name: string;
  state: string;
  ServerEndpoints: string[];
  etcdMemberInfo: { state: string; role: string };
}

export function registerServerAddCommand(program: Command): void {
  const servers = program.commands.find((c) => c.name() === 'servers') ?? program.command('servers').description('servers (machines running an agent)');
  servers
    .command('add')
    .description('add a server: its etcd member joins the cluster (as a learner, promoted once caught up)')
    .argument('<etcd-peer-url>', 'the new server\'s etcd peer URL, e.g. http://192.0.2.14:2380')
    .option('--uuid <UUID>', 'the new server\'s UUID (its agent\'s serverUUID setting; default: a new one)')
    .option('--extend-cluster', 'its nodes join Active and take new volumes (default: Unattached)')
    .option('--reuse-ip', 'skip the check that no server or etcd member uses the address yet')
    .action(async (peerURL: string, options: { uuid?: string; extendCluster?: boolean; reuseIp?: boolean }, command: Command) => {
      const { client, print } = contextOf(command);
      const server = await client.post<Server>('/servers', {
        serverEndpoints: [peerURL],
        serverUUID: options.uuid ?? randomUUID(),
        extendCluster: options.extendCluster === true,
        reuseIP: options.reuseIp === true,
      });
      if (print.format === 'json') return print.json(server);
      print.fields([
        ['UUID', server.UUID],
        ['state', server.state],
        ['endpoints', list(server.ServerEndpoints)],
        ['etcd member', `${server.etcdMemberInfo.role} ${server.etcdMemberInfo.state}`],
      ]);
      print.note(`start the new server's etcd with ETCD_INITIAL_CLUSTER_STATE=existing and the cluster's members (etcdctl member list) plus ${peerURL},`);
      print.note(`and its agent with "serverUUID": "${server.UUID}" (docs/install.md, "Adding another server later")`);
    });
}
