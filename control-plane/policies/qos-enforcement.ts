// Whether the QoS in effect for each volume is enforced, as the volumes' primaries report it
// (VolumeStatusRecord.qos), read from the watch cache (every request's sync() made it current):
// the policies API's `state` and the Strata extension GET /api/v2/policies/{UUID}/enforcement
// (docs/policies.md "Enforcement"). The rules are volume-qos.ts's; this only gathers the records.
import type { QosLimits } from '../../lib/contract/qos.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';
import type { PolicyRecord } from './policy-record.js';
import { effectiveQosPolicyUUID, enforcementOf, policyStateOf, primaryOf, volumeQos, type QosEnforcementState } from './volume-qos.js';

/** One volume in GET /api/v2/policies/{UUID}/enforcement. */
export interface VolumeEnforcementWire {
  UUID: string;
  name: string;
  projectName: string;
  /** The policy in effect (the volume's own, else its project's default). */
  policyUUID: string;
  /** The node whose report decides: the volume's primary ('' before placement). */
  nodeUUID: string;
  state: QosEnforcementState;
  /** Why not Enforced ('' when Enforced); names the node. */
  reason: string;
  /** What the I/O path must enforce for this volume (lib/contract/qos.ts units; 0 = unlimited). */
  limits: QosLimits;
}

export type PolicyState = ReturnType<typeof policyStateOf>;

/** What the policies service needs to answer honestly. */
export interface PolicyEnforcement {
  /** The volumes (not Deleting, not Failed) a policy is in effect for; every policy's when undefined. */
  volumes(policyUUID?: string): VolumeEnforcementWire[];
  /** Each policy's state from its volumes' enforcement; a policy absent here has no volume: Active. */
  states(): Map<string, PolicyState>;
}

export class WatchedQosEnforcement implements PolicyEnforcement {
  constructor(private readonly cache: WatchCache) {}

  volumes(policyUUID?: string): VolumeEnforcementWire[] {
    const result: VolumeEnforcementWire[] = [];
    for (const { record: volume } of this.cache.volumesInOrder()) {
      // A Deleting or Failed volume serves no I/O: nothing to enforce there.
      if (volume.state === 'Deleting' || volume.state === 'Failed') continue;
      const project = this.cache.project(volume.projectName)?.record;
      const inEffect = effectiveQosPolicyUUID(volume, project);
      if (inEffect === '' || (policyUUID !== undefined && inEffect !== policyUUID)) continue;
      const limits = volumeQos(volume, project, (uuid) => this.cache.policy<PolicyRecord>(uuid)?.record);
      if (!limits) continue;
      const nodeUUID = primaryOf(volume, this.cache.replicaSet(volume.UUID)?.primaryNodeUUID);
      const report = this.cache.statusesOf(volume.UUID).find((s) => s.nodeUUID === nodeUUID);
      const { state, reason } = enforcementOf(limits, nodeUUID, report);
      result.push({ UUID: volume.UUID, name: volume.name, projectName: volume.projectName, policyUUID: inEffect, nodeUUID, state, reason, limits });
    }
    return result;
  }

  states(): Map<string, PolicyState> {
    const byPolicy = new Map<string, VolumeEnforcementWire[]>();
    for (const volume of this.volumes()) {
      const list = byPolicy.get(volume.policyUUID);
      if (list) list.push(volume);
      else byPolicy.set(volume.policyUUID, [volume]);
    }
    return new Map([...byPolicy].map(([uuid, volumes]) => [uuid, policyStateOf(volumes)]));
  }
}
