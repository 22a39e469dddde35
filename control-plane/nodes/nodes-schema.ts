// Query of GET /api/v2/nodes (spec 4.8): name, UUID, failureDomain; none or exactly one.
// Several is a 400 (TOO_MANY_FILTERS). Names are case-sensitive; unknown names are ignored;
// an empty value counts as not given.
import { StrataError } from '../../lib/errors.js';
import { queryValue } from '../http/body.js';
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
