// `strata snapshots …`: list, get, create, delete. Snapshots are project-scoped only
// (/api/v2/projects/{p}/snapshots…; wire-conventions §7, docs/snapshots.md), so every command
// works in one project: --project, or the project of a project/name argument, else `default`.
import type { Command } from 'commander';
import { apiPath } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';
import { formatTime } from '../output.js';
import { listPages, parsePageLimit } from '../paging.js';
import { isUuid } from '../../lib/contract/uuid.js';
import { DEFAULT_PROJECT, parseResourceRef, type ResourceRef } from '../resource-ref.js';

interface Snapshot {
  UUID: string;
  name: string;
  projectName: string;
  state: string;
  sourceVolumeUUID: string;
  sourceVolumeName: string;
  size: string;
  creationTime: string;
  retentionTime: string;
}

export function registerSnapshotCommands(program: Command): void {
  const snapshots = program.command('snapshots').description('point-in-time copies of volumes (per project)');

  snapshots
    .command('list')
    .description('list the snapshots of a project')
    .option('--project <name>', 'project', DEFAULT_PROJECT)
    .option('--volume <UUID|name>', 'only snapshots of this volume')
    .option('--all-pages', 'follow pages until every snapshot is listed (at most 1000 per page)')
    .option('--limit <n>', 'page size (1-1000; the API default is 1000)')
    .option('--show-all', 'include snapshots being deleted (state Deleting)')
    .action(async (options: { project: string; volume?: string; allPages?: boolean; limit?: string; showAll?: boolean }, command: Command) => {
      const limit = parsePageLimit(options.limit);
      const { client, print } = contextOf(command);
      const query = {
        ...sourceVolumeQuery(options.volume),
        showAll: options.showAll ? 'true' : undefined,
      };
      const listed = await listPages<Snapshot>(client, apiPath`/projects/${options.project}/snapshots`, 'snapshots', query, { allPages: options.allPages === true, limit });
      if (print.format === 'json') print.json(listed.answer);
      else {
        print.table(listed.items, [
          { header: 'UUID', value: (s) => s.UUID },
          { header: 'NAME', value: (s) => s.name },
          { header: 'VOLUME', value: (s) => s.sourceVolumeName || s.sourceVolumeUUID },
          { header: 'SIZE', value: (s) => print.size(s.size) },
          { header: 'STATE', value: (s) => s.state },
          { header: 'CREATED', value: (s) => formatTime(s.creationTime) },
          { header: 'RETENTION', value: (s) => formatRetention(s.retentionTime) },
        ], `no snapshots in project ${options.project}`);
      }
      if (listed.mayHaveMore) print.note('strata: the page is full; more snapshots may follow: add --all-pages');
    });

  snapshots
    .command('get')
    .description('show one snapshot')
    .argument('<snapshot>', 'UUID (in --project) or project/name')
    .option('--project <name>', 'project of a snapshot given by UUID', DEFAULT_PROJECT)
    .action(async (snapshotArg: string, options: { project: string }, command: Command) => {
      const { ref, project } = snapshotRefOf(snapshotArg, options.project, command);
      const { client, print } = contextOf(command);
      // By name: `GET …/snapshots/?Name=X` (capital N for GET; wire-conventions §4).
      const snapshot = ref.kind === 'uuid'
        ? await client.get<Snapshot>(apiPath`/projects/${project}/snapshots/${ref.UUID}`)
        : await client.get<Snapshot>(apiPath`/projects/${project}/snapshots/`, { Name: ref.name });
      if (print.format === 'json') print.json(snapshot);
      else
        print.fields([
          ['UUID', snapshot.UUID],
          ['Name', snapshot.name],
          ['Project', snapshot.projectName],
          ['State', snapshot.state],
          ['Volume', `${snapshot.sourceVolumeName || '-'} (${snapshot.sourceVolumeUUID})`],
          ['Size', print.size(snapshot.size)],
          ['Created', formatTime(snapshot.creationTime)],
          ['Retention', formatRetention(snapshot.retentionTime)],
        ]);
    });

  snapshots
    .command('create')
    .description('snapshot a volume (the volume must be Available; answers at once with state Creating)')
    .option('--project <name>', 'project of the volume and the snapshot', DEFAULT_PROJECT)
    .requiredOption('--name <name>', 'snapshot name, unique in the project')
    .requiredOption('--volume <UUID|name>', 'the volume to snapshot')
    .option('--retention <duration>', 'keep it this long, e.g. 7d, 24h (default: forever)')
    .option('--description <text>', 'free text, up to 1024 bytes')
    .action(async (options: { project: string; name: string; volume: string; retention?: string; description?: string }, command: Command) => {
      const body = { name: options.name, ...sourceVolumeQuery(options.volume), retentionTime: options.retention, description: options.description };
      const { client, print } = contextOf(command);
      // POST is sent once, never retried (docs/cli.md, "Retries").
      const snapshot = await client.post<Snapshot>(apiPath`/projects/${options.project}/snapshots`, body);
      if (print.format === 'json') print.json(snapshot);
      else print.line(`snapshot ${snapshot.projectName}/${snapshot.name} (${snapshot.UUID}) of volume ${snapshot.sourceVolumeName}: ${snapshot.state}`);
    });

  snapshots
    .command('delete')
    .description('delete a snapshot (it goes Deleting; a snapshot with live clones cannot be deleted)')
    .argument('<snapshot>', 'UUID (in --project) or project/name')
    .option('--project <name>', 'project of a snapshot given by UUID', DEFAULT_PROJECT)
    .action(async (snapshotArg: string, options: { project: string }, command: Command) => {
      const { ref, project } = snapshotRefOf(snapshotArg, options.project, command);
      const { client, print } = contextOf(command);
      // By name: `DELETE …/snapshots/?name=X` (lower-case n for DELETE; wire-conventions §4).
      const answer = ref.kind === 'uuid'
        ? await client.delete<unknown>(apiPath`/projects/${project}/snapshots/${ref.UUID}`)
        : await client.delete<unknown>(apiPath`/projects/${project}/snapshots/`, { name: ref.name });
      if (print.format === 'json') print.json(answer);
      else print.line(`deleting snapshot ${snapshotArg} (state Deleting)`);
    });
}

/** project/name carries its project; a UUID or a bare name is in --project. */
function snapshotRefOf(snapshotArg: string, projectOption: string, command: Command): { ref: ResourceRef; project: string } {
  const ref = parseResourceRef(snapshotArg, 'snapshot');
  if (ref.kind === 'name' && snapshotArg.includes('/')) {
    if (command.getOptionValueSource('project') === 'cli' && ref.projectName !== projectOption) {
      throw new UsageError(`snapshot "${snapshotArg}" names project ${ref.projectName}, but --project says ${projectOption}`);
    }
    return { ref, project: ref.projectName };
  }
  return { ref, project: projectOption };
}

/** The API's "<seconds>s" in the largest whole unit ("604800s" → "7d"); "0s" is forever. */
function formatRetention(retention: string): string {
  const match = /^(\d+)s$/.exec(retention);
  if (!match) return retention;
  const seconds = Number(match[1]);
  if (seconds === 0) return 'forever';
  for (const [unit, size] of [['w', 604_800], ['d', 86_400], ['h', 3_600], ['m', 60]] as const) {
    if (seconds % size === 0) return `${seconds / size}${unit}`;
  }
  return retention;
}

/** A volume named by UUID or by its name in the project. */
function sourceVolumeQuery(volume: string | undefined): { sourceVolumeUUID?: string; sourceVolumeName?: string } {
  if (volume === undefined) return {};
  if (volume.includes('/')) throw new UsageError(`invalid --volume "${volume}": give the volume's UUID or its name in --project`);
  return isUuid(volume) ? { sourceVolumeUUID: volume } : { sourceVolumeName: volume };
}
