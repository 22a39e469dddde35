// `strata projects list|get|create|update|delete` (GET|POST /projects, GET|PUT|DELETE
// /projects/{name}; docs/projects.md): every project for a cluster role, the token's own
// projects for a project token.
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';
import { list } from '../output.js';

interface Project {
  UUID: string;
  name: string;
  description: string;
  defaultPolicies: { policyType: string; policyUUID: string }[];
  ETag?: string;
}

const projectColumns = [
  { header: 'NAME', value: (p: Project) => p.name },
  { header: 'UUID', value: (p: Project) => p.UUID },
  { header: 'DEFAULT QOS POLICY', value: (p: Project) => list(p.defaultPolicies.map((d) => d.policyUUID)) },
  { header: 'DESCRIPTION', value: (p: Project) => p.description },
];

export function registerProjectCommands(program: Command): void {
  const projects = program.command('projects').description('projects (tenants) that own volumes and snapshots');
  projects
    .command('list')
    .description('list the projects the token may read')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ projects: Project[] }>('/projects');
      print.list(answer, answer.projects, projectColumns, 'no projects');
    });
  projects
    .command('get <name>')
    .description('show one project')
    .action(async (name: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const project = await client.get<Project>(apiPath`/projects/${name}`);
      print.list(project, [project], projectColumns, '');
    });
  projects
    .command('create <name>')
    .description('create a project')
    .option('--description <text>', 'free text')
    .option('--qos-policy <UUID>', 'the default QoS policy of the project\'s volumes')
    .action(async (name: string, options: { description?: string; qosPolicy?: string }, command: Command) => {
      const { client, print } = contextOf(command);
      const created = await client.post<Project>('/projects', { name, ...projectBody(options) });
      print.list(created, [created], projectColumns, '');
    });
  projects
    .command('update <name>')
    .description('change a project\'s description or default QoS policy')
    .option('--description <text>', 'free text')
    .option('--qos-policy <UUID>', 'the default QoS policy of the project\'s volumes')
    .action(async (name: string, options: { description?: string; qosPolicy?: string }, command: Command) => {
      const body = projectBody(options);
      if (Object.keys(body).length === 0) throw new UsageError('nothing to change: give --description or --qos-policy');
      const { client, print } = contextOf(command);
      const current = await client.get<Project>(apiPath`/projects/${name}`);
      await client.put<unknown>(apiPath`/projects/${current.name}`, body, current.ETag || undefined);
      const updated = await client.get<Project>(apiPath`/projects/${current.name}`);
      print.list(updated, [updated], projectColumns, '');
    });
  projects
    .command('delete <name>')
    .description('delete a project (refused while it has volumes or snapshots)')
    .action(async (name: string, _options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.delete<unknown>(apiPath`/projects/${name}`);
      print.done(answer, `deleted project ${name}`);
    });
}

function projectBody(options: { description?: string; qosPolicy?: string }): Record<string, unknown> {
  return {
    ...(options.description !== undefined ? { description: options.description } : {}),
    ...(options.qosPolicy !== undefined ? { defaultPolicies: [{ policyType: 'qosRateLimit', policyUUID: options.qosPolicy }] } : {}),
  };
}
