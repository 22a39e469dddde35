// `strata devices list`: GET /api/v2/nvmeDevices, answer key `NvmeDevices` (spec 2.13, 4.9; needs
// a cluster role).
import type { Command } from 'commander';
import { contextOf } from '../context.js';

interface NvmeDevice {
  serial: string;
  model: string;
  size: string;
  state: string;
  deviceUsage: string;
  name: string;
  nodeUUID: string;
  serverUUID: string;
}

export function registerDeviceCommands(program: Command): void {
  const devices = program.command('devices').description('NVMe devices the agents report');
  devices
    .command('list')
    .description('list NVMe devices')
    .option('--node <UUID>', 'only devices of this node')
    .option('--server <UUID>', 'only devices of this server')
    .action(async (options: { node?: string; server?: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ NvmeDevices: NvmeDevice[] }>('/nvmeDevices', { nodeUUID: options.node, serverUUID: options.server });
      print.list(answer, answer.NvmeDevices, [
        { header: 'SERIAL', value: (d) => d.serial },
        { header: 'MODEL', value: (d) => d.model },
        { header: 'SIZE', value: (d) => print.size(d.size) },
        { header: 'USAGE', value: (d) => d.deviceUsage },
        { header: 'STATE', value: (d) => d.state },
        { header: 'NAME', value: (d) => d.name },
        { header: 'NODE', value: (d) => d.nodeUUID },
        { header: 'SERVER', value: (d) => d.serverUUID },
      ], 'no NVMe devices');
    });
}
