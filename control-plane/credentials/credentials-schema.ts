// Request input of the credentials API (wire-conventions §6): `{name, type, payload}`.
// Compatibility: the reference API calls the name `ID` and types payload as protobuf bytes
// (base64 in JSON), so `ID` is accepted for `name` and a base64-encoded PEM for `payload`.
// `type` is the reference's CredsType enum (UnknownType, RS256PubKey, TlsCertChainPem,
// TlsPrivKeyPem) by name or number; only RS256PubKey exists in Strata, and it is the default.
import { z } from 'zod';
import { errors, quote } from '../../lib/errors.js';
import { enumeration, optional, parseInput } from '../http/lenient.js';
import { isObjectName, objectName } from '../projects/projects-schema.js';

/** A PEM public key is a few KiB; anything much larger is not one. */
export const MAX_PAYLOAD_CHARS = 16 * 1024;

const CREDS_TYPES = ['UnknownType', 'RS256PubKey', 'TlsCertChainPem', 'TlsPrivKeyPem'] as const;

export const createCredentialBody = z.object(
  {
    name: optional(objectName),
    ID: optional(objectName),
    type: optional(enumeration(CREDS_TYPES)),
    payload: optional(z.string({ error: 'must be a string (a PEM public key)' }).max(MAX_PAYLOAD_CHARS, `must be at most ${MAX_PAYLOAD_CHARS} characters`)),
  },
  { error: 'must be an object' },
);

export interface CreateCredentialInput {
  readonly name: string;
  readonly type: 'RS256PubKey';
  /** As given (PEM text, or base64 of it): the service validates and normalizes it. */
  readonly payload: string;
}

export function parseCreateCredential(body: Record<string, unknown>): CreateCredentialInput {
  const input = parseInput(createCredentialBody, body);
  const problems: string[] = [];
  if (input.name !== undefined && input.ID !== undefined && input.name !== input.ID) problems.push('name and ID differ (give one)');
  const name = input.name ?? input.ID;
  if (name === undefined) problems.push('name is required');
  if (input.type !== undefined && input.type !== 'RS256PubKey') problems.push(`type ${input.type} is not supported; the only type is RS256PubKey`);
  if (input.payload === undefined || input.payload.trim() === '') problems.push('payload is required (a PEM RSA public key)');
  if (problems.length > 0) throw errors.invalid(`invalid request: ${problems.join('; ')}`);
  return { name: name!, type: 'RS256PubKey', payload: input.payload! };
}

export function parseCredentialName(raw: string | undefined): string {
  const value = raw ?? '';
  if (!isObjectName(value)) throw errors.invalid(`invalid credential name ${quote(value)}`);
  return value;
}

/** `/projects/{project}/credentials[/{name}]`. */
export const credentialsParams = z.object({ project: objectName });
export const credentialParams = z.object({ project: objectName, name: objectName });

export const credentialAnswer = z.object({ projectName: z.string(), name: z.string(), ID: z.string(), type: z.literal('RS256PubKey'), payload: z.string() });
export const credentialListAnswer = z.object({ credentials: z.array(credentialAnswer) });
