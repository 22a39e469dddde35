// The QoS a volume gets, and whether it is enforced (issue 18, docs/policies.md "Enforcement").
// Pure: the volume controller fills assignments from volumeQos(), the policies API derives a
// policy's state and the per-volume answer from enforcementOf() over the primaries' reports. One
// place, so the limits the controller sends and the limits the API expects to see reported back
// cannot disagree.
import { isUnlimited, sameLimits, volumeQosLimits, type QosLimits } from '../../lib/contract/qos.js';
import type { ProjectRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import { POLICY_TYPE_QOS } from '../projects/projects-schema.js';
import type { PolicyRecord } from './policy-record.js';

/** The project's default QoS policy UUID, '' when none (or no project). */
export function defaultQosPolicyUUID(project: Pick<ProjectRecord, 'defaultPolicies'> | null | undefined): string {
  return (project?.defaultPolicies ?? []).find((p) => p.policyType === POLICY_TYPE_QOS)?.policyUUID ?? '';
}

/** The policy in effect: the volume's own, else its project's default ('' when neither). */
export function effectiveQosPolicyUUID(volume: Pick<VolumeRecord, 'qosPolicyUUID'>, project: Pick<ProjectRecord, 'defaultPolicies'> | null | undefined): string {
  return volume.qosPolicyUUID || defaultQosPolicyUUID(project);
}

/**
 * The limits every node serving the volume must enforce: its effective policy's, scaled by its
 * size (lib/contract/qos.ts); null when no policy applies (or the one named is gone).
 */
export function volumeQos(
  volume: Pick<VolumeRecord, 'qosPolicyUUID' | 'sizeBytes'>,
  project: Pick<ProjectRecord, 'defaultPolicies'> | null | undefined,
  policyOf: (policyUUID: string) => Pick<PolicyRecord, 'limit'> | null | undefined,
): QosLimits | null {
  const uuid = effectiveQosPolicyUUID(volume, project);
  const policy = uuid === '' ? undefined : policyOf(uuid);
  return policy?.limit ? volumeQosLimits(policy.limit, BigInt(volume.sizeBytes)) : null;
}

/**
 * One volume's enforcement as its primary reports it: Enforced (the limits expected, applied),
 * NotEnforced (the primary cannot: `reason` says why and names the node), Pending (no report of
 * these limits yet: not placed, the primary has not applied a change, or runs an agent that does
 * not report QoS).
 */
export type QosEnforcementState = 'Enforced' | 'NotEnforced' | 'Pending';

export interface QosEnforcement {
  readonly state: QosEnforcementState;
  readonly reason: string;
}

/** The node serving the volume's I/O: a replicated volume's replica-set primary, else placement's. */
export function primaryOf(volume: Pick<VolumeRecord, 'placement'>, replicaSetPrimary: string | undefined): string {
  return replicaSetPrimary ?? volume.placement?.primaryNodeUUID ?? '';
}

export function enforcementOf(expected: QosLimits, primaryNodeUUID: string, primaryReport: Pick<VolumeStatusRecord, 'qos'> | undefined): QosEnforcement {
  if (primaryNodeUUID === '') return { state: 'Pending', reason: 'the volume is not placed yet' };
  const reported = primaryReport?.qos;
  // A policy whose limits are all 0 (unlimited) asks for no stage: the agent serves the volume
  // straight from its array and reports no QoS at all (agent/datapath/reconcile/pass-statuses.ts),
  // which is what "enforced" means here. Only a primary still reporting limits (the stage of an
  // earlier policy, not removed yet) is behind.
  if (isUnlimited(expected)) {
    if (reported && reported.state === 'Enforced' && !isUnlimited(reported.limits)) {
      return { state: 'Pending', reason: `node ${primaryNodeUUID} (primary) still enforces earlier limits; the current ones are not reported applied yet` };
    }
    return { state: 'Enforced', reason: '' };
  }
  if (!reported) return { state: 'Pending', reason: `node ${primaryNodeUUID} (primary) has not reported enforcing the limits yet` };
  if (reported.state === 'NotEnforced') return { state: 'NotEnforced', reason: reported.reason || `node ${primaryNodeUUID} (primary) does not enforce the limits` };
  if (!sameLimits(reported.limits, expected)) {
    return { state: 'Pending', reason: `node ${primaryNodeUUID} (primary) still enforces earlier limits; the current ones are not reported applied yet` };
  }
  return { state: 'Enforced', reason: '' };
}

/**
 * A policy's state (spec 2.14's enum) from its volumes' enforcement: Active only while every
 * volume using it reports Enforced (or none uses it); Failed when one cannot enforce it; Updating
 * while reports lag.
 */
export function policyStateOf(volumes: Iterable<QosEnforcement>): 'Active' | 'Updating' | 'Failed' {
  let pending = false;
  for (const v of volumes) {
    if (v.state === 'NotEnforced') return 'Failed';
    if (v.state === 'Pending') pending = true;
  }
  return pending ? 'Updating' : 'Active';
}
