// The replication contract both daemons share (docs/replication.md): how a replica's backing is
// laid out, and the names of the NVMe objects replication uses. One place, because the control
// plane derives them into assignments and the agent checks and serves them.
//
// A replicated volume (replicaCount 2-3) is an md raid1 on its primary: the local leg is a loop
// device over the primary's backing file, each remote leg is a replica's backing file, exported by
// the replica's kernel target on its replication port to the primary's host NQN only. md keeps its
// superblock and write-intent bitmap in front of the data, so every backing is larger than the
// volume by REPLICA_DATA_OFFSET_BYTES, and a device-mapper linear device shows the host exactly
// the volume's size.

import { volumeSubsystemNQN } from './contract/nqn.js';
import type { AssignmentReplication, ReplicaSetRecord, VolumeAssignment } from './records.js';

/** md's data offset on every leg (superblock + internal bitmap live in front of it). */
export const REPLICA_DATA_OFFSET_BYTES = 4n * 1024n * 1024n;

/** The size of a replicated volume's backing file on every node of its nodeList. */
export function replicaBackingBytes(volumeBytes: bigint): bigint {
  return volumeBytes + REPLICA_DATA_OFFSET_BYTES;
}

/** Host NQN a node's NVMe initiator presents when it connects to replicas as a primary. */
export function nodeHostNQN(clusterSubsystemNQN: string, nodeUUID: string): string {
  return `${clusterSubsystemNQN}:node:${nodeUUID}`;
}

/**
 * The subsystem through which a replica node exports its copy of a volume to the primary. It
 * names the replica node: the primary connects to several replicas of one volume, and subsystems
 * sharing an NQN would be merged by the initiator's native multipath into one device.
 */
export function replicationSubsystemNQN(clusterSubsystemNQN: string, volumeUUID: string, replicaNodeUUID: string): string {
  return `${volumeSubsystemNQN(clusterSubsystemNQN, volumeUUID)}:rep:${replicaNodeUUID}`;
}

/** Default TCP port of a node's replication listener (one per node, shared by all volumes). */
export const DEFAULT_REPLICATION_PORT = 4421;

/**
 * The replication part of a node's assignment: the replica set's epoch, primary and in-sync set
 * over the volume's copies (nodeList order, with their replication endpoints).
 */
export function replicationOf(
  set: Pick<ReplicaSetRecord, 'epoch' | 'primaryNodeUUID' | 'inSync' | 'hostSizeBytes'>,
  clusterSubsystemNQN: string,
  copies: readonly { readonly nodeUUID: string; readonly endpoint: string }[],
): AssignmentReplication {
  return {
    epoch: set.epoch,
    primaryNodeUUID: set.primaryNodeUUID,
    primaryHostNQN: nodeHostNQN(clusterSubsystemNQN, set.primaryNodeUUID),
    legs: copies.map(({ nodeUUID, endpoint }) => ({ nodeUUID, endpoint, inSync: set.inSync.includes(nodeUUID) })),
    ...(set.hostSizeBytes === undefined ? {} : { hostSizeBytes: set.hostSizeBytes }),
  };
}

/**
 * The assignment as the leader will write it once it has seen a newer replica set (a promotion):
 * what an agent serves at once on the replica set's change, without waiting for that write.
 */
export function withReplicaSet(a: VolumeAssignment, set: ReplicaSetRecord, clusterSubsystemNQN: string): VolumeAssignment {
  if (!a.replication) return a;
  const primary = set.primaryNodeUUID === a.nodeUUID;
  return {
    ...a,
    role: primary ? 'primary' : 'replica',
    anaState: primary ? 'optimized' : 'inaccessible',
    replication: replicationOf(set, clusterSubsystemNQN, a.replication.legs),
  };
}
