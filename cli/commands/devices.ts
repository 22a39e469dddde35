// `strata devices list|get|add`: GET /api/v2/nvmeDevices[/{serial}], answer key `NvmeDevices`
// (spec 2.13, 4.9; needs a cluster role); POST /api/v2/nvmeDevices {serialNumber, nodeUUID} gives a
// device to a node as a data device (docs/api.md, "Adding an NVMe device"), and `--wait` follows
// the node's pool growing until the device is Healthy.
import { Command, Option } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { OperationError } from '../errors.js';
import type { Column, Printer } from '../output.js';
import { parseDurationMs } from '../units.js';
import { waitFor } from '../wait.js';

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

interface NodeRebuild {
  inLocalRebuild: boolean;
  localRebuildProgress: number;
}

function deviceColumns(print: Printer): Column<NvmeDevice>[] {
  return [
    { header: 'SERIAL', value: (d) => d.serial },
    { header: 'MODEL', value: (d) => d.model },
    { header: 'SIZE', value: (d) => print.size(d.size) },
    { header: 'USAGE', value: (d) => d.deviceUsage },
    { header: 'STATE', value: (d) => d.state },
    { header: 'NAME', value: (d) => d.name },
    { header: 'NODE', value: (d) => d.nodeUUID },
    { header: 'SERVER', value: (d) => d.serverUUID },
  ];
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
      print.list(answer, answer.NvmeDevices, deviceColumns(print), 'no NVMe devices');
    });
  devices
    .command('get <serial>')
    .description('show one NVMe device')
    .action(async (serial: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const device = await client.get<NvmeDevice>(apiPath`/nvmeDevices/${serial}`);
      print.list(device, [device], deviceColumns(print), '');
    });
  devices
    .command('add <serial>')
    .description('give a device to a node as a data device: the node\'s agent grows its pool (--wait: until the device is Healthy)')
    .requiredOption('--node <UUID>', 'the node that takes the device')
    .option('--wait', 'wait until the device is Healthy in the node\'s pool, with progress on stderr')
    .addOption(new Option('--wait-timeout <duration>', 'give up waiting after this long').default('30m'))
    .action(async (serial: string, options: { node: string; wait?: boolean; waitTimeout: string }, command: Command) => {
      const timeoutMs = parseDurationMs(options.waitTimeout, '--wait-timeout');
      const { client, print } = contextOf(command);
      // POST is sent once; giving a device to the node that has it already changes nothing.
      const answer = await client.post<unknown>('/nvmeDevices', { serialNumber: serial, nodeUUID: options.node });
      if (!options.wait) {
        print.done(answer, `NVMe device ${serial} given to node ${options.node}; its agent grows the node's pool (strata devices get ${serial})`);
        return;
      }
      const device = await waitFor<NvmeDevice>({
        what: `NVMe device ${serial} to be Healthy in node ${options.node}'s pool`,
        timeoutMs,
        progress: (line) => print.note(`strata: ${line}`),
        probe: async () => {
          const current = await client.get<NvmeDevice>(apiPath`/nvmeDevices/${serial}`);
          if (current.state === 'Failed') throw new OperationError(`NVMe device ${serial} is Failed`);
          if (current.state === 'Healthy' && current.nodeUUID === options.node) return { done: true, value: current };
          const node = await client.get<NodeRebuild>(apiPath`/nodes/${options.node}`);
          return { done: false, state: node.inLocalRebuild ? `${current.state}, node rebuild ${node.localRebuildProgress}%` : current.state };
        },
      });
      print.list(device, [device], deviceColumns(print), '');
    });
}
