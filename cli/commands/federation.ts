// `strata federation …`: the cluster federation routes (spec 4.3, §7; docs/api.md). Federation is
// reserved and not offered by this release: every command but `clusters list` gets the API's
// 500 "the federation service is unavailable" (exit 1), as any client would. They exist so that
// every route family of the API has a command, and say so in their help.
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';

const UNAVAILABLE = ' (federation is not offered by this release: the API answers that it is unavailable)';

export function registerFederationCommands(program: Command): void {
  const federation = program.command('federation').description(`cluster federation${UNAVAILABLE}`);
  const clusters = federation.command('clusters').description('clusters attached to this one');
  clusters
    .command('list')
    .description('list attached clusters (none: federation is not offered)')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ clusters: { UUID?: string; apiEndpoint?: string }[] }>('/clusters');
      print.list(answer, answer.clusters, [
        { header: 'UUID', value: (c) => c.UUID ?? '-' },
        { header: 'API ENDPOINT', value: (c) => c.apiEndpoint ?? '-' },
      ], 'no attached clusters');
    });
  clusters
    .command('attach <host:port>')
    .description(`attach another cluster by its API endpoint${UNAVAILABLE}`)
    .action(async (apiEndpoint: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      print.json(await client.post<unknown>('/clusters', { apiEndpoint }));
    });
  clusters
    .command('detach <cid>')
    .description(`detach a cluster${UNAVAILABLE}`)
    .action(async (cid: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      print.json(await client.delete<unknown>(apiPath`/clusters/${cid}`));
    });
  const workflows = federation.command('workflows').description(`federation workflows${UNAVAILABLE}`);
  workflows
    .command('list')
    .description(`list workflows${UNAVAILABLE}`)
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      print.json(await client.get<unknown>('/workflows'));
    });
  workflows
    .command('get <workflowId>')
    .description(`show a workflow${UNAVAILABLE}`)
    .action(async (workflowId: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      print.json(await client.get<unknown>(apiPath`/workflows/${workflowId}`));
    });
  federation
    .command('credentials')
    .description(`the federation service credentials${UNAVAILABLE}`)
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      print.json(await client.get<unknown>('/cf-service-credentials'));
    });
  federation
    .command('login')
    .description(`log in to the federation service${UNAVAILABLE}`)
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      print.json(await client.post<unknown>('/cflogin', {}));
    });
}
