// `strata credentials list|get|create|delete` (GET|POST /projects/{p}/credentials,
// GET|DELETE …/credentials/{name}; docs/projects.md): the RS256 public keys a project's own
// tokens are checked with.
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';
import { DEFAULT_PROJECT } from '../resource-ref.js';

interface Credential {
  projectName: string;
  name: string;
  type: string;
  payload: string;
}

const credentialColumns = [
  { header: 'PROJECT', value: (c: Credential) => c.projectName },
  { header: 'NAME', value: (c: Credential) => c.name },
  { header: 'TYPE', value: (c: Credential) => c.type },
];

export function registerCredentialCommands(program: Command): void {
  const credentials = program.command('credentials').description('a project\'s public keys for its own tokens');
  const projectOption = ['--project <name>', 'project', DEFAULT_PROJECT] as const;
  credentials
    .command('list')
    .description('list a project\'s credentials')
    .option(...projectOption)
    .action(async (options: { project: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ credentials: Credential[] }>(apiPath`/projects/${options.project}/credentials`);
      print.list(answer, answer.credentials, credentialColumns, `no credentials in project ${options.project}`);
    });
  credentials
    .command('get <name>')
    .description('show one credential (with its public key)')
    .option(...projectOption)
    .action(async (name: string, options: { project: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const credential = await client.get<Credential>(apiPath`/projects/${options.project}/credentials/${name}`);
      if (print.format === 'json') print.json(credential);
      else {
        print.table([credential], credentialColumns, '');
        print.line(credential.payload.trimEnd());
      }
    });
  credentials
    .command('create <name>')
    .description('add an RS256 public key (PEM) to a project')
    .option(...projectOption)
    .requiredOption('--public-key-file <file>', 'the PEM public key')
    .action(async (name: string, options: { project: string; publicKeyFile: string }, command: Command) => {
      let payload: string;
      try {
        payload = readFileSync(options.publicKeyFile, 'utf8');
      } catch (err) {
        throw new UsageError(`cannot read ${options.publicKeyFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      }
      const { client, print } = contextOf(command);
      const created = await client.post<Credential>(apiPath`/projects/${options.project}/credentials`, { name, type: 'RS256PubKey', payload });
      print.list(created, [created], credentialColumns, '');
    });
  credentials
    .command('delete <name>')
    .description('remove a credential (tokens signed with its key stop working)')
    .option(...projectOption)
    .action(async (name: string, options: { project: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.delete<unknown>(apiPath`/projects/${options.project}/credentials/${name}`);
      print.done(answer, `deleted credential ${options.project}/${name}`);
    });
}
