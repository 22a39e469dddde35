// Request input of the projects API, and the lenient field schemas projects, credentials and
// policies share (wire-conventions §1: null = not given, unknown keys ignored, enums by name or
// number). Every failure is one 400 naming each bad field (lenient.parseInput).
import { z } from 'zod';
import { UUID_DOC, uuidSchema } from '../../lib/contract/uuid.js';
import { errors, quote } from '../../lib/errors.js';
import { NAME_DOC, NAME_PATTERN, optional, parseInput } from '../http/lenient.js';

export const MAX_DESCRIPTION_BYTES = 256;

const NAME_RULE = 'must be 1 to 253 characters from a-z, A-Z, 0-9, hyphen, underscore, period (not "." or "..")';

/** A name that is also a URL path segment and an etcd key segment: the volume-name charset, minus "." and "..". */
export function isObjectName(value: string): boolean {
  return NAME_PATTERN.test(value) && value !== '.' && value !== '..';
}

/** A string field that must be present (null counts as absent). */
export function requiredString() {
  return z.preprocess(
    (v) => (v === null ? undefined : v),
    z.string({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a string') }),
  );
}

export const requiredName = () => requiredString().refine(isObjectName, NAME_RULE).meta(NAME_DOC);
export const objectName = z.string({ error: 'must be a string' }).refine(isObjectName, NAME_RULE).meta(NAME_DOC);

export const description = z
  .string({ error: 'must be a string' })
  .refine((s) => Buffer.byteLength(s, 'utf8') <= MAX_DESCRIPTION_BYTES, `must be at most ${MAX_DESCRIPTION_BYTES} bytes`);

/** The one UUID schema (lib/contract/uuid.ts). */
export const uuid = uuidSchema;

/** A JSON object (zod strips unknown keys). */
export function object<T extends z.core.$ZodLooseShape>(shape: T) {
  return z.object(shape, { error: 'must be an object' });
}

/** A list without repeats: a repeated entry is a mistake the client should hear about. */
export function uniqueList<T extends z.ZodType>(item: T, max: number) {
  return z
    .array(item, { error: 'must be an array' })
    .max(max, `must have at most ${max} entries`)
    .refine((list) => new Set(list as unknown[]).size === list.length, 'must not repeat an entry');
}

// ---- policy types of a project's defaultPolicies ----

/**
 * The reference API's PolicyType enum is `unknown = 0, snapshot = 1, qosRateLimit = 2`; its
 * docs call the QoS type "QoS". Input accepts either spelling (any case) or the number;
 * responses say `qosRateLimit`, the enum name reference clients parse. Snapshot policies do
 * not exist in Strata, so only the QoS type is accepted.
 */
export const POLICY_TYPE_QOS = 'qosRateLimit';
const POLICY_TYPE_NAMES = ['unknown', 'snapshot', 'qosRateLimit'] as const;
const POLICY_TYPE_ALIASES: Record<string, string> = { qos: 'qosRateLimit', qosratelimit: 'qosRateLimit', qosratelimitpolicy: 'qosRateLimit', snapshot: 'snapshot', unknown: 'unknown' };

export const policyType = z.preprocess(
  (v) => {
    if (typeof v === 'number' && Number.isInteger(v)) return POLICY_TYPE_NAMES[v] ?? v;
    if (typeof v === 'string') {
      if (/^\d+$/.test(v.trim())) return POLICY_TYPE_NAMES[Number(v)] ?? v;
      return POLICY_TYPE_ALIASES[v.trim().toLowerCase()] ?? v;
    }
    return v;
  },
  z.literal(POLICY_TYPE_QOS, { error: (issue) => (issue.input === 'snapshot' ? 'snapshot policies are not supported; the only policy type is qosRateLimit (QoS)' : 'must be qosRateLimit (or QoS)') }),
);

const defaultPolicy = object({
  policyType: optional(policyType),
  policyUUID: requiredString().pipe(uuid).meta(UUID_DOC),
});

/** At most one default per policy type. */
const defaultPolicies = z
  .array(defaultPolicy, { error: 'must be an array of {policyType, policyUUID}' })
  .max(1, 'must have at most one entry per policy type (the only type is qosRateLimit)');

export interface DefaultPolicyInput {
  readonly policyType: typeof POLICY_TYPE_QOS;
  readonly policyUUID: string;
}

export interface CreateProjectInput {
  readonly name: string;
  readonly description: string;
  readonly defaultPolicies: readonly DefaultPolicyInput[];
}

export interface UpdateProjectInput {
  readonly description?: string;
  readonly defaultPolicies?: readonly DefaultPolicyInput[];
}

export const createProjectBody = object({
  name: requiredName(),
  description: optional(description),
  defaultPolicies: optional(defaultPolicies),
});

export const updateProjectBody = object({
  description: optional(description),
  defaultPolicies: optional(defaultPolicies),
});

const normalizeDefaults = (list: readonly { policyUUID: string }[] | undefined): DefaultPolicyInput[] | undefined =>
  list?.map((p) => ({ policyType: POLICY_TYPE_QOS, policyUUID: p.policyUUID.toLowerCase() }));

export function parseCreateProject(body: Record<string, unknown>): CreateProjectInput {
  const input = parseInput(createProjectBody, body);
  return { name: input.name, description: input.description ?? '', defaultPolicies: normalizeDefaults(input.defaultPolicies) ?? [] };
}

/** PUT body; the path names the project (a `name` in the body is ignored: no renames). */
export function parseUpdateProject(body: Record<string, unknown>): UpdateProjectInput {
  const input = parseInput(updateProjectBody, body);
  const update: { description?: string; defaultPolicies?: DefaultPolicyInput[] } = {};
  if (input.description !== undefined) update.description = input.description;
  const defaults = normalizeDefaults(input.defaultPolicies);
  if (defaults !== undefined) update.defaultPolicies = defaults;
  return update;
}

/** A name in the path: 400 when it cannot be a name at all. */
export function parsePathName(raw: string | undefined, what: string): string {
  const value = raw ?? '';
  if (!isObjectName(value)) throw errors.invalid(`invalid ${what} name ${quote(value)}: ${NAME_RULE}`);
  return value;
}

/** A project's name in the path (`/projects/{name}`). */
export const projectParams = z.object({ name: objectName });

// ---- the answer (ProjectWire) ----

export const projectAnswer = z.object({
  UUID: z.string(),
  name: z.string(),
  description: z.string(),
  defaultPolicies: z.array(z.object({ policyType: z.string(), policyUUID: z.string() })),
  ETag: z.string(),
});
export const projectListAnswer = z.object({ projects: z.array(projectAnswer) });
