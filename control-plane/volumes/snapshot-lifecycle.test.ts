// The controller's snapshot decisions from agent reports (pure functions, no etcd).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { SnapshotRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import { isSnapshotGone, snapshotFailureReason, snapshotStateFromReports } from './snapshot-lifecycle.js';
import { statusRecord, volumeRecord } from '../../test/kits/snapshot-test-fixtures.js';

const volume: VolumeRecord = volumeRecord({ placement: { nodeList: ['n1', 'n2', 'n3'], primaryNodeUUID: 'n1', nsid: 1, port: 20001 } });
const snapshot: Pick<SnapshotRecord, 'UUID' | 'sourceVolumeUUID' | 'state'> = { UUID: 's1', sourceVolumeUUID: volume.UUID, state: 'Creating' };
const ok = (uuid = 's1') => ({ snapshotUUID: uuid, state: 'Available' as const, error: '' });
const failed = (error: string) => ({ snapshotUUID: 's1', state: 'Failed' as const, error });
const reports = (...perNode: [string, VolumeStatusRecord['snapshots'], Partial<VolumeStatusRecord>?][]) =>
  perNode.map(([node, snapshots, overrides]) => statusRecord(volume.UUID, node, snapshots, overrides));

describe('snapshotStateFromReports', () => {
  test('Available once every node of the nodeList reports it Available', () => {
    assert.equal(snapshotStateFromReports(snapshot, volume, reports(['n1', [ok()]], ['n2', [ok()]], ['n3', [ok(), ok('other')]])), 'Available');
  });

  test('waits while any node of the nodeList has not reported it', () => {
    assert.equal(snapshotStateFromReports(snapshot, volume, []), undefined);
    assert.equal(snapshotStateFromReports(snapshot, volume, reports(['n1', [ok()]], ['n2', [ok()]])), undefined, 'n3 has no status');
    assert.equal(snapshotStateFromReports(snapshot, volume, reports(['n1', [ok()]], ['n2', [ok()]], ['n3', [ok('other')]])), undefined, 'n3 lists others only');
    assert.equal(snapshotStateFromReports(snapshot, volume, reports(['n1', [ok()]], ['n2', [ok()]], ['n4', [ok()]])), undefined, 'n4 is not in the nodeList');
    assert.equal(snapshotStateFromReports(snapshot, volume, reports(['n1', [ok()]], ['n2', [ok()]], ['n3', [ok()], { state: 'Absent' }])), undefined, 'a node with the volume Absent holds nothing');
  });

  test('ignores status records of other volumes', () => {
    const elsewhere = ['n1', 'n2', 'n3'].map((node) => statusRecord('another-volume', node, [ok()]));
    assert.equal(snapshotStateFromReports(snapshot, volume, elsewhere), undefined);
  });

  test('Failed as soon as one node of the nodeList reports it Failed', () => {
    const records = reports(['n1', [ok()]], ['n2', [failed('no space left')]]);
    assert.equal(snapshotStateFromReports(snapshot, volume, records), 'Failed');
    assert.equal(snapshotFailureReason(snapshot, volume, records), 'node n2: no space left');
    assert.equal(snapshotStateFromReports(snapshot, volume, reports(['n4', [failed('x')]])), undefined, 'a node outside the nodeList does not count');
  });

  test('Failed when the source volume is gone or Deleting', () => {
    assert.equal(snapshotStateFromReports(snapshot, null, []), 'Failed');
    assert.match(snapshotFailureReason(snapshot, null, []), /no longer exists/);
    assert.equal(snapshotStateFromReports(snapshot, { ...volume, UUID: 'different' }, []), 'Failed');
    const deleting = { ...volume, state: 'Deleting' as const };
    assert.equal(snapshotStateFromReports(snapshot, deleting, reports(['n1', [ok()]], ['n2', [ok()]], ['n3', [ok()]])), 'Failed');
    assert.match(snapshotFailureReason(snapshot, deleting, []), /being deleted/);
  });

  test('an unplaced volume, or a snapshot not Creating, gives no transition', () => {
    assert.equal(snapshotStateFromReports(snapshot, { ...volume, placement: null }, reports(['n1', [ok()]])), undefined);
    const all = reports(['n1', [ok()]], ['n2', [ok()]], ['n3', [failed('x')]]);
    for (const state of ['Available', 'Deleting', 'Failed'] as const) assert.equal(snapshotStateFromReports({ ...snapshot, state }, volume, all), undefined, state);
  });

  test('tolerates status records written before snapshots were reported', () => {
    const old = statusRecord(volume.UUID, 'n1', []) as Partial<VolumeStatusRecord>;
    delete old.snapshots;
    assert.equal(snapshotStateFromReports(snapshot, volume, [old as VolumeStatusRecord]), undefined);
    assert.equal(isSnapshotGone(snapshot, [old as VolumeStatusRecord]), true);
  });
});

describe('isSnapshotGone', () => {
  test('gone when no status record of its volume lists it', () => {
    assert.equal(isSnapshotGone(snapshot, []), true);
    assert.equal(isSnapshotGone(snapshot, reports(['n1', [ok('other')]], ['n2', []])), true);
    assert.equal(isSnapshotGone(snapshot, [statusRecord('another-volume', 'n1', [ok()])]), true);
  });

  test('not gone while any node lists it, Available or Failed', () => {
    assert.equal(isSnapshotGone(snapshot, reports(['n1', []], ['n2', [ok()]])), false);
    assert.equal(isSnapshotGone(snapshot, reports(['n3', [failed('x')]])), false);
  });

  test('a node that reports the volume Absent no longer holds it', () => {
    assert.equal(isSnapshotGone(snapshot, reports(['n1', [ok()], { state: 'Absent' }])), true);
  });
});
