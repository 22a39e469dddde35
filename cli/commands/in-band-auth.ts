// `strata trusted-hosts list|get|create|delete|secrets|rotate` (GET|POST /projects/{p}/trustedHosts,
// GET|DELETE …/trustedHosts/{name}, GET|PUT …/trustedHostSecrets/{name}), `strata hosts list`
// (GET /hosts), `strata in-band-auth enable|disable` (POST /cluster/inBandAuth/enable|disable) and
// `strata kernel-capabilities` (GET /kernelCapabilities): in-band authentication (DH-HMAC-CHAP,
// docs/in-band-auth.md) and what each server's kernel can do (docs/kernel-capabilities.md).
// Secrets are given in files or the environment, never on the command line (visible in `ps`).
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';
import { DEFAULT_PROJECT } from '../resource-ref.js';
import type { TrustedHostWire } from '../../control-plane/in-band-auth/in-band-auth-service.js';
import type { ServerKernelCapabilitiesWire } from '../../control-plane/kernel-capabilities/kernel-capabilities-service.js';

/** The API's trusted host (a type only: the CLI loads no control-plane code). */
type TrustedHost = TrustedHostWire;

type ServerCapabilities = ServerKernelCapabilitiesWire;

const hostColumns = [
  { header: 'NAME', value: (h: TrustedHost) => h.name },
  { header: 'PROJECT', value: (h: TrustedHost) => h.projectName },
  { header: 'HOST NQN', value: (h: TrustedHost) => h.hostNQN },
  { header: 'BIDIRECTIONAL', value: (h: TrustedHost) => (h.hasCtrlSecret ? 'yes' : 'no') },
  { header: 'SECRET UPDATED', value: (h: TrustedHost) => h.secretUpdatedAt },
];

/** A secret from a file (first line) or an environment variable. */
export function secretFrom(file: string | undefined, envName: string | undefined, what: string): string | undefined {
  if (file !== undefined) return readFileSync(file, 'utf8').split('\n')[0]!.trim();
  if (envName !== undefined) {
    const value = process.env[envName];
    if (value === undefined || value === '') throw new UsageError(`${what}: environment variable ${envName} is not set`);
    return value.trim();
  }
  return undefined;
}

function requiredSecret(file: string | undefined, envName: string | undefined): string {
  const secret = secretFrom(file, envName, '--secret-env');
  if (secret === undefined) throw new UsageError('give the host\'s DH-HMAC-CHAP secret with --secret-file FILE or --secret-env NAME');
  return secret;
}

interface SecretOptions {
  project: string;
  secretFile?: string;
  secretEnv?: string;
  ctrlSecretFile?: string;
  ctrlSecretEnv?: string;
}

export function registerInBandAuthCommands(program: Command): void {
  const projectOption = ['--project <name>', 'project', DEFAULT_PROJECT] as const;
  const trusted = program.command('trusted-hosts').description('hosts admitted with a DH-HMAC-CHAP secret when in-band authentication is on (docs/in-band-auth.md)');
  trusted
    .command('list')
    .description('a project\'s trusted hosts (no secrets)')
    .option(...projectOption)
    .action(async (options: { project: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ trustedHosts: TrustedHost[] }>(apiPath`/projects/${options.project}/trustedHosts`);
      print.list(answer, answer.trustedHosts, hostColumns, `no trusted hosts in project ${options.project}`);
    });
  trusted
    .command('get <name>')
    .description('one trusted host (no secrets)')
    .option(...projectOption)
    .action(async (name: string, options: { project: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const host = await client.get<TrustedHost>(apiPath`/projects/${options.project}/trustedHosts/${name}`);
      print.list(host, [host], hostColumns, '');
    });
  const withSecretOptions = (c: Command) =>
    c
      .option(...projectOption)
      .option('--secret-file <file>', 'file whose first line is the host\'s secret (DHHC-1:..., nvme gen-dhchap-key)')
      .option('--secret-env <name>', 'environment variable holding the host\'s secret')
      .option('--ctrl-secret-file <file>', 'file with the target\'s secret (bidirectional authentication)')
      .option('--ctrl-secret-env <name>', 'environment variable holding the target\'s secret');
  withSecretOptions(trusted.command('create <name> <hostNQN>').description('trust a host: its NQN and secret(s)')).action(
    async (name: string, hostNQN: string, options: SecretOptions, command: Command) => {
      const secret = requiredSecret(options.secretFile, options.secretEnv);
      const ctrlSecret = secretFrom(options.ctrlSecretFile, options.ctrlSecretEnv, '--ctrl-secret-env');
      const { client, print } = contextOf(command);
      // POST is sent once (docs/cli.md, "Retries"): a lost answer is checked with `get`.
      const created = await client.post<TrustedHost>(apiPath`/projects/${options.project}/trustedHosts`, { name, hostNQN, secret, ...(ctrlSecret ? { ctrlSecret } : {}) });
      print.list(created, [created], hostColumns, '');
    },
  );
  withSecretOptions(trusted.command('rotate <name>').description('replace a trusted host\'s secret(s): connected hosts stay connected, new connects need the new secret')).action(
    async (name: string, options: SecretOptions, command: Command) => {
      const secret = requiredSecret(options.secretFile, options.secretEnv);
      const ctrlSecret = secretFrom(options.ctrlSecretFile, options.ctrlSecretEnv, '--ctrl-secret-env');
      const { client, print } = contextOf(command);
      const current = await client.get<TrustedHost>(apiPath`/projects/${options.project}/trustedHosts/${name}`);
      const answer = await client.put<unknown>(apiPath`/projects/${options.project}/trustedHostSecrets/${name}`, { secret, ...(ctrlSecret !== undefined ? { ctrlSecret } : {}) }, current.ETag);
      print.done(answer, `rotated the secret of trusted host ${name}`);
    },
  );
  trusted
    .command('secrets <name>')
    .description('print a trusted host\'s secrets (one host at a time)')
    .option(...projectOption)
    .action(async (name: string, options: { project: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ secret: string; ctrlSecret: string }>(apiPath`/projects/${options.project}/trustedHostSecrets/${name}`);
      print.done(answer, [answer.secret, answer.ctrlSecret].filter((s) => s !== '').join('\n'));
    });
  trusted
    .command('delete <name>')
    .description('stop trusting a host')
    .option(...projectOption)
    .action(async (name: string, options: { project: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.delete<unknown>(apiPath`/projects/${options.project}/trustedHosts/${name}`);
      print.done(answer, `deleted trusted host ${name}`);
    });

  program
    .command('hosts')
    .description('trusted hosts of every project')
    .command('list')
    .description('every trusted host (no secrets)')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ hosts: TrustedHost[] }>('/hosts');
      print.list(answer, answer.hosts, hostColumns, 'no trusted hosts');
    });

  const inBand = program.command('in-band-auth').description('turn in-band authentication (DH-HMAC-CHAP) on or off for every volume');
  for (const action of ['enable', 'disable'] as const) {
    inBand
      .command(action)
      .description(action === 'enable' ? 'every volume admits a host only with its secret (needs nvmet auth on every node: 6.12)' : 'hosts connect without secrets again')
      .action(async (_options: object, command: Command) => {
        const { client, print } = contextOf(command);
        const answer = await client.post<unknown>(`/cluster/inBandAuth/${action}`, {});
        print.done(answer, `in-band authentication ${action}d`);
      });
  }

  program
    .command('kernel-capabilities')
    .description('what each server\'s kernel can do, as its agent measured it (docs/kernel-capabilities.md)')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ servers: ServerCapabilities[] }>('/kernelCapabilities');
      print.list(
        answer,
        answer.servers,
        [
          { header: 'SERVER', value: (s) => s.name },
          { header: 'KERNEL', value: (s) => s.kernel || '-' },
          { header: 'CAPABILITIES', value: (s) => (s.measured ? Object.entries(s.capabilities).filter(([, on]) => on).map(([c]) => c).join(',') || '-' : 'not reported') },
        ],
        'no servers',
      );
    });
}
