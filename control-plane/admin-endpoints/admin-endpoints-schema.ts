// Request input of the admin-endpoints API (spec 2.5, 4.2): `{port, ips}`. A port is an
// integer 1..65535 (a JSON number or a decimal string); ips are single IPv4 or IPv6 addresses
// (no CIDR ranges), at least one, no repeats.
import { isIP } from 'node:net';
import { z } from 'zod';
import { errors } from '../../lib/errors.js';
import { integer, optional, parseInput } from '../http/lenient.js';
import { object, uniqueList } from '../projects/projects-schema.js';

export const MAX_IPS = 256;

const port = integer({ min: 1, max: 65535 });
const ips = uniqueList(
  z.string({ error: 'must be a string' }).refine((s) => isIP(s) !== 0, 'must be an IPv4 or IPv6 address'),
  MAX_IPS,
).refine((list) => list.length > 0, 'must list at least one IP address');

export const createAdminEndpointBody = object({ port: optional(port), ips: optional(ips) });
export const updateAdminEndpointBody = object({ ips: optional(ips) });

export interface AdminEndpointInput {
  readonly port: number;
  readonly ips: readonly string[];
}

export function parseCreateAdminEndpoint(body: Record<string, unknown>): AdminEndpointInput {
  const input = parseInput(createAdminEndpointBody, body);
  const missing = [input.port === undefined ? 'port is required' : '', input.ips === undefined ? 'ips is required' : ''].filter((s) => s !== '');
  if (missing.length > 0) throw errors.invalid(`invalid request: ${missing.join('; ')}`);
  return { port: input.port!, ips: input.ips! };
}

/** PUT body: the path's port names the endpoint (a `port` in the body is ignored). */
export function parseUpdateAdminEndpoint(body: Record<string, unknown>): readonly string[] {
  const input = parseInput(updateAdminEndpointBody, body);
  if (input.ips === undefined) throw errors.invalid('invalid request: ips is required');
  return input.ips;
}

/** A port in the path or the query. */
export function parsePort(raw: string | undefined, where = 'port'): number {
  const value = (raw ?? '').trim();
  const parsed = /^\d{1,5}$/.test(value) ? Number(value) : NaN;
  if (!(parsed >= 1 && parsed <= 65535)) throw errors.invalid(`${where} must be an integer from 1 to 65535; got "${value.slice(0, 100)}"`);
  return parsed;
}

/** The path's port (and the list's filter): an integer from 1 to 65535, as text. */
const portText = z.string().regex(/^\s*\d{1,5}\s*$/, 'must be an integer from 1 to 65535').refine((v) => Number(v) >= 1 && Number(v) <= 65535, 'must be an integer from 1 to 65535');
export const adminEndpointParams = z.object({ port: portText });
export const adminEndpointListQuery = z.object({ port: optional(z.string().meta({ description: 'an integer from 1 to 65535 (0: no filter)' })) });

export const adminEndpointAnswer = z.object({ port: z.number().int(), ips: z.array(z.string()), ETag: z.string() });
export const adminEndpointListAnswer = z.object({ adminEndpoints: z.array(adminEndpointAnswer) });
