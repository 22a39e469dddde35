// `strata projects list`: GET /api/v2/projects (docs/projects.md): every project for a cluster
// role, the token's own projects for a project token.
import type { Command } from 'commander';
import { contextOf } from '../context.js';
import { list } from '../output.js';

interface Project {
  UUID: string;
  name: string;
  description: string;
  defaultPolicies: { policyType: string; policyUUID: string }[];
}

export function registerProjectCommands(program: Command): void {
  const projects = program.command('projects').description('projects (tenants) that own volumes and snapshots');
  projects
    .command('list')
    .description('list the projects the token may read')
    .action(async (_options: object, command: Command) => {
      const { client, print } = contextOf(command);
      const answer = await client.get<{ projects: Project[] }>('/projects');
      print.list(answer, answer.projects, [
        { header: 'NAME', value: (p) => p.name },
        { header: 'UUID', value: (p) => p.UUID },
        { header: 'DEFAULT QOS POLICY', value: (p) => list(p.defaultPolicies.map((d) => d.policyUUID)) },
        { header: 'DESCRIPTION', value: (p) => p.description },
      ], 'no projects');
    });
}
