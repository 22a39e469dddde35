// Tests only: a cluster record and its volumes' subsystem NQNs, distinct per test file by `tag`
// (two hex digits), so that files running side by side never share names.
import { volumeSubsystemNQN } from '../../../lib/contract/nqn.js';
import type { ClusterRecord } from '../../../lib/records.js';

export function testCluster(tag: string, clusterName = 'test'): ClusterRecord {
  if (!/^[0-9a-f]{2}$/.test(tag)) throw new Error(`testCluster: tag must be two hex digits, got ${tag}`);
  return {
    UUID: `c0ffee00-0000-4000-8000-0000000000${tag}`,
    clusterName,
    subsystemNQN: `nqn.2016-01.io.strata:cluster:c0ffee${tag}`,
    supportedMaxReplicas: 3,
    createdAt: new Date().toISOString(),
    bootstrappedBy: 'test',
  };
}

/** The subsystem NQN of a volume of `cluster`. */
export const volumeNqn = (cluster: ClusterRecord, volumeUUID: string) => volumeSubsystemNQN(cluster.subsystemNQN, volumeUUID);
