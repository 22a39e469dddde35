// Query of GET /api/v2/nodes (spec 4.8): name, UUID, failureDomain; none or exactly one.
// Several is a 400 (TOO_MANY_FILTERS). Names are case-sensitive; unknown names are ignored;
// an empty value counts as not given.
import { z } from 'zod';
import { UUID_PATTERN } from '../../lib/contract/uuid.js';
import { StrataError, errors, quote } from '../../lib/errors.js';
import { queryValue } from '../http/body.js';
import { boolean, optional, parseInput } from '../http/lenient.js';
import { object } from '../projects/projects-schema.js';
import type { ReplaceNodeInput, RestartNodeInput, StopNodeInput } from './node-commands-service.js';
import type { NodeFilter } from './nodes-service.js';

export type Query = Record<string, string | string[] | undefined>;

const filterNames = ['name', 'UUID', 'failureDomain'] as const;

export function parseNodeListQuery(query: Query): NodeFilter {
  const given = filterNames
    .map((kind) => ({ kind, value: queryValue(query, kind) }))
    .filter((f): f is { kind: (typeof filterNames)[number]; value: string } => f.value !== undefined);
  if (given.length > 1) {
    throw new StrataError('TOO_MANY_FILTERS', `use at most one of the filters ${filterNames.join(', ')}; got ${given.map((f) => f.kind).join(', ')}`);
  }
  return given[0] ?? { kind: 'none' };
}

// Bodies of the node commands (spec 4.8), lenient (wire-conventions §1): stop {force}, restart
// {considerBackend, force}, start {} (anything in it is ignored), replace {TargetNodeUUID
// (required), ReplaceWhileActive}. The path's node UUID must be a UUID (any case).
const stopSchema = object({ force: optional(boolean) });
const restartSchema = object({ force: optional(boolean), considerBackend: optional(boolean) });
const replaceSchema = object({
  TargetNodeUUID: optional(z.string({ error: 'must be a string' }).trim()),
  ReplaceWhileActive: optional(boolean),
});

export function parseNodeUUID(value: string, what = 'the node UUID in the path'): string {
  if (!UUID_PATTERN.test(value)) throw errors.invalid(`${what} must be a UUID (got "${quote(value)}")`);
  return value.toLowerCase();
}

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
  return { targetNodeUUID: parseNodeUUID(input.TargetNodeUUID, 'TargetNodeUUID'), replaceWhileActive: input.ReplaceWhileActive ?? false };
}
