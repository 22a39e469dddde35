// Controller-ID windows across copies moved to other nodes (placementWithNodes): a node that takes
// a position gets a window no node of the volume had, the others keep theirs, and the windows stay
// within nvmet's controller IDs.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { VolumePlacement } from '../../lib/records.js';
import { cntlidWindowsOf, placementWithNodes } from './assignments.js';

const placed: VolumePlacement = { nodeList: ['a', 'b', 'c'], primaryNodeUUID: 'a', nsid: 1, port: 20001 };

it('a placement without windows uses the positions', () => {
  assert.deepEqual(cntlidWindowsOf(placed), [0, 1, 2]);
});

it('a new node takes a window none of the volume had; unchanged positions keep theirs', () => {
  const once = placementWithNodes(placed, ['a', 'd', 'c']);
  assert.deepEqual([once.nodeList, once.cntlidWindows], [['a', 'd', 'c'], [0, 3, 2]]);
  const twice = placementWithNodes(once, ['e', 'd', 'f']);
  assert.deepEqual(twice.cntlidWindows, [4, 3, 5]);
  // A copy going back to the node it left (a failed replace reverted) is a new node there too.
  assert.deepEqual(placementWithNodes(twice, ['e', 'b', 'f']).cntlidWindows, [4, 6, 5]);
  assert.deepEqual(placementWithNodes(twice, twice.nodeList).cntlidWindows, [4, 3, 5], 'nothing moved: nothing changes');
});

it('after the last window (controller IDs end at 0xFFEF) the lowest free one is taken, never one a current or replaced position holds', () => {
  const late: VolumePlacement = { ...placed, nodeList: ['a', 'b'], cntlidWindows: [0, 64] };
  const moved = placementWithNodes(late, ['a', 'x']);
  assert.deepEqual(moved.cntlidWindows, [0, 1]);
  assert.ok(moved.cntlidWindows!.every((w) => (w + 1) * 1000 <= 0xffef));
});
