// The command tree: global options, then one module per command group (cli/commands/*).
import { Command, Option } from 'commander';
import { productVersion } from '../lib/paths.js';
import { registerBundleCommands } from './commands/bundle.js';
import { registerClusterCommands } from './commands/cluster.js';
import { registerAdminEndpointCommands } from './commands/admin-endpoints.js';
import { registerInBandAuthCommands } from './commands/in-band-auth.js';
import { registerNvmeTcpTlsCommands } from './commands/nvme-tcp-tls.js';
import { registerCompletionCommand } from './commands/completion.js';
import { registerConnectedHostCommands } from './commands/connected-hosts.js';
import { registerCredentialCommands } from './commands/credentials.js';
import { registerFeatureFlagCommands } from './commands/feature-flags.js';
import { registerFederationCommands } from './commands/federation.js';
import { registerPolicyCommands } from './commands/policies.js';
import { registerDeviceCommands } from './commands/devices.js';
import { registerDeviceLocateCommand } from './commands/device-locate.js';
import { registerEventCommands } from './commands/events.js';
import { registerNodeCommands } from './commands/nodes.js';
import { registerNodeOpsCommands } from './commands/node-ops.js';
import { registerProjectCommands } from './commands/projects.js';
import { registerServerCommands } from './commands/servers.js';
import { registerServerAddCommand } from './commands/server-add.js';
import { registerSnapshotCommands } from './commands/snapshots.js';
import { registerVolumeCommands } from './commands/volumes.js';
import { DEFAULT_ENDPOINT } from './connection.js';

export function buildProgram(): Command {
  const program = new Command('strata')
    .description('Administer a Strata cluster through its REST API (/api/v2)')
    .version(productVersion)
    // Every parse error becomes an exception that main.ts turns into exit status 2 (commander's
    // own would exit 1, which scripts must be able to tell from an API error). Subcommands created
    // after this inherit it.
    .exitOverride()
    .configureOutput({ outputError: (text, write) => write(`strata: ${text.replace(/^error: /, '')}`) })
    .showHelpAfterError('(add --help for usage)')
    .addOption(new Option('--endpoint <url>', `API address [env STRATA_ENDPOINT] (default: ${DEFAULT_ENDPOINT})`))
    // No .env() or default for the token options: commander would show the value in --help.
    .addOption(new Option('--token <token>', 'API token (visible to other users in `ps`: prefer --token-file or STRATA_TOKEN)'))
    .addOption(new Option('--token-file <file>', 'file holding the API token [env STRATA_TOKEN holds the token itself] (default: ~/.config/strata/token if present)'))
    .addOption(new Option('--ca-file <file>', 'PEM CA certificate the API\'s certificate is verified with, besides the system\'s: the cluster CA (ca.pem in the control plane\'s state directory) [env STRATA_CA_FILE] (default: ~/.config/strata/ca.pem if present)'))
    .addOption(new Option('--insecure', 'do not verify the API\'s TLS certificate (the token is still sent: only for a server you trust)'))
    .addOption(new Option('-o, --output <format>', 'output format: human tables, or the API\'s JSON as received').choices(['table', 'json']).default('table'))
    .addOption(new Option('--bytes', 'print sizes in tables as bytes instead of binary units'))
    .addOption(new Option('--timeout <duration>', 'give up on one API request after this long').default('30s'));

  registerClusterCommands(program);
  registerVolumeCommands(program);
  registerSnapshotCommands(program);
  registerNodeCommands(program);
  registerNodeOpsCommands(program);
  registerServerCommands(program);
  registerServerAddCommand(program);
  registerDeviceCommands(program);
  registerDeviceLocateCommand(program);
  registerEventCommands(program);
  registerProjectCommands(program);
  registerCredentialCommands(program);
  registerFeatureFlagCommands(program);
  registerAdminEndpointCommands(program);
  registerInBandAuthCommands(program);
  registerNvmeTcpTlsCommands(program);
  registerConnectedHostCommands(program);
  registerPolicyCommands(program);
  registerBundleCommands(program);
  registerFederationCommands(program);
  registerCompletionCommand(program);
  return program;
}
