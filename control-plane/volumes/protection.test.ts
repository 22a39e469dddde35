// The protection rule (pure): what the API, cluster health and the leader's events say about a
// volume's copies, from its replica set, its nodes' reports and their presence.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ReplicaSetRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import { primaryOf, protectionOf, rebuildProgressOf } from './protection.js';

const [A, B, C] = ['aaaaaaaa-0000-4000-8000-000000000001', 'bbbbbbbb-0000-4000-8000-000000000002', 'cccccccc-0000-4000-8000-000000000003'];

function volume(overrides: Partial<VolumeRecord> = {}): VolumeRecord {
  return {
    UUID: 'dddddddd-0000-4000-8000-000000000004', name: 'v', projectName: 'default', sizeBytes: '1073741824', acl: ['ALLOW_ANY'], ipAcl: ['ALLOW_ANY'],
    compression: false, replicaCount: 3, sectorSize: 4096, labels: [], qosPolicyUUID: '', placementRestrictions: [], sourceSnapshotUUID: '',
    sourceSnapshotName: '', encrypted: false, state: 'Available', generation: 1, placement: { nodeList: [A, B, C], primaryNodeUUID: A, nsid: 1, port: 20000 },
    failureReason: '', rollbackSnapshotUUID: '', creationTime: new Date(0).toISOString(), ...overrides,
  };
}
const set = (overrides: Partial<ReplicaSetRecord> = {}): ReplicaSetRecord => ({
  volumeUUID: volume().UUID, epoch: 1, primaryNodeUUID: A, inSync: [A, B, C], reason: '', announced: 'Unknown', updatedAt: '', ...overrides,
});
const served = (...nodes: string[]) =>
  new Map(nodes.map((n): [string, VolumeStatusRecord] => [n, { volumeUUID: volume().UUID, nodeUUID: n, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [], logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: '' }]));

describe('protection state', () => {
  test('a replicated volume follows its replica set: in-sync copies alive and served, primary first', () => {
    const all = new Set([A, B, C]);
    assert.equal(protectionOf({ volume: volume(), replicaSet: set(), statusOf: served(A, B, C), present: all }), 'FullyProtected');
    assert.equal(protectionOf({ volume: volume(), replicaSet: set({ inSync: [A, B] }), statusOf: served(A, B, C), present: all }), 'Degraded', 'a copy out of sync');
    assert.equal(protectionOf({ volume: volume(), replicaSet: set(), statusOf: served(A, B, C), present: new Set([A, B]) }), 'Degraded', 'a copy on an Inactive node');
    assert.equal(protectionOf({ volume: volume(), replicaSet: set(), statusOf: served(A, B), present: all }), 'Degraded', 'a copy not served');
    assert.equal(protectionOf({ volume: volume(), replicaSet: set(), statusOf: served(A, B, C), present: new Set([B, C]) }), 'NotAvailable', 'the primary is gone: failover pending');
    assert.equal(protectionOf({ volume: volume(), replicaSet: set({ inSync: [B] }), statusOf: served(A, B, C), present: all }), 'NotAvailable', 'a primary out of sync never serves');
    assert.equal(protectionOf({ volume: volume({ state: 'Creating' }), replicaSet: set(), statusOf: served(A, B, C), present: all }), 'Unknown');
  });

  test('one copy; and a replicaCount 2-3 volume without a replica set (independent copies) is never FullyProtected', () => {
    const one = volume({ replicaCount: 1, placement: { nodeList: [A], primaryNodeUUID: A, nsid: 1, port: 20000 } });
    assert.equal(protectionOf({ volume: one, replicaSet: undefined, statusOf: served(A), present: new Set([A]) }), 'FullyProtected');
    assert.equal(protectionOf({ volume: one, replicaSet: undefined, statusOf: served(A), present: new Set() }), 'NotAvailable');
    assert.equal(protectionOf({ volume: volume(), replicaSet: undefined, statusOf: served(A, B, C), present: new Set([A, B, C]) }), 'Degraded');
  });

  test('the primary is the replica set\'s once there is one', () => {
    assert.equal(primaryOf(volume(), set({ primaryNodeUUID: C, epoch: 2 })), C);
    assert.equal(primaryOf(volume(), undefined), A);
  });

  test('rebuildProgress: the set decides what is out of sync, the primary\'s report how far its resync got', () => {
    assert.equal(rebuildProgressOf('FullyProtected', volume(), set(), undefined), '100');
    const legs = [
      { nodeUUID: A, state: 'InSync' as const, syncPercent: 100 },
      { nodeUUID: B, state: 'InSync' as const, syncPercent: 100 },
      { nodeUUID: C, state: 'InSync' as const, syncPercent: 100 },
    ];
    assert.equal(rebuildProgressOf('Degraded', volume(), set({ inSync: [A, B] }), legs), '0', 'a report older than the set never shows 100');
    assert.equal(rebuildProgressOf('Degraded', volume(), set({ inSync: [A, B] }), [legs[0]!, legs[1]!, { nodeUUID: C, state: 'Resyncing', syncPercent: 42 }]), '42');
    assert.equal(rebuildProgressOf('Degraded', volume(), set({ inSync: [A] }), [legs[0]!, { nodeUUID: B, state: 'Resyncing', syncPercent: 70 }, { nodeUUID: C, state: 'Unreachable', syncPercent: 0 }]), '0', 'the slowest');
    assert.equal(rebuildProgressOf('FullyProtected', volume({ replicaCount: 1 }), undefined, undefined), '100');
    assert.equal(rebuildProgressOf('NotAvailable', volume({ replicaCount: 1 }), undefined, undefined), '0');
  });
});
