// What the kernel target must show for an assignment (desired-state.ts): the export derived from
// it, its ACL, and the assignments refused before anything is touched.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { volumeNqnPrefix } from '../../../lib/contract/nqn.js';
import type { VolumeAssignment } from '../../../lib/records.js';
import { testAssignment } from '../../../test/kits/datapath/test-assignment.js';
import { aclOf, assignmentProblem, desiredExportOf } from './desired-state.js';

const CLUSTER_NQN = 'nqn.2024-01.io.strata:cluster-1';
const PREFIX = volumeNqnPrefix(CLUSTER_NQN);
const V1 = '11111111-1111-4111-8111-111111111111';
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000002';

describe('assignments → desired exports', () => {
  const assignment = (overrides: Partial<VolumeAssignment> = {}): VolumeAssignment =>
    testAssignment({ volumeUUID: V1, nodeUUID: 'node-1', subsystemNQN: `${PREFIX}${V1}`, nsid: 5, port: 20005, generation: 3, sizeBytes: '1073741824', acl: [H1], ...overrides });
  const facts = { clusterUUID: 'c', subsystemNQN: CLUSTER_NQN };
  const settings = { listenAddress: '0.0.0.0', portIdMin: 20000, portIdMax: 39999 };

  it('derives serial, model, NGUID and the port from the assignment alone (identical on every node)', () => {
    const d = desiredExportOf(assignment({ compression: true }), { devicePath: '/p/x.zst', bufferedIo: true }, facts, settings);
    assert.equal(d.serial, '11111111111141118111');
    assert.equal(d.serial.length, 20);
    assert.equal(d.model, 'Strata Volume');
    assert.equal(d.namespace.uuid, V1);
    assert.equal(d.namespace.bufferedIo, true);
    assert.deepEqual(d.port, { id: 20005, trtype: 'tcp', adrfam: 'ipv4', traddr: '0.0.0.0', trsvcid: '20005', anaState: 'optimized' });
    assert.equal(desiredExportOf(assignment(), { devicePath: '/p', bufferedIo: false }, facts, { ...settings, listenAddress: '::' }).port.adrfam, 'ipv6');
  });

  it('reads ACLs', () => {
    assert.deepEqual(aclOf(['ALLOW_ANY']), { allowAnyHost: true, hosts: [] });
    assert.deepEqual(aclOf(['ALLOW_NONE']), { allowAnyHost: false, hosts: [] });
    assert.deepEqual(aclOf([]), { allowAnyHost: false, hosts: [] });
    assert.deepEqual(aclOf([H2, H1, H2]), { allowAnyHost: false, hosts: [H1, H2] });
    assert.equal(typeof aclOf(['ALLOW_ANY', H1]), 'string');
    assert.equal(typeof aclOf(['nqn.x/../../../etc']), 'string');
    assert.equal(typeof aclOf(['not-an-nqn']), 'string');
  });

  const bad: [string, Partial<VolumeAssignment>, RegExp][] = [
    ['foreign NQN', { subsystemNQN: `nqn.other:vol:${V1}` }, /subsystem NQN/],
    ['port outside the range', { port: 4420 }, /outside this agent's volume port range/],
    ['cntlid window inverted', { cntlidMin: 1000, cntlidMax: 1000 }, /controller-ID window/],
    ['cntlid above the kernel maximum', { cntlidMax: 0xfff0 }, /controller-ID window/],
    ['nsid 0', { nsid: 0 }, /nsid/],
    ['size not decimal', { sizeBytes: '1e9' }, /size/],
    ['ANA state', { anaState: 'change' as never }, /ANA state/],
    ['ACL path injection', { acl: ['nqn.a/../../x'] }, /host NQN/],
    ['snapshot UUID', { snapshotUUIDs: ['../x'] }, /snapshot UUID/],
  ];
  for (const [name, overrides, pattern] of bad) {
    it(`rejects an assignment: ${name}`, () => {
      assert.match(assignmentProblem(assignment(overrides), facts, settings) ?? '', pattern);
    });
  }
  it('accepts a sound assignment', () => assert.equal(assignmentProblem(assignment(), facts, settings), undefined));
});
