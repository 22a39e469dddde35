// `strata nodes stop|start|restart|replace`: POST /api/v2/nodes/{UUID}/stop|start|restart|replace
// (spec 4.8; system administrators; docs/node-operations.md). The API answers once the command is
// recorded; --wait polls GET /nodes/{UUID} until the node's agent (or, for replace, the active
// cluster manager) has done it: stop → Inactive, start → Active, replace → the target
// Active and the source no longer Detaching.
import { Option, type Command } from 'commander';
import { apiPath, type ApiClient } from '../api-client.js';
import { contextOf } from '../context.js';
import { parseDurationMs } from '../units.js';
import { waitFor } from '../wait.js';

interface Node {
  UUID: string;
  name: string;
  state: string;
  failureInfo: string;
}

const DEFAULT_WAIT_TIMEOUT = '10m';

export function registerNodeOpsCommands(program: Command): void {
  const nodes = program.commands.find((c) => c.name() === 'nodes') ?? program.command('nodes').description('storage nodes (one or more per server)');
  const waitOptions = (command: Command) =>
    command
      .option('--wait', 'wait until the node has done it')
      .addOption(new Option('--wait-timeout <duration>', 'give up waiting after this long (e.g. 90s, 5m)').default(DEFAULT_WAIT_TIMEOUT));

  const run = async (
    command: Command,
    uuid: string,
    verb: string,
    body: object,
    options: { wait?: boolean; waitTimeout: string },
    done: (node: Node, client: ApiClient) => Promise<boolean>,
    goal: string,
  ) => {
    const waitTimeoutMs = parseDurationMs(options.waitTimeout, '--wait-timeout');
    const { client, print } = contextOf(command);
    const answer = await client.post<object>(apiPath`/nodes/${uuid}/${verb}`, body);
    if (!options.wait) {
      if (print.format === 'json') print.json(answer);
      else print.line(`node ${uuid}: ${verb} recorded; its agent carries it out (strata nodes list shows its state)`);
      return;
    }
    const node = await waitFor({
      what: `node ${uuid} to ${goal}`,
      timeoutMs: waitTimeoutMs,
      progress: (line) => print.note(line),
      probe: async () => {
        const current = await client.get<Node>(apiPath`/nodes/${uuid}`);
        return (await done(current, client)) ? { done: true, value: current } : { done: false, state: current.state };
      },
    });
    if (print.format === 'json') print.json(node);
    else print.line(`node ${node.name} (${node.UUID}): ${node.state}${node.failureInfo ? ` (${node.failureInfo})` : ''}`);
  };

  waitOptions(
    nodes
      .command('stop')
      .description('stop serving a node: its volumes hand over to other copies; it stays stopped until started')
      .argument('<UUID>', 'the node')
      .option('--force', 'stop even when the node holds the only in-sync copy of a volume (it becomes unavailable)'),
  ).action(async (uuid: string, options: { force?: boolean; wait?: boolean; waitTimeout: string }, command: Command) => {
    await run(command, uuid, 'stop', { force: options.force ?? false }, options, async (n) => n.state === 'Inactive', 'stop');
  });

  waitOptions(nodes.command('start').description('serve a stopped node again (its copies resync)').argument('<UUID>', 'the node')).action(
    async (uuid: string, options: { wait?: boolean; waitTimeout: string }, command: Command) => {
      await run(command, uuid, 'start', {}, options, async (n) => n.state === 'Active' || n.state === 'Unattached', 'be Active');
    },
  );

  // No --wait: the API shows when a node is Active again, not whether it went through its stop
  // in between (a quick restart is over between two polls).
  nodes
    .command('restart')
    .description('stop a node, then start it')
    .argument('<UUID>', 'the node')
    .option('--force', 'restart even when the node holds the only in-sync copy of a volume')
    .option('--consider-backend', 'also reassemble the node\'s storage pool between the stop and the start (btrfs unmounted, md array stopped and assembled again)')
    .action(async (uuid: string, options: { force?: boolean; considerBackend?: boolean }, command: Command) => {
      await run(command, uuid, 'restart', { force: options.force ?? false, considerBackend: options.considerBackend ?? false }, { waitTimeout: DEFAULT_WAIT_TIMEOUT }, async () => true, '');
    });

  waitOptions(
    nodes
      .command('replace')
      .description('re-create an Inactive node\'s copies on an Unattached node, then detach it')
      .argument('<UUID>', 'the source node (Inactive)')
      .requiredOption('--target <UUID>', 'the node that takes over (Unattached)'),
  ).action(async (uuid: string, options: { target: string; wait?: boolean; waitTimeout: string }, command: Command) => {
    await run(command, uuid, 'replace', { TargetNodeUUID: options.target }, options, async (n, client) => {
      const target = await client.get<Node>(apiPath`/nodes/${options.target}`);
      return n.state !== 'Detaching' && target.state === 'Active';
    }, `be replaced by node ${options.target}`);
  });
}
