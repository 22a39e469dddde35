// Query of GET /api/v2/events and /api/v2/projects/{projectName}/events (spec 4.5, §6):
// since, until (UTC ISO-8601), limit (string), severity (repeated or comma-separated),
// componentType, projectName, nextToken. Invalid values are 400; more than one of
// componentType, projectName, severity is 501 (the project-scoped route's path project counts
// as projectName). Query names are case-sensitive; unknown names are ignored.
import { z } from 'zod';
import { StrataError, errors, quote } from '../../lib/errors.js';
import { queryList, queryValue } from '../http/body.js';
import { name, optional, parseInput } from '../http/lenient.js';
import { parseEnum } from '../inventory/wire.js';
import type { EventSeverity, EventType } from './event-recorder.js';
import { isEventId } from './event-id.js';
import { eventSeverities, eventTypes } from './event-wire.js';

export const DEFAULT_EVENT_LIMIT = 100;
export const MAX_EVENT_LIMIT = 1000;

export type Query = Record<string, string | string[] | undefined>;

export interface EventQuery {
  /** Epoch ns; events at or after it. */
  readonly since?: bigint;
  /** Epoch ns; events before it. */
  readonly until?: bigint;
  readonly limit: number;
  /** Continue after this event id (the previous page's nextToken). */
  readonly after?: string;
  readonly severities?: ReadonlySet<EventSeverity>;
  readonly componentType?: EventType;
  readonly projectName?: string;
}

/** The query as the document shows it; the identifiers (projectName, nextToken) are typed first. */
export const eventsQuery = z.object({
  projectName: optional(name),
  nextToken: optional(z.string().max(64, 'must be at most 64 characters').meta({ description: 'the previous page\'s nextToken (an event ID)' })),
  since: optional(z.string().meta({ description: 'ISO-8601 UTC time' })),
  until: optional(z.string().meta({ description: 'ISO-8601 UTC time' })),
  limit: optional(z.string().meta({ description: 'a decimal integer; 0 or absent: 100; at most 1000' })),
  severity: optional(z.string().meta({ description: `repeated or comma-separated: ${eventSeverities.join(', ')}` })),
  componentType: optional(z.string().meta({ description: eventTypes.join(', ') })),
});
const eventIdentifiers = eventsQuery.pick({ projectName: true, nextToken: true });

/** The project-scoped route's path. */
export const eventsParams = z.object({ projectName: name });

export function parseEventsQuery(query: Query, pathProject?: string): EventQuery {
  parseInput(eventIdentifiers, { projectName: queryValue(query, 'projectName'), nextToken: queryValue(query, 'nextToken') });
  const since = timeParam(query, 'since');
  const until = timeParam(query, 'until');
  if (since !== undefined && until !== undefined && since > until) throw errors.invalid('since must not be after until');

  const after = queryValue(query, 'nextToken');
  if (after !== undefined && !isEventId(after)) throw errors.invalid(`nextToken ${quote(after)} is not an event ID`);

  const severities = queryList(query['severity']).map((s) => parseEnum('severity', s, eventSeverities));
  const typeText = queryValue(query, 'componentType');
  const componentType = typeText === undefined ? undefined : parseEnum('componentType', typeText, eventTypes);
  const projectName = pathProject ?? queryValue(query, 'projectName');

  const filters = [
    componentType !== undefined ? 'componentType' : undefined,
    projectName !== undefined ? 'projectName' : undefined,
    severities.length > 0 ? 'severity' : undefined,
  ].filter((f) => f !== undefined);
  if (filters.length > 1) {
    throw new StrataError('UNIMPLEMENTED', `filtering by more than one of componentType, projectName, severity is not supported; got ${filters.join(', ')}`);
  }

  return {
    limit: limitParam(query),
    ...(since !== undefined ? { since } : {}),
    ...(until !== undefined ? { until } : {}),
    ...(after !== undefined ? { after } : {}),
    ...(severities.length > 0 ? { severities: new Set(severities) } : {}),
    ...(componentType !== undefined ? { componentType } : {}),
    ...(projectName !== undefined ? { projectName } : {}),
  };
}

/** limit: a decimal integer; 0 or absent = the default (100); above 1000 = 1000. */
function limitParam(query: Query): number {
  const text = queryValue(query, 'limit');
  if (text === undefined) return DEFAULT_EVENT_LIMIT;
  if (!/^\s*\+?\d+\s*$/.test(text)) throw errors.invalid(`limit must be a non-negative integer; got ${quote(text)}`);
  const n = Number(text);
  if (n === 0) return DEFAULT_EVENT_LIMIT;
  return Math.min(n, MAX_EVENT_LIMIT);
}

function timeParam(query: Query, name: string): bigint | undefined {
  const text = queryValue(query, name);
  if (text === undefined) return undefined;
  const ns = parseIsoTimeNs(text);
  if (ns === undefined) throw errors.invalid(`${name} must be an ISO-8601 UTC time such as 2024-05-01T12:00:00Z; got ${quote(text)}`);
  return ns;
}

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?\s*([Zz]|[+-]\d{2}(?::?\d{2})?)?$/;

/**
 * An ISO-8601 / RFC 3339 time to epoch nanoseconds (up to nine fractional digits kept exactly).
 * A date alone is midnight; no offset means UTC (the API speaks UTC). Invalid: undefined.
 */
export function parseIsoTimeNs(text: string): bigint | undefined {
  const m = ISO_TIME.exec(text.trim());
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4] ?? '0', m[5] ?? '0', m[6] ?? '0'].map(Number) as [number, number, number, number, number, number];
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 59) return undefined;
  const ms = Date.UTC(year, month - 1, day, hour, minute, second);
  const check = new Date(ms);
  if (check.getUTCFullYear() !== year || check.getUTCMonth() !== month - 1 || check.getUTCDate() !== day) return undefined; // Feb 30
  let offsetMinutes = 0;
  const zone = m[8];
  if (zone && zone !== 'Z' && zone !== 'z') {
    const digits = zone.slice(1).replace(':', '');
    const hours = Number(digits.slice(0, 2));
    const minutes = digits.length > 2 ? Number(digits.slice(2)) : 0;
    if (hours > 23 || minutes > 59) return undefined;
    offsetMinutes = (zone[0] === '-' ? -1 : 1) * (hours * 60 + minutes);
  }
  const fraction = BigInt((m[7] ?? '').padEnd(9, '0') || '0');
  return (BigInt(ms) - BigInt(offsetMinutes) * 60_000n) * 1_000_000n + fraction;
}

// ---- the answer (wire-conventions §7; EventWire) ----

const componentRef = z.object({ ID: z.string(), Name: z.string() });
export const eventAnswer = z.object({
  ID: z.string(),
  Time: z.string(),
  Type: z.enum(eventTypes),
  Severity: z.enum(eventSeverities),
  EventName: z.string(),
  EventCode: z.number().int(),
  ReportingService: z.enum(['CM', 'NM', 'API', 'UM']),
  AssociatedEventID: z.string(),
  Status: z.string(),
  CauseCode: z.number().int(),
  Description: z.string(),
  ComponentVolumesInfo: z.object({ ProjectVolumesMap: z.record(z.string(), z.object({ VolumeComponentInfoList: z.array(componentRef) })) }).nullable(),
  ComponentNVMeSSDInfo: componentRef.nullable(),
  ComponentNodeInfo: componentRef.nullable(),
  ComponentServerInfo: componentRef.nullable(),
  ComponentClusterInfo: componentRef.nullable(),
  ComponentDataIntegrityInfo: z.object({ NodeUUID: z.string(), ServerUUID: z.string(), SSDs: z.array(componentRef) }).nullable(),
});
export const eventPageAnswer = z.object({ events: z.array(eventAnswer), nextToken: z.string() });
