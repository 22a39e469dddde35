// `strata devices locate <serial> [--off | --rebuild] [--server <UUID>]`: POST
// /api/v2/nvmeDevices/{serialNumber} {serverUUID, ledPattern} (spec 4.9; needs cluster write). The
// server defaults to the one the device is reported by (GET /nvmeDevices/{serial}). The answer is
// the agent's: exit 0 once the LED is set, 1 with the reason when it cannot be (no indicator).
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';

export function registerDeviceLocateCommand(program: Command): void {
  const devices = program.commands.find((c) => c.name() === 'devices') ?? program.command('devices').description('NVMe devices the agents report');
  devices
    .command('locate')
    .description('turn a device\'s locate LED on (or off, or show it rebuilding) through its server\'s agent')
    .argument('<serial>', 'the device\'s serial number')
    .option('--off', 'turn the LED off (ledPattern locate-off)')
    .option('--rebuild', 'show the rebuild pattern (ledPattern rebuild)')
    .option('--server <UUID>', 'the device\'s server (default: the server that reports it)')
    .action(async (serial: string, options: { off?: boolean; rebuild?: boolean; server?: string }, command: Command) => {
      if (options.off && options.rebuild) throw new UsageError('give at most one of --off and --rebuild');
      const ledPattern = options.off ? 'locate-off' : options.rebuild ? 'rebuild' : 'locate';
      const { client, print } = contextOf(command);
      const serverUUID = options.server ?? (await client.get<{ serverUUID: string }>(apiPath`/nvmeDevices/${serial}`)).serverUUID;
      const answer = await client.post<object>(apiPath`/nvmeDevices/${serial}`, { serverUUID, ledPattern });
      if (print.format === 'json') print.json(answer);
      else print.line(`NVMe device ${serial} on server ${serverUUID}: LED ${ledPattern}`);
    });
}
