// Listing the event log (spec 4.5, §6): newest first. A page is read as limited ranges of the
// time-ordered keys between the since/until bounds, starting after nextToken; filters apply
// server-side chunk by chunk, so a page costs what it scans, never the whole log.
//
// nextToken is the last returned event's ID when more events may follow in the range, '' when
// the range is exhausted. Paging is stable: events recorded while a client pages are newer
// than its cursor and never shift what the next page returns.
import type { ProjectDirectory } from '../volumes/volume-dependencies.js';
import type { EventStore } from './event-store.js';
import { projectsOf, type EventWire } from './event-wire.js';
import type { EventQuery } from './events-schema.js';

export interface EventPage {
  events: EventWire[];
  nextToken: string;
}

/**
 * Events per etcd read while filtering (the unfiltered read asks for limit + 1). The chunk
 * doubles on each read of one page: etcd 3.4 walks its index over the whole remaining range on
 * every limited read, so a sparse filter over a long log needs few, large reads. Reads aim at
 * 2 MiB (from the sizes seen so far) to stay under gRPC's 4 MiB message limit; a read over it
 * is retried in halves.
 */
const FILTER_CHUNK_FIRST = 250;
const FILTER_CHUNK_MAX = 4000;
const READ_TARGET_BYTES = 2 * 1024 * 1024;

export class EventsService {
  constructor(
    private readonly store: EventStore,
    private readonly projects: Pick<ProjectDirectory, 'require'>,
  ) {}

  async list(query: EventQuery): Promise<EventPage> {
    if (query.projectName !== undefined) await this.projects.require(query.projectName);
    let span = this.store.span({ since: query.since, until: query.until, after: query.after });
    const matches = matcher(query);
    const unfiltered = matches === undefined;
    const events: EventWire[] = [];
    let filterChunk = FILTER_CHUNK_FIRST;
    for (;;) {
      const chunk = await this.store.range(span, unfiltered ? query.limit - events.length + 1 : filterChunk);
      const bytesPerEvent = chunk.events.length > 0 ? chunk.bytes / chunk.events.length : 1024;
      filterChunk = Math.max(1, Math.min(filterChunk * 2, FILTER_CHUNK_MAX, Math.floor(READ_TARGET_BYTES / bytesPerEvent)));
      for (const [i, event] of chunk.events.entries()) {
        if (matches && !matches(event)) continue;
        events.push(event);
        if (events.length === query.limit) {
          const more = i < chunk.events.length - 1 || chunk.more;
          return { events, nextToken: more ? event.ID : '' };
        }
      }
      if (!chunk.rest) return { events, nextToken: '' };
      span = chunk.rest;
    }
  }
}

function matcher(query: EventQuery): ((event: EventWire) => boolean) | undefined {
  const { severities, componentType, projectName } = query;
  if (severities) return (e) => severities.has(e.Severity);
  if (componentType !== undefined) return (e) => e.Type === componentType;
  if (projectName !== undefined) return (e) => projectsOf(e).includes(projectName);
  return undefined;
}
