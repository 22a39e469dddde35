// `strata feature-flags list|get|enable|disable` (GET /featureFlags[/{name}], POST …/{name}/enable|disable;
// docs/feature-flags.md).
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';

interface FeatureFlag {
  name: string;
  enabled: boolean;
}

const flagColumns = [
  { header: 'NAME', value: (f: FeatureFlag) => f.name },
  { header: 'ENABLED', value: (f: FeatureFlag) => String(f.enabled) },
];

export function registerFeatureFlagCommands(program: Command): void {
  const flags = program.command('feature-flags').description('feature flags of the cluster');
  flags
    .command('list')
    .description('list every feature flag and whether it is enabled')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ featureFlags: Record<string, FeatureFlag> }>('/featureFlags');
      print.list(answer, Object.values(answer.featureFlags), flagColumns, 'no feature flags');
    });
  flags
    .command('get <name>')
    .description('show one feature flag')
    .action(async (name: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const flag = await client.get<FeatureFlag>(apiPath`/featureFlags/${name}`);
      print.list(flag, [flag], flagColumns, '');
    });
  for (const action of ['enable', 'disable'] as const) {
    flags
      .command(`${action} <name>`)
      .description(`${action} a feature flag`)
      .action(async (name: string, _options: object, command: Command) => {
        const { client, print } = contextOf(command);
        await client.post(apiPath`/featureFlags/${name}/${action}`, {});
        const flag = await client.get<FeatureFlag>(apiPath`/featureFlags/${name}`);
        print.list(flag, [flag], flagColumns, '');
      });
  }
}
