// enforcementOf: one volume's QoS enforcement from its primary's report (docs/policies.md "Enforcement").
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { UNLIMITED } from '../../lib/contract/qos.js';
import { enforcementOf } from './volume-qos.js';

const limits = (readIops: number) => ({ ...UNLIMITED, readIops });

describe('enforcementOf', () => {
  test('limits: Enforced only once the primary reports exactly them', () => {
    assert.equal(enforcementOf(limits(100), 'n1', undefined).state, 'Pending');
    assert.equal(enforcementOf(limits(100), 'n1', {}).state, 'Pending');
    assert.equal(enforcementOf(limits(100), 'n1', { qos: { state: 'Enforced', reason: '', limits: limits(50) } }).state, 'Pending');
    assert.deepEqual(enforcementOf(limits(100), 'n1', { qos: { state: 'Enforced', reason: '', limits: limits(100) } }), { state: 'Enforced', reason: '' });
    assert.deepEqual(enforcementOf(limits(100), 'n1', { qos: { state: 'NotEnforced', reason: 'no ublk', limits: limits(100) } }), { state: 'NotEnforced', reason: 'no ublk' });
    assert.equal(enforcementOf(limits(100), '', undefined).state, 'Pending');
  });

  // A policy whose limits are all 0 asks for no stage: the agent serves from the array and
  // reports no QoS (found by bench/qos.ts: such a policy stayed Updating for ever).
  test('all limits 0: Enforced when the primary reports no QoS, Pending while it still reports earlier limits', () => {
    assert.deepEqual(enforcementOf(UNLIMITED, 'n1', {}), { state: 'Enforced', reason: '' });
    assert.deepEqual(enforcementOf(UNLIMITED, 'n1', undefined), { state: 'Enforced', reason: '' });
    const behind = enforcementOf(UNLIMITED, 'n1', { qos: { state: 'Enforced', reason: '', limits: limits(100) } });
    assert.equal(behind.state, 'Pending');
    assert.match(behind.reason, /node n1 \(primary\) still enforces earlier limits/);
    // Earlier limits it could not enforce throttle nothing: nothing is left to remove.
    assert.equal(enforcementOf(UNLIMITED, 'n1', { qos: { state: 'NotEnforced', reason: 'no ublk', limits: limits(100) } }).state, 'Enforced');
    assert.equal(enforcementOf(UNLIMITED, '', undefined).state, 'Pending', 'not placed yet');
  });
});
