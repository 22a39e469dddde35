// Wire input of the snapshot routes (wire-conventions §1, §4, §7): the create body, the list
// query, the by-name lookups (GET takes `Name`, DELETE takes `name`: the names clients send)
// and retentionTime, a duration in any of the forms docs/snapshots.md lists.
import { z } from 'zod';
import { errors, quote } from '../../lib/errors.js';
import { queryValue, parseBoolean } from '../http/body.js';
import { NAME_PATTERN, checkIdentifier, integer, name, optional, optionalIdentifier, parseInput, uuid } from '../http/lenient.js';

export type Query = Record<string, string | string[] | undefined>;

/** 100 years of 365 days: a bound that keeps creationTime + retention a valid date. */
export const MAX_RETENTION_SECONDS = 36_500 * 86_400;
/** Bytes of UTF-8 a description may hold; records stay small and every known client fits. */
export const MAX_DESCRIPTION_BYTES = 1024;
/** Default and maximum page of GET …/snapshots (the volumes' page, wire-conventions §4). */
export const MAX_LIST_LIMIT = 1000;

const UNIT_SECONDS: Record<string, number> = {
  ns: 1e-9,
  us: 1e-6, µs: 1e-6,
  ms: 1e-3,
  s: 1, sec: 1, secs: 1, second: 1, seconds: 1,
  m: 60, min: 60, mins: 60, minute: 60, minutes: 60,
  h: 3600, hr: 3600, hrs: 3600, hour: 3600, hours: 3600,
  d: 86_400, day: 86_400, days: 86_400,
  w: 604_800, wk: 604_800, week: 604_800, weeks: 604_800,
};

const RETENTION_HINT = 'must be a duration such as "86400s", "24h", "30m", "7d", "1h30m" or a number of seconds';

/**
 * retentionTime to whole seconds; 0 means "keep forever". Accepts the protobuf JSON duration
 * ("86400s", "1.5s"), Go-style durations with day and week units ("24h", "1h30m", "7d"),
 * a number of seconds (JSON number or numeric string), `{seconds, nanos}` (a Duration struct
 * serialized by a non-protobuf JSON encoder), and "" / 0 / null for forever. A fraction of a
 * second rounds up, so a retention that was asked for never becomes "forever".
 */
export function parseRetention(input: unknown): number {
  let seconds: number;
  if (input === undefined || input === null || input === '') return 0;
  if (typeof input === 'number') {
    seconds = input;
  } else if (typeof input === 'string') {
    seconds = parseDurationText(input);
  } else if (typeof input === 'object' && !Array.isArray(input)) {
    const parts = input as Record<string, unknown>;
    const whole = parts['seconds'] ?? 0;
    const nanos = parts['nanos'] ?? 0;
    const asNumber = (v: unknown) => (typeof v === 'number' ? v : typeof v === 'string' && /^\s*-?\d+\s*$/.test(v) ? Number(v) : Number.NaN);
    if (Object.keys(parts).some((k) => k !== 'seconds' && k !== 'nanos')) throw new Error(RETENTION_HINT);
    seconds = asNumber(whole) + asNumber(nanos) / 1e9;
  } else {
    throw new Error(RETENTION_HINT);
  }
  if (!Number.isFinite(seconds)) throw new Error(RETENTION_HINT);
  if (seconds < 0) throw new Error('must not be negative');
  // Float sums such as 0.1s + 0.2s must not round up past the intended whole second.
  const whole = Math.ceil(seconds - 1e-9);
  if (whole > MAX_RETENTION_SECONDS) throw new Error(`must be at most ${MAX_RETENTION_SECONDS}s (36500d)`);
  return Math.max(whole, 0);
}

function parseDurationText(raw: string): number {
  const text = raw.trim().toLowerCase();
  if (text === '') return 0;
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  if (text.length > 200) throw new Error(RETENTION_HINT);
  const component = /(\d+(?:\.\d*)?|\.\d+)\s*([a-zµ]+)\s*/y;
  let total = 0;
  let at = 0;
  while (at < text.length) {
    component.lastIndex = at;
    const match = component.exec(text);
    if (!match) throw new Error(RETENTION_HINT);
    const unit = UNIT_SECONDS[match[2]!];
    if (unit === undefined) throw new Error(`unknown duration unit "${match[2]}"; use s, m, h, d or w`);
    total += Number(match[1]) * unit;
    at = component.lastIndex;
  }
  return total;
}

/** "<seconds>s" (wire-conventions §1 durations). */
export function formatRetention(seconds: number): string {
  return `${seconds}s`;
}

const retention = z.unknown().transform((v, ctx) => {
  try {
    return parseRetention(v);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});

export const createSnapshotBody = z.object({
  name: optional(name),
  sourceVolumeUUID: optionalIdentifier(uuid),
  sourceVolumeName: optionalIdentifier(name),
  retentionTime: retention.optional(),
  description: optional(
    z.string({ error: 'must be a string' }).refine((v) => Buffer.byteLength(v, 'utf8') <= MAX_DESCRIPTION_BYTES, `must be at most ${MAX_DESCRIPTION_BYTES} bytes`),
  ),
});

export interface CreateSnapshotInput {
  readonly name: string;
  /** At least one of the two; when both, they must name the same volume. */
  readonly sourceVolumeUUID?: string;
  readonly sourceVolumeName?: string;
  readonly retentionSeconds: number;
  readonly description: string;
}

/** The create body. The path's project wins over any `projectName` in the body (§1). */
export function parseCreateSnapshot(body: Record<string, unknown>): CreateSnapshotInput {
  const parsed = parseInput(createSnapshotBody, body);
  const problems: string[] = [];
  if (parsed.name === undefined) problems.push('name is required');
  if (parsed.sourceVolumeUUID === undefined && parsed.sourceVolumeName === undefined) problems.push('sourceVolumeUUID or sourceVolumeName is required');
  if (problems.length > 0) throw errors.invalid(`invalid request: ${problems.join('; ')}`);
  return {
    name: parsed.name!,
    ...(parsed.sourceVolumeUUID !== undefined ? { sourceVolumeUUID: parsed.sourceVolumeUUID } : {}),
    ...(parsed.sourceVolumeName !== undefined ? { sourceVolumeName: parsed.sourceVolumeName } : {}),
    retentionSeconds: parsed.retentionTime ?? 0,
    description: parsed.description ?? '',
  };
}

/** The project path parameter: a name the projects resource could have created. */
export function parseProjectParam(value: string | undefined): string {
  if (value === undefined || !NAME_PATTERN.test(value)) throw errors.invalid('the project name in the path must be 1 to 253 characters from a-z, A-Z, 0-9, hyphen, underscore, period');
  return value;
}

/** How a route addresses one snapshot: by the UUID in the path, or by name (trailing slash). */
export type SnapshotAddress = { readonly UUID: string; readonly name?: string } | { readonly name: string };

/**
 * GET …/snapshots/{UUID} and GET …/snapshots/?Name=X. The by-name form reads `Name`
 * (capital N); with a UUID in the path, a `Name` given as well must match it.
 */
export function parseGetAddress(uuid: string | undefined, query: Query): SnapshotAddress {
  const byName = queryValue(query, 'Name');
  if (uuid !== undefined && uuid !== '') return addressOf(uuid, byName);
  if (byName !== undefined) return { name: checkIdentifier('Name', byName, 'name') };
  if (queryValue(query, 'name') !== undefined) {
    throw errors.invalid('query names are case-sensitive: GET a snapshot by name with ?Name=<name> (capital N)');
  }
  throw errors.invalid('give the snapshot UUID in the path, or its name as ?Name=<name>');
}

/** The path's UUID, and a name given with it, both checked for their type and length. */
function addressOf(uuid: string, byName: string | undefined): SnapshotAddress {
  const UUID = checkIdentifier('the snapshot UUID in the path', uuid, 'UUID');
  return byName === undefined ? { UUID } : { UUID, name: checkIdentifier('name', byName, 'name') };
}

/**
 * DELETE …/snapshots/{UUID} and DELETE …/snapshots/?name=X. The by-name form reads `name`
 * (lower-case n); with a UUID in the path, a `name` given as well must match it.
 */
export function parseDeleteAddress(uuid: string | undefined, query: Query): SnapshotAddress {
  const byName = queryValue(query, 'name');
  if (uuid !== undefined && uuid !== '') return addressOf(uuid, byName);
  if (byName !== undefined) return { name: checkIdentifier('name', byName, 'name') };
  if (queryValue(query, 'Name') !== undefined) {
    throw errors.invalid('query names are case-sensitive: DELETE a snapshot by name with ?name=<name> (lower-case n)');
  }
  throw errors.invalid('give the snapshot UUID in the path, or its name as ?name=<name>');
}

export interface SnapshotListFilter {
  readonly UUID?: string;
  readonly name?: string;
  readonly sourceVolumeUUID?: string;
  /** The volume's current name, or the name it had when the snapshot was taken. */
  readonly sourceVolumeName?: string;
  /** Include Deleting snapshots (hidden by default, like volumes). */
  readonly showAll: boolean;
  readonly limit: number;
  /** The page starts after this snapshot UUID. */
  readonly offsetUUID?: string;
}

const limitSchema = integer({ min: 0 });

/**
 * GET …/snapshots: filters UUID, name (or Name), sourceVolumeUUID, sourceVolumeName, all
 * applied together; showAll; limit (default and maximum 1000; 0 means the default, more is
 * capped); offsetUUID. Unknown names are ignored; an empty value is not given.
 */
export function parseListQuery(query: Query): SnapshotListFilter {
  const lower = queryValue(query, 'name');
  const upper = queryValue(query, 'Name');
  if (lower !== undefined && upper !== undefined && lower !== upper) throw errors.invalid('name and Name are the same filter and must agree');
  const nameFilter = lower ?? upper;
  const rawLimit = queryValue(query, 'limit');
  let limit = MAX_LIST_LIMIT;
  if (rawLimit !== undefined) {
    const parsed = limitSchema.safeParse(rawLimit);
    if (!parsed.success) throw errors.invalid(`limit must be a non-negative integer; got ${quote(rawLimit)}`);
    limit = parsed.data === 0 ? MAX_LIST_LIMIT : Math.min(parsed.data, MAX_LIST_LIMIT);
  }
  const filter: { -readonly [K in keyof SnapshotListFilter]: SnapshotListFilter[K] } = {
    showAll: parseBoolean('showAll', queryValue(query, 'showAll')) ?? false,
    limit,
  };
  const UUID = queryValue(query, 'UUID');
  if (UUID !== undefined) filter.UUID = checkIdentifier('UUID', UUID, 'UUID');
  if (nameFilter !== undefined) filter.name = checkIdentifier('name', nameFilter, 'name');
  const sourceVolumeUUID = queryValue(query, 'sourceVolumeUUID');
  if (sourceVolumeUUID !== undefined) filter.sourceVolumeUUID = checkIdentifier('sourceVolumeUUID', sourceVolumeUUID, 'UUID');
  const sourceVolumeName = queryValue(query, 'sourceVolumeName');
  if (sourceVolumeName !== undefined) filter.sourceVolumeName = checkIdentifier('sourceVolumeName', sourceVolumeName, 'name');
  const offsetUUID = queryValue(query, 'offsetUUID');
  if (offsetUUID !== undefined) filter.offsetUUID = checkIdentifier('offsetUUID', offsetUUID, 'UUID');
  return filter;
}

// ---- as the OpenAPI document shows them (the parsers above check the same rules) ----

const optionalUuidQuery = optional(uuid);
const optionalNameQuery = optional(name);
export const snapshotsParams = z.object({ project: name });
export const snapshotParams = z.object({ project: name, uuid });
export const snapshotListQuery = z.object({
  UUID: optionalUuidQuery, name: optionalNameQuery, Name: optionalNameQuery, sourceVolumeUUID: optionalUuidQuery, sourceVolumeName: optionalNameQuery,
  showAll: optional(z.string()), limit: optional(z.string()), offsetUUID: optionalUuidQuery,
});
/** GET …/snapshots/?Name=X (capital N) or, with a UUID in the path, a Name that must match. */
export const snapshotGetQuery = z.object({ Name: optionalNameQuery });
/** DELETE …/snapshots/?name=X (lower-case n). */
export const snapshotDeleteQuery = z.object({ name: optionalNameQuery });

// ---- the answer (SnapshotWire) ----

const counted = z.string();
export const snapshotAnswer = z.object({
  state: z.enum(['Creating', 'Available', 'Deleting', 'Deleted', 'Failed']),
  UUID: z.string(),
  name: z.string(),
  description: z.string(),
  creationTime: z.string(),
  retentionTime: z.string(),
  sourceVolumeUUID: z.string(),
  sourceVolumeName: z.string(),
  replicaCount: z.number().int(),
  nodeList: z.array(z.string()),
  nsid: z.number().int(),
  acl: z.object({ values: z.array(z.string()) }),
  compression: z.boolean(),
  size: z.string(),
  IPAcl: z.object({ values: z.array(z.string()) }),
  sectorSize: z.number().int(),
  statistics: z.object({ physicalCapacity: counted, physicalOwnedCapacity: counted, physicalOwnedMemory: counted, physicalMemory: counted, userWritten: counted }),
  ETag: z.string(),
  projectName: z.string(),
  primaryNodeUUID: z.string(),
  labels: z.array(z.object({ key: z.string(), value: z.string() })),
  clusterId: z.string(),
  pgUUID: z.string(),
});
export const snapshotListAnswer = z.object({ snapshots: z.array(snapshotAnswer) });
/** GET on the collection: the list, or (trailing slash, ?Name=) one snapshot. */
export const snapshotCollectionAnswer = z.union([snapshotListAnswer, snapshotAnswer]);
