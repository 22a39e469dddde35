// Query of GET /api/v2/nodes (spec 4.8): name, UUID, failureDomain; none or exactly one.
// Several is a 400 (TOO_MANY_FILTERS). Names are case-sensitive; unknown names are ignored;
// an empty value counts as not given. Identifiers are typed (a malformed UUID is a 400); the
// path's UUID is typed too, and a malformed one is the 404 of a node that does not exist (the
// spec's one answer for GET /nodes/{UUID}).
import { z } from 'zod';
import { uuidSchema } from '../../lib/contract/uuid.js';
import { StrataError, errors } from '../../lib/errors.js';
import { queryValue } from '../http/body.js';
import { boolean, optional, optionalIdentifier, parseInput } from '../http/lenient.js';
import { storageStatisticsShape } from '../inventory/wire-schemas.js';
import { object } from '../projects/projects-schema.js';
import { foreignName } from '../servers/servers-schema.js';
import type { ReplaceNodeInput, RestartNodeInput, StopNodeInput } from './node-commands-service.js';
import type { NodeFilter } from './nodes-service.js';

export type Query = Record<string, string | string[] | undefined>;

const filterNames = ['name', 'UUID', 'failureDomain'] as const;

export const nodeListQuery = z.object({
  name: optional(foreignName),
  UUID: optional(uuidSchema),
  failureDomain: optional(foreignName),
});

export const nodeParams = z.object({ uuid: uuidSchema });

export function parseNodeListQuery(query: Query): NodeFilter {
  const typed = parseInput(nodeListQuery, Object.fromEntries(filterNames.map((kind) => [kind, queryValue(query, kind)])));
  const given = filterNames
    .map((kind) => ({ kind, value: typed[kind] }))
    .filter((f): f is { kind: (typeof filterNames)[number]; value: string } => f.value !== undefined);
  if (given.length > 1) {
    throw new StrataError('TOO_MANY_FILTERS', `use at most one of the filters ${filterNames.join(', ')}; got ${given.map((f) => f.kind).join(', ')}`);
  }
  return given[0] ?? { kind: 'none' };
}

// Bodies of the node commands (spec 4.8), lenient (wire-conventions §1): stop {force}, restart
// {considerBackend, force}, start {} (anything in it is ignored), replace {TargetNodeUUID
// (required), ReplaceWhileActive}. The path's node UUID must be a UUID (any case).
export const stopSchema = object({ force: optional(boolean) });
export const restartSchema = object({ force: optional(boolean), considerBackend: optional(boolean) });
export const replaceSchema = object({
  TargetNodeUUID: optionalIdentifier(uuidSchema),
  ReplaceWhileActive: optional(boolean),
});

export function parseStopNode(body: Record<string, unknown>): StopNodeInput {
  return { force: parseInput(stopSchema, body).force ?? false };
}

export function parseRestartNode(body: Record<string, unknown>): RestartNodeInput {
  const input = parseInput(restartSchema, body);
  return { force: input.force ?? false, considerBackend: input.considerBackend ?? false };
}

export function parseReplaceNode(body: Record<string, unknown>): ReplaceNodeInput {
  const input = parseInput(replaceSchema, body);
  if (!input.TargetNodeUUID) throw errors.invalid('TargetNodeUUID is required: the Unattached node that takes over the source node\'s copies');
  return { targetNodeUUID: input.TargetNodeUUID, replaceWhileActive: input.ReplaceWhileActive ?? false };
}

// ---- the answer (spec 2.12; NodeWire) ----

export const nodeAnswer = z.object({
  name: z.string(),
  UUID: z.string(),
  state: z.enum(['Unknown', 'Active', 'Activating', 'Inactive', 'Unattached', 'Attaching', 'Detaching']),
  status: z.enum(['NoStatus', 'ConnectivityOK', 'ConnectivityProblem', 'IssuedDeletePeer']),
  nvmeEndpoint: z.string(),
  failureDomains: z.array(z.string()),
  failureInfo: z.string(),
  hostname: z.string(),
  inLocalRebuild: z.boolean(),
  localRebuildProgress: z.number(),
  numManagedDevices: z.number().int(),
  maxNvmeDevices: z.number().int(),
  ec: z.boolean(),
  statistics: z.object({
    ...storageStatisticsShape,
    UnrecoverableDataIntegrityErrors: z.number().int(),
    RecoverableDataIntegrityErrors: z.number().int(),
    GarbageCollectorDataIntegrityErrors: z.number().int(),
    metadataUtilization: z.number(),
  }),
  serverUUID: z.string(),
  ETag: z.string(),
  readOnly: z.boolean(),
  powerupProgress: z.number(),
  permanentFailure: z.boolean(),
  journalDeviceNotFound: z.string(),
  journalNvmeDevice: z.object({ deviceSerial: z.string() }),
  journalRaidDevice: z.object({ deviceUUID: z.string(), memberDeviceSerials: z.array(z.string()) }),
});
export const nodeListAnswer = z.object({ nodes: z.array(nodeAnswer) });
