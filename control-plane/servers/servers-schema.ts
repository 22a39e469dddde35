// Query of GET /api/v2/servers (spec 4.12): UUID, Name (capital N), RiskOfServiceLoss (an enum
// name or number; anything else is a 400). Names are case-sensitive; unknown names are ignored.
import { z } from 'zod';
import { UUID_PATTERN } from '../../lib/contract/uuid.js';
import { errors } from '../../lib/errors.js';
import { queryValue } from '../http/body.js';
import { boolean, optional, parseInput } from '../http/lenient.js';
import { object } from '../projects/projects-schema.js';
import { parseEnum } from '../inventory/wire.js';
import { riskOfServiceLossStates, type ServerFilters } from './servers-service.js';

export type Query = Record<string, string | string[] | undefined>;

export function parseServerListQuery(query: Query): ServerFilters {
  const UUID = queryValue(query, 'UUID');
  const name = queryValue(query, 'Name');
  const risk = queryValue(query, 'RiskOfServiceLoss');
  return {
    ...(UUID !== undefined ? { UUID } : {}),
    ...(name !== undefined ? { name } : {}),
    ...(risk !== undefined ? { riskOfServiceLoss: parseEnum('RiskOfServiceLoss', risk, riskOfServiceLossStates) } : {}),
  };
}

// Body of POST /api/v2/servers (spec 4.12): serverEndpoints (exactly one URL with the new member's
// etcd peer port), serverUUID, reuseIP, extendCluster. Lenient (wire-conventions §1).
const endpoint = z.string({ error: 'must be a string' }).trim();
const addSchema = object({
  serverEndpoints: optional(z.array(endpoint, { error: 'must be an array of strings' })),
  serverUUID: optional(z.string({ error: 'must be a string' }).trim()),
  reuseIP: optional(boolean),
  extendCluster: optional(boolean),
});

export interface AddServerInput {
  /** The new member's etcd peer URL, normalized (scheme://host:port). */
  readonly peerURL: string;
  readonly serverUUID: string;
  readonly reuseIP: boolean;
  readonly extendCluster: boolean;
}

export function parseAddServer(body: Record<string, unknown>): AddServerInput {
  const input = parseInput(addSchema, body);
  const endpoints = (input.serverEndpoints ?? []).filter((e) => e !== '');
  const problems: string[] = [];
  if (endpoints.length === 0) problems.push('serverEndpoints is required: the new server\'s etcd peer URL (http://<address>:2380)');
  if (endpoints.length > 1) problems.push(`serverEndpoints must hold exactly one endpoint (got ${endpoints.length})`);
  const peerURL = endpoints.length === 1 ? peerUrlOf(endpoints[0]!) : undefined;
  if (endpoints.length === 1 && peerURL === undefined) problems.push(`serverEndpoints[0] ${quote(endpoints[0]!)} is not an etcd peer URL (http://<address>:<port>)`);
  if (!input.serverUUID) problems.push('serverUUID is required');
  else if (!UUID_PATTERN.test(input.serverUUID)) problems.push('serverUUID must be a UUID');
  if (problems.length > 0) throw errors.invalid(`invalid request: ${problems.join('; ')}`);
  return { peerURL: peerURL!, serverUUID: input.serverUUID!.toLowerCase(), reuseIP: input.reuseIP ?? false, extendCluster: input.extendCluster ?? false };
}

/** scheme://host:port of an http(s) URL with an explicit port and nothing else; undefined otherwise. */
function peerUrlOf(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.port === '' || url.username || url.password || url.search || url.hash || (url.pathname !== '/' && url.pathname !== '')) return undefined;
  return `${url.protocol}//${url.host}`;
}

function quote(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
}
