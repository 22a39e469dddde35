// The progress line `--wait` prints while a volume is not there yet: a rebuild shows its percent.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { progressOf } from './volumes.js';

describe('volumes --wait progress', () => {
  it('shows the state, the protection when it is not unremarkable, and a rebuild\'s progress', () => {
    assert.equal(progressOf({ state: 'Creating', protectionState: 'Unknown', rebuildProgress: '' }), 'Creating');
    assert.equal(progressOf({ state: 'Available', protectionState: 'Degraded', rebuildProgress: '42' }), 'Available, Degraded, rebuild 42%');
    assert.equal(progressOf({ state: 'Available', protectionState: 'NotAvailable', rebuildProgress: '0' }), 'Available, NotAvailable');
    assert.equal(progressOf({ state: 'Updating', protectionState: 'FullyProtected', rebuildProgress: '100' }), 'Updating');
  });
});
