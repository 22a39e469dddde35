// A VolumeAssignment for tests: a primary, optimized, uncompressed 4K-sector volume with one
// controller-ID window and nothing else; each test states only what it cares about.
import type { VolumeAssignment } from '../../../lib/records.js';

export type TestAssignmentInput = Pick<VolumeAssignment, 'volumeUUID' | 'nodeUUID' | 'subsystemNQN' | 'nsid' | 'port'> & Partial<VolumeAssignment>;

export function testAssignment(input: TestAssignmentInput): VolumeAssignment {
  return {
    generation: 1,
    sizeBytes: String(64 * 1024 * 1024),
    compression: false,
    sectorSize: 4096,
    acl: [],
    ipAcl: [],
    role: 'primary',
    anaState: 'optimized',
    cntlidMin: 1,
    cntlidMax: 1000,
    cloneFromSnapshotUUID: '',
    snapshotUUIDs: [],
    rollbackSnapshotUUID: '',
    ...input,
  };
}
