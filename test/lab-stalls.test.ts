// The e2e lab's reading of guest kernel logs for stalled I/O (test/e2e/lab/stalls.ts).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseKernelLog, STALL_LINE } from './e2e/lab/stalls.js';

describe('stall lines in a guest kernel log', () => {
  it('parses timestamps and keeps the text', () => {
    const lines = parseKernelLog('[    0.000000] Linux version 6.12\n[  117.250001] nvme nvme0: I/O tag 490 (01ea) opcode 0x2 (Read) QID 1 timeout, aborting req_op:READ(0) size:4096\nno stamp\n');
    assert.deepEqual(lines.map((l) => l.seconds), [0, 117.250001]);
    assert.match(lines[1]!.text, /^nvme nvme0: I\/O tag 490/);
  });

  it('matches what the kernel says when the I/O path stood still, not what it says when it works', () => {
    for (const stalled of [
      'nvme nvme0: I/O tag 490 (01ea) opcode 0x2 (Read) QID 1 timeout, aborting req_op:READ(0) size:4096',
      'nvme nvme0: I/O tag 12 (100c) QID 1 timeout, reset controller',
      'nvmet: ctrl 2 keep-alive timer (5 seconds) expired!',
      'nvme nvme1: Successfully reconnected (attempt 1/600)',
      'nvme nvme1: resetting controller',
      'I/O error, dev nvme1n1, sector 2048 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0',
    ]) assert.match(stalled, STALL_LINE);
    for (const fine of [
      'nvme nvme1: new ctrl: NQN "nqn.2016-01.com.lightbitslabs:uuid:x", addr 10.0.2.2:4420',
      'nvme nvme1: creating 1 I/O queues.',
      'nvme nvme1: mapped 1/0/0 default/read/poll queues.',
      'md/raid1:md127: active with 2 out of 2 mirrors',
      'nvme_fabrics: ctrl_loss_tmo < 0 will reconnect forever',
      'nvme nvme1: Failed reconnect attempt 3/600',
      'nvme nvme1: failed to connect socket: -111',
    ]) assert.doesNotMatch(fine, STALL_LINE);
  });
});
