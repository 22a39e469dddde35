// Query of GET /api/v2/servers (spec 4.12): UUID, Name (capital N), RiskOfServiceLoss (an enum
// name or number; anything else is a 400). Names are case-sensitive; unknown names are ignored.
import { z } from 'zod';
import { UUID_DOC, UUID_PATTERN, uuidSchema } from '../../lib/contract/uuid.js';
import { errors } from '../../lib/errors.js';
import { queryValue } from '../http/body.js';
import { boolean, optional, parseInput } from '../http/lenient.js';
import { object } from '../projects/projects-schema.js';
import { parseEnum } from '../inventory/wire.js';
import { lastUpgradeSchema, optionalTime } from '../inventory/wire-schemas.js';
import { riskOfServiceLossStates, type ServerFilters } from './servers-service.js';

export type Query = Record<string, string | string[] | undefined>;

/** A name we do not choose (a server's or node's, from its host): bounded, any characters. */
export const foreignName = z.string({ error: 'must be a string' }).min(1).max(253, 'must be at most 253 characters');

/** The query's identifiers are typed: a malformed UUID is a 400, not an empty list. */
export const serverListQuery = z.object({
  UUID: optional(uuidSchema),
  Name: optional(foreignName),
  RiskOfServiceLoss: optional(z.string().meta({ description: `one of ${riskOfServiceLossStates.join(', ')} (or its number)` })),
});

/** GET /servers/{UUID}: the path's UUID. */
export const serverParams = z.object({ uuid: uuidSchema });

export function parseServerListQuery(query: Query): ServerFilters {
  const typed = parseInput(serverListQuery, { UUID: queryValue(query, 'UUID'), Name: queryValue(query, 'Name'), RiskOfServiceLoss: queryValue(query, 'RiskOfServiceLoss') });
  const UUID = typed.UUID;
  const name = typed.Name;
  const risk = typed.RiskOfServiceLoss;
  return {
    ...(UUID !== undefined ? { UUID } : {}),
    ...(name !== undefined ? { name } : {}),
    ...(risk !== undefined ? { riskOfServiceLoss: parseEnum('RiskOfServiceLoss', risk, riskOfServiceLossStates) } : {}),
  };
}

// Body of POST /api/v2/servers (spec 4.12): serverEndpoints (exactly one URL with the new member's
// etcd peer port), serverUUID, reuseIP, extendCluster. Lenient (wire-conventions §1).
const endpoint = z.string({ error: 'must be a string' }).trim();
export const addServerBody = object({
  serverEndpoints: optional(z.array(endpoint, { error: 'must be an array of strings' })),
  serverUUID: optional(z.string({ error: 'must be a string' }).trim().meta(UUID_DOC)),
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
  const input = parseInput(addServerBody, body);
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

// ---- the answer (spec 2.16; ServerWire) ----

export const serverAnswer = z.object({
  UUID: z.string(),
  name: z.string(),
  RiskOfServiceLossState: z.enum(riskOfServiceLossStates),
  NodesUUIDs: z.array(z.string()),
  state: z.enum(['UnknownState', 'Creating', 'Enabled', 'Deleting', 'Failed', 'Disabled', 'Enabling', 'Disabling']),
  ServerEndpoints: z.array(z.string()),
  ETag: z.string(),
  ProductVersion: z.string(),
  UpgradeStatus: z.enum(['Unknown', 'None', 'UpgradeFailed', 'Upgrading', 'Rebooting', 'Recovering']),
  ApiEndpoints: z.array(z.string()),
  LastUpgrade: lastUpgradeSchema,
  IsWitness: z.boolean(),
  LastEviction: z.object({
    status: z.enum(['None', 'Failed', 'Evicting', 'Aborting', 'Completed', 'Aborted']),
    startTime: optionalTime,
    endTime: optionalTime,
    errorMessage: z.string(),
    progress: z.number(),
  }),
  health: z.enum(['None', 'OK', 'Warning', 'Error']),
  ServerPermanenetFailureTimeout: z.string().nullable(),
  tpm2IsSupported: z.boolean(),
  etcdMemberInfo: z.object({ state: z.enum(['Unknown', 'Healthy', 'Unhealthy']), role: z.enum(['UnknownRole', 'Leader', 'Follower', 'Learner']) }),
});
export const serverListAnswer = z.object({ servers: z.array(serverAnswer) });
