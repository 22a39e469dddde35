// `strata events list`: GET /api/v2/events or /api/v2/projects/{p}/events (spec §6, docs/events.md),
// newest first; `nextToken` continues with older events. `--follow` then polls for new events
// (the API has no push) and prints each once, oldest first, until interrupted.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import { apiPath, type ApiClient, type Query } from '../api-client.js';
import { contextOf } from '../context.js';
import { UsageError } from '../errors.js';
import { formatTime, renderTable, type Column, type Printer } from '../output.js';
import { isDuration, parseDurationMs } from '../units.js';

interface Event {
  ID: string;
  Time: string;
  Type: string;
  Severity: string;
  EventName: string;
  Description: string;
  ComponentVolumesInfo: { ProjectVolumesMap: Record<string, { VolumeComponentInfoList: { ID: string; Name: string }[] }> } | null;
  ComponentNVMeSSDInfo: { ID: string; Name: string } | null;
  ComponentNodeInfo: { ID: string; Name: string } | null;
  ComponentServerInfo: { ID: string; Name: string } | null;
  ComponentClusterInfo: { ID: string; Name: string } | null;
  ComponentDataIntegrityInfo: { NodeUUID: string } | null;
}

/** The API's page size for events is 100 by default, at most 1000. */
const MAX_EVENTS_LIMIT = 1000;

export function registerEventCommands(program: Command): void {
  const events = program.command('events').description('the cluster\'s event log');
  events
    .command('list')
    .description('list events, newest first (a project\'s, or the whole cluster\'s with a cluster role)')
    .option('--since <time|duration>', 'events at or after this time: ISO-8601 (2024-05-01T12:00:00Z) or how long ago (30m, 2h, 7d)')
    .option('--until <time|duration>', 'events before this time (same forms)')
    .option('--project <name>', 'only events of this project\'s volumes')
    .option('--limit <n>', 'events per page (1-1000; the API default is 100)')
    .option('--next-token <token>', 'continue after this event (the token a previous page gave)')
    .option('--follow', 'then keep polling and print new events as they come, oldest first, until interrupted (--output json: one event per line)')
    .option('--interval <duration>', 'how often --follow polls', '2s')
    .action(async (options: { since?: string; until?: string; project?: string; limit?: string; nextToken?: string; follow?: boolean; interval: string }, command: Command) => {
      if (options.follow && (options.until !== undefined || options.nextToken !== undefined)) throw new UsageError('--follow shows new events: it takes no --until or --next-token');
      const intervalMs = parseDurationMs(options.interval, '--interval');
      const query = {
        since: options.since === undefined ? undefined : timeOf(options.since, '--since'),
        until: options.until === undefined ? undefined : timeOf(options.until, '--until'),
        limit: options.limit === undefined ? undefined : limitOf(options.limit),
        nextToken: options.nextToken,
      };
      const { client, print } = contextOf(command);
      const path = options.project === undefined ? '/events' : apiPath`/projects/${options.project}/events`;
      if (options.follow) return follow(client, print, path, query, intervalMs);
      const answer = await client.get<{ events: Event[]; nextToken: string }>(path, query);
      print.list(answer, answer.events, eventColumns, 'no events');
      if (answer.nextToken) print.note(`strata: older events follow: add --next-token ${answer.nextToken}`);
    });
}

const eventColumns: Column<Event>[] = [
  { header: 'TIME', value: (e) => formatTime(e.Time) },
  { header: 'SEVERITY', value: (e) => e.Severity },
  { header: 'TYPE', value: (e) => e.Type },
  { header: 'EVENT', value: (e) => e.EventName },
  { header: 'COMPONENT', value: componentOf },
  { header: 'DESCRIPTION', value: (e) => e.Description },
];

/** IDs remembered to print each event once (events at the same time as the last poll's newest come again). */
const SEEN_IDS = 10_000;

/**
 * Prints the events since `query.since` (all the API keeps when not given), then polls: each
 * poll asks for the events at or after the newest time seen and prints those not printed yet,
 * oldest first. Table rows are aligned per batch; JSON is one event per line.
 */
async function follow(client: ApiClient, print: Printer, path: string, query: Query, intervalMs: number): Promise<void> {
  const seen = new Set<string>();
  let since = query['since'] as string | undefined;
  let headerPrinted = false;
  for (;;) {
    const fresh: Event[] = [];
    let nextToken: string | undefined;
    do {
      const page = await client.get<{ events: Event[]; nextToken: string }>(path, { ...query, since, limit: query['limit'] ?? MAX_EVENTS_LIMIT, nextToken });
      fresh.push(...page.events.filter((e) => !seen.has(e.ID)));
      nextToken = page.nextToken || undefined;
    } while (nextToken !== undefined);
    fresh.sort((a, b) => Date.parse(a.Time) - Date.parse(b.Time) || (a.ID < b.ID ? -1 : 1));
    if (fresh.length > 0) {
      if (print.format === 'json') for (const e of fresh) print.line(JSON.stringify(e));
      else {
        const table = renderTable(fresh, eventColumns).split('\n');
        print.line((headerPrinted ? table.slice(1) : table).join('\n').trimEnd());
        headerPrinted = true;
      }
      for (const e of fresh) seen.add(e.ID);
      while (seen.size > SEEN_IDS) seen.delete(seen.values().next().value as string);
      since = fresh[fresh.length - 1]!.Time;
    }
    await sleep(intervalMs);
  }
}

/** What the event is about, by name where the event names it. */
function componentOf(event: Event): string {
  if (event.ComponentVolumesInfo) {
    return Object.entries(event.ComponentVolumesInfo.ProjectVolumesMap ?? {})
      .flatMap(([project, { VolumeComponentInfoList }]) => VolumeComponentInfoList.map((v) => `volume ${project}/${v.Name || v.ID}`))
      .join(', ');
  }
  const named: [string, { ID: string; Name: string } | null][] = [
    ['node', event.ComponentNodeInfo],
    ['server', event.ComponentServerInfo],
    ['device', event.ComponentNVMeSSDInfo],
    ['cluster', event.ComponentClusterInfo],
  ];
  for (const [kind, component] of named) if (component) return `${kind} ${component.Name || component.ID}`;
  if (event.ComponentDataIntegrityInfo) return `node ${event.ComponentDataIntegrityInfo.NodeUUID}`;
  return '-';
}

/** A duration means "that long ago"; anything else goes to the API, which validates times. */
function timeOf(text: string, option: string): string {
  return isDuration(text) ? new Date(Date.now() - parseDurationMs(text, option)).toISOString() : text;
}

function limitOf(text: string): string {
  const limit = Number(text);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_EVENTS_LIMIT) throw new UsageError(`invalid --limit "${text}": a whole number from 1 to ${MAX_EVENTS_LIMIT}`);
  return text;
}
