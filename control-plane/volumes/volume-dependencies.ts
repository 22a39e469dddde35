// What the volumes service needs from other resources, as interfaces: projects, policies,
// snapshots, feature flags, the cluster's replica limit. Each is implemented by its own
// resource folder (projects/, policies/, snapshots/, feature-flags/, cluster/) and wired in
// control-plane.ts. Errors follow the registry: a missing project/policy/snapshot is NOT_FOUND.

import type { KernelCapability } from '../../lib/contract/kernel-capabilities.js';

export const FEATURE_FLAG_NAMES = ['event-log', 'evict-data', 'fail-in-place', 'in-band-authentication', 'proactive-rebalance'] as const;
export type FeatureFlagName = (typeof FEATURE_FLAG_NAMES)[number];

export interface ProjectDirectory {
  /** Throws NOT_FOUND (404) when the project does not exist. */
  require(projectName: string): Promise<void>;
  /** The project's default QoS policy UUID, '' when none. */
  defaultQosPolicyUUID(projectName: string): Promise<string>;
}

export interface PolicyRef {
  readonly UUID: string;
  readonly name: string;
}

export interface PolicyDirectory {
  /**
   * Resolves a policy given by UUID or name (at least one given; both must agree) that the
   * project may use. NOT_FOUND when absent; INVALID_ARGUMENT when UUID and name disagree or
   * the policy is not visible to the project.
   */
  resolve(projectName: string, ref: { UUID?: string; name?: string }): Promise<PolicyRef>;
  /** Name of a policy by UUID, '' when it no longer exists. */
  nameOf(policyUUID: string): Promise<string>;
}

/**
 * The nodes' kernel capabilities (kernel-capabilities/): a QoS policy is enforced by a ublk
 * server on the nodes that serve the volume (docs/policies.md "Enforcement").
 */
export interface KernelCapabilityCheck {
  /** KERNEL_CAPABILITY_MISSING naming each node (default: every node) whose kernel lacks it. */
  require(capability: KernelCapability, action: string, nodeUUIDs?: readonly string[]): Promise<void>;
}

export interface SnapshotRef {
  readonly UUID: string;
  readonly name: string;
  readonly projectName: string;
  readonly sourceVolumeUUID: string;
  readonly sizeBytes: string;
  readonly compression: boolean;
  readonly sectorSize: 512 | 4096;
  readonly labels: readonly { key: string; value: string }[];
  readonly state: 'Creating' | 'Available' | 'Deleting' | 'Failed';
}

export interface SnapshotDirectory {
  /** A snapshot of the project by UUID or name. NOT_FOUND when absent. */
  resolve(projectName: string, ref: { UUID?: string; name?: string }): Promise<SnapshotRef>;
  /** Snapshots of the volume that are not being deleted: a volume with snapshots is not deleted. */
  countOfVolume(volumeUUID: string): Promise<number>;
}

export interface FeatureFlagReader {
  isEnabled(name: FeatureFlagName): Promise<boolean>;
}

export interface ReplicaLimits {
  /**
   * Largest replica count a new volume can have now (spec 2.7 currentMaxReplicas): the number
   * of servers with an Active node, at most supportedMaxReplicas (at least 1). So 0 means no
   * node is Active.
   */
  currentMaxReplicas(): Promise<number>;
}

export interface CapacityCeiling {
  /**
   * The largest volume with this many replicas the cluster could ever place at its overcommit
   * ratio, whatever is allocated now: the replicaCount-th largest server capacity (its largest
   * node: a pool's measured capacity; until a node's pool reports, its present data devices' raw
   * size, which is never less) times the ratio. A create above it can never be placed and is
   * refused with 400. undefined while a node's devices are not reported yet: nothing is ruled out.
   */
  largestVolumeBytes(replicaCount: number): Promise<bigint | undefined>;
}

/**
 * Lets policies/, projects/ and snapshots/ refuse to delete what volumes still use. A volume
 * that is Deleting uses nothing any more (its name is already free, and its data needs neither
 * its project, its policy nor the snapshot it was cloned from), so it is not counted: clients
 * delete a project's volumes and then the project, without waiting for the data path.
 */
export interface VolumeUsage {
  /** Number of volumes, not Deleting, using the policy. */
  countUsingPolicy(policyUUID: string): Promise<number>;
  /** Number of volumes, not Deleting, in the project. */
  countInProject(projectName: string): Promise<number>;
  /** Number of volumes, not Deleting, cloned from the snapshot. */
  countClonedFrom(snapshotUUID: string): Promise<number>;
}
