// Request input of the policies API (spec 4.10, wire-conventions §7). Create uses the key
// `qoSRateLimitPolicy` (responses say `QoSRateLimitPolicy`); input also accepts the response
// spelling, so a client can send back what it read.
import { z } from 'zod';
import { StrataError, errors, quote } from '../../lib/errors.js';
import { NAME_DOC, NAME_PATTERN, enumeration, integer, optional, parseInput } from '../http/lenient.js';
import { queryValue } from '../http/body.js';
import { UUID_PATTERN, uuidSchema } from '../../lib/contract/uuid.js';
import { description, object, objectName, requiredString, uniqueList } from '../projects/projects-schema.js';
import {
  LIMIT_FIELDS,
  LIMIT_KINDS,
  MAX_LIMIT,
  POLICY_STATES,
  POLICY_VISIBILITIES,
  type LimitKind,
  type PolicyRecord,
  type PolicyVisibility,
  type QosLimit,
  type StoredVisibility,
} from './policy-record.js';

/** Projects one Scoped policy may name. */
export const MAX_SCOPE_PROJECTS = 1000;

const NAME_RULE = 'must be 1 to 253 characters from a-z, A-Z, 0-9, hyphen, underscore, period';
const policyName = () => requiredString().refine((s) => NAME_PATTERN.test(s), NAME_RULE).meta(NAME_DOC);

const limitValue = optional(integer({ min: 0, max: MAX_LIMIT }));
const limitSchema = (kind: LimitKind) => {
  const [write, read] = LIMIT_FIELDS[kind];
  return object({ [write]: limitValue, [read]: limitValue }) as z.ZodType<Record<string, number | undefined>>;
};

const qosSchema = object({
  projectsNamesScope: optional(uniqueList(objectName, MAX_SCOPE_PROJECTS)),
  policyVisibility: optional(enumeration(POLICY_VISIBILITIES)),
  limitIOPS: optional(limitSchema('limitIOPS')),
  limitBw: optional(limitSchema('limitBw')),
  limitIOPSPerGB: optional(limitSchema('limitIOPSPerGB')),
});
type QosBody = z.output<typeof qosSchema>;

export const createPolicyBody = object({
  name: policyName(),
  description: optional(description),
  qoSRateLimitPolicy: optional(qosSchema),
  QoSRateLimitPolicy: optional(qosSchema),
});

export const updatePolicyBody = object({
  description: optional(description),
  qoSRateLimitPolicy: optional(qosSchema),
  QoSRateLimitPolicy: optional(qosSchema),
});

/** The QoS part of a request, as given: absent fields are undefined. */
export interface QosInput {
  readonly projectsNamesScope?: readonly string[];
  readonly policyVisibility?: PolicyVisibility;
  readonly limit?: QosLimit;
}

export interface CreatePolicyInput {
  readonly name: string;
  readonly description: string;
  readonly qos: QosInput;
}

export interface UpdatePolicyInput {
  readonly description?: string;
  readonly qos?: QosInput;
}

export function parseCreatePolicy(body: Record<string, unknown>): CreatePolicyInput {
  const input = parseInput(createPolicyBody, body);
  const qos = input.qoSRateLimitPolicy ?? input.QoSRateLimitPolicy;
  if (!qos) throw errors.invalid('invalid request: qoSRateLimitPolicy is required');
  const parsed = qosInput(qos);
  if (!parsed.limit) throw errors.invalid('invalid request: qoSRateLimitPolicy needs one of limitIOPS, limitBw, limitIOPSPerGB');
  return { name: input.name, description: input.description ?? '', qos: parsed };
}

/** PUT body; the path's UUID names the policy (a `name` in the body is ignored: no renames). */
export function parseUpdatePolicy(body: Record<string, unknown>): UpdatePolicyInput {
  const input = parseInput(updatePolicyBody, body);
  const qos = input.qoSRateLimitPolicy ?? input.QoSRateLimitPolicy;
  const update: { description?: string; qos?: QosInput } = {};
  if (input.description !== undefined) update.description = input.description;
  if (qos) update.qos = qosInput(qos);
  return update;
}

function qosInput(qos: QosBody): QosInput {
  const given = LIMIT_KINDS.filter((kind) => qos[kind] !== undefined);
  if (given.length > 1) {
    throw errors.invalid(`invalid request: qoSRateLimitPolicy takes exactly one of limitIOPS, limitBw, limitIOPSPerGB; got ${given.join(', ')}`);
  }
  if (qos.policyVisibility === 'Unavailable') {
    throw errors.invalid('invalid request: qoSRateLimitPolicy.policyVisibility must be Scoped or Global (Unavailable is only shown to callers that may not see the scope)');
  }
  const input: { projectsNamesScope?: readonly string[]; policyVisibility?: PolicyVisibility; limit?: QosLimit } = {};
  if (qos.projectsNamesScope !== undefined) input.projectsNamesScope = qos.projectsNamesScope;
  if (qos.policyVisibility !== undefined) input.policyVisibility = qos.policyVisibility;
  const kind = given[0];
  if (kind) {
    const [write, read] = LIMIT_FIELDS[kind];
    const values = qos[kind]!;
    // A limit left out is 0, unlimited (proto3: an unset number is 0).
    input.limit = { kind, write: values[write] ?? 0, read: values[read] ?? 0 };
  }
  return input;
}

export interface ResolvedQos {
  readonly policyVisibility: StoredVisibility;
  readonly projectsNamesScope: string[];
  readonly limit: QosLimit;
}

/**
 * The QoS settings after applying `input` to `current` (absent on create). Absent fields keep
 * their value; on create an absent visibility is Scoped when a scope is given, else Global.
 * Switching to Global drops the scope. A Scoped policy names at least one project; a Global
 * one names none.
 */
export function resolveQos(input: QosInput, current?: Pick<PolicyRecord, 'policyVisibility' | 'projectsNamesScope' | 'limit'>): ResolvedQos {
  const visibility = (input.policyVisibility ??
    current?.policyVisibility ??
    ((input.projectsNamesScope?.length ?? 0) > 0 ? 'Scoped' : 'Global')) as StoredVisibility;
  const scope = [...(input.projectsNamesScope ?? (visibility === 'Global' ? [] : current?.projectsNamesScope ?? []))];
  if (visibility === 'Scoped' && scope.length === 0) {
    throw errors.invalid('invalid request: a Scoped policy needs at least one project in qoSRateLimitPolicy.projectsNamesScope');
  }
  if (visibility === 'Global' && scope.length > 0) {
    throw errors.invalid('invalid request: projectsNamesScope applies only to Scoped policies; a Global policy is visible to every project');
  }
  const limit = input.limit ?? current?.limit;
  if (!limit) throw errors.invalid('invalid request: qoSRateLimitPolicy needs one of limitIOPS, limitBw, limitIOPSPerGB');
  return { policyVisibility: visibility, projectsNamesScope: scope, limit };
}

export interface PolicyLookup {
  readonly UUID?: string;
  readonly name?: string;
  readonly projectName?: string;
}

type Query = Record<string, string | string[] | undefined>;

/** Query of GET /api/v2/policies and GET /api/v2/policies/{UUID}: UUID, name, projectName. */
export function parsePolicyQuery(query: Query, pathUUID?: string): PolicyLookup {
  const lookup: { UUID?: string; name?: string; projectName?: string } = {};
  const UUID = pathUUID || queryValue(query, 'UUID');
  const name = queryValue(query, 'name');
  const projectName = queryValue(query, 'projectName');
  const bad: string[] = [];
  if (UUID !== undefined) {
    if (UUID_PATTERN.test(UUID)) lookup.UUID = UUID.toLowerCase();
    else bad.push(`UUID ${quote(UUID)} is not a UUID`);
  }
  if (name !== undefined) {
    if (NAME_PATTERN.test(name)) lookup.name = name;
    else bad.push(`name ${NAME_RULE}`);
  }
  if (projectName !== undefined) {
    if (objectName.safeParse(projectName).success) lookup.projectName = projectName;
    else bad.push('projectName is not a valid project name');
  }
  if (bad.length > 0) throw new StrataError('INVALID_ARGUMENT', `invalid query: ${bad.join('; ')}`);
  return lookup;
}

/** The query as the document shows it (parsePolicyQuery checks the same rules). */
export const policyQuery = z.object({
  UUID: optional(uuidSchema),
  name: optional(z.string().regex(NAME_PATTERN, NAME_RULE)),
  projectName: optional(objectName),
});
export const policyParams = z.object({ uuid: uuidSchema });

// ---- the answer (PolicyWire; GET of one adds its ETag) ----

const policyFields = {
  UUID: z.string(),
  name: z.string(),
  description: z.string(),
  state: z.enum(POLICY_STATES),
  QoSRateLimitPolicy: z.object({
    projectsNamesScope: z.array(z.string()),
    policyVisibility: z.enum(POLICY_VISIBILITIES),
    limitIOPS: z.object({ writeIOPSLimit: z.number(), readIOPSLimit: z.number() }).optional(),
    limitBw: z.object({ writeBWLimit: z.number(), readBWLimit: z.number() }).optional(),
    limitIOPSPerGB: z.object({ writeIOPSPerGBLimit: z.number(), readIOPSPerGBLimit: z.number() }).optional(),
  }),
};
export const policyAnswer = z.object(policyFields);
export const policyWithEtagAnswer = z.object({ ...policyFields, ETag: z.string() });
export const policyListAnswer = z.object({ policies: z.array(policyAnswer) });

/** GET /api/v2/policies/{UUID}/enforcement (Strata extension; qos-enforcement.ts). */
export const policyEnforcementAnswer = z.object({
  volumes: z.array(
    z.object({
      UUID: z.string(),
      name: z.string(),
      projectName: z.string(),
      policyUUID: z.string(),
      nodeUUID: z.string(),
      state: z.enum(['Enforced', 'NotEnforced', 'Pending']),
      reason: z.string(),
      limits: z.object({ readIops: z.number(), writeIops: z.number(), readBytesPerSecond: z.number(), writeBytesPerSecond: z.number() }),
    }),
  ),
});
