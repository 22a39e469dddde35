// QoS rate-limit policies (spec 2.14, wire-conventions §7): the stored record, visibility, and
// the wire shape. A policy is a cluster-wide object; projects see the Global ones and the
// Scoped ones that name them in projectsNamesScope.
//
// Wire decisions (docs/policies.md):
// - Limits are JSON numbers: the reference API types them uint32 (wire-conventions §1: 32-bit
//   integers are numbers), so 0..4294967295; 0 means unlimited.
// - `QoSRateLimitPolicy` carries projectsNamesScope, policyVisibility and exactly the one limit
//   object that is set (protobuf JSON never emits the unset members of a oneof).
// - Callers without a cluster role get policyVisibility `Unavailable` and an empty scope: the
//   enum value exists for this, and it keeps one tenant from learning other projects' names.

export const POLICY_VISIBILITIES = ['Unavailable', 'Scoped', 'Global'] as const;
export type PolicyVisibility = (typeof POLICY_VISIBILITIES)[number];
export type StoredVisibility = Exclude<PolicyVisibility, 'Unavailable'>;

export const POLICY_STATES = ['Unknown', 'Creating', 'Active', 'Updating', 'Deprecated', 'Failed'] as const;

/** The three limit kinds and their (write, read) field names. */
export const LIMIT_FIELDS = {
  limitIOPS: ['writeIOPSLimit', 'readIOPSLimit'],
  limitBw: ['writeBWLimit', 'readBWLimit'],
  limitIOPSPerGB: ['writeIOPSPerGBLimit', 'readIOPSPerGBLimit'],
} as const;
export type LimitKind = keyof typeof LIMIT_FIELDS;
export const LIMIT_KINDS = Object.keys(LIMIT_FIELDS) as LimitKind[];

/** uint32 on the reference wire. */
export const MAX_LIMIT = 4_294_967_295;

export interface QosLimit {
  readonly kind: LimitKind;
  /** IOPS, MB/s or IOPS per GB by kind; 0 = unlimited. */
  readonly write: number;
  readonly read: number;
}

/** /strata/policies/<UUID>. Lives here until lib/records.ts takes it. */
export interface PolicyRecord {
  UUID: string;
  name: string;
  description: string;
  /**
   * Always Active as stored. The state answered is derived from its volumes' enforcement, as
   * their primaries report it (qos-enforcement.ts, docs/policies.md "Enforcement").
   */
  state: 'Active';
  policyVisibility: StoredVisibility;
  /** Projects that may use a Scoped policy; empty for Global. */
  projectsNamesScope: string[];
  limit: QosLimit;
  createdAt: string;
}

/** /strata/policy-names/<name>: the cluster-wide name index. */
export interface PolicyNameRecord {
  UUID: string;
}

export function isVisibleTo(policy: Pick<PolicyRecord, 'policyVisibility' | 'projectsNamesScope'>, project: string): boolean {
  return policy.policyVisibility === 'Global' || policy.projectsNamesScope.includes(project);
}

export interface QoSRateLimitPolicyWire {
  projectsNamesScope: string[];
  policyVisibility: PolicyVisibility;
  limitIOPS?: { writeIOPSLimit: number; readIOPSLimit: number };
  limitBw?: { writeBWLimit: number; readBWLimit: number };
  limitIOPSPerGB?: { writeIOPSPerGBLimit: number; readIOPSPerGBLimit: number };
}

/** The spec's five fields (list items, create response). */
export interface PolicyWire {
  UUID: string;
  name: string;
  description: string;
  state: (typeof POLICY_STATES)[number];
  QoSRateLimitPolicy: QoSRateLimitPolicyWire;
}

/**
 * `revealScope`: the caller holds a cluster role (else visibility is masked, see above). `state`:
 * what its volumes' enforcement says (default: the stored Active, for a policy no volume uses).
 */
export function policyToWire(policy: PolicyRecord, revealScope: boolean, state: PolicyWire['state'] = policy.state): PolicyWire {
  const [writeField, readField] = LIMIT_FIELDS[policy.limit.kind];
  const qos = {
    projectsNamesScope: revealScope ? [...policy.projectsNamesScope] : [],
    policyVisibility: revealScope ? policy.policyVisibility : 'Unavailable',
    [policy.limit.kind]: { [writeField]: policy.limit.write, [readField]: policy.limit.read },
  } as QoSRateLimitPolicyWire;
  return { UUID: policy.UUID, name: policy.name, description: policy.description, state, QoSRateLimitPolicy: qos };
}
