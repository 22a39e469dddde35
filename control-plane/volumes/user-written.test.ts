// A replicated volume's bytes written, kept across restarts of its devices' counters: what the
// control plane does with each report (the store applies it), and what the API shows.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import type { UserWrittenCount, VolumeStatusRecord } from '../../lib/records.js';
import { volumeRecord } from '../../test/helpers/records.js';
import { volumeWritten, withWrittenReport, writtenOf, type WrittenReport } from './user-written.js';
import { volumeToWire } from './volume-wire.js';

const A = 'boot-1/253:3/17';
const B = 'boot-1/253:3/21';
const C = 'boot-2/253:0/9';

function apply(reports: readonly (WrittenReport | undefined)[]): UserWrittenCount | undefined {
  return reports.reduce<UserWrittenCount | undefined>((count, r) => withWrittenReport(count, r), undefined);
}

describe('bytes written on one node', () => {
  it('follows one device instance, and keeps what it counted when a new one appears (its counter starts at 0)', () => {
    const count = apply([{ device: A, bytes: '4096' }, { device: A, bytes: '8192' }, { device: B, bytes: '512' }, { device: B, bytes: '1024' }, { device: C, bytes: '0' }]);
    assert.deepEqual(count, { device: C, base: String(8192 + 1024), last: '0', retired: [A, B] });
    assert.equal(writtenOf(count), 9216n);
  });

  it('never goes backwards: a late report of the same device, or of an earlier one, changes nothing', () => {
    let count = apply([{ device: A, bytes: '8192' }, { device: B, bytes: '100' }]);
    assert.equal(writtenOf(count), 8292n);
    count = withWrittenReport(count, { device: B, bytes: '50' });
    assert.equal(writtenOf(count), 8292n, 'an older report of the current device');
    count = withWrittenReport(count, { device: A, bytes: '4096' });
    assert.equal(writtenOf(count), 8292n, 'a late report of the retired device is not a new one');
    assert.equal(count?.device, B);
  });

  it('a report without a count (not the primary now, an agent that does not measure) keeps the stored one', () => {
    const count = apply([{ device: A, bytes: '4096' }]);
    assert.equal(withWrittenReport(count, undefined), count);
    assert.equal(withWrittenReport(count, { device: '', bytes: '0' }), count);
    assert.equal(withWrittenReport(undefined, undefined), undefined);
  });

  it('is monotone under any order of reports from a few devices', () => {
    const devices = [A, B, C];
    for (let run = 0; run < 200; run++) {
      let count: UserWrittenCount | undefined;
      let shown = 0n;
      for (let i = 0; i < 30; i++) {
        count = withWrittenReport(count, { device: devices[Math.floor(Math.random() * 3)]!, bytes: String(Math.floor(Math.random() * 1e6)) });
        const now = writtenOf(count);
        assert.ok(now >= shown, `${now} after ${shown}`);
        shown = now;
      }
    }
  });

  it('keeps a few retired devices, not all of them', () => {
    const count = apply(Array.from({ length: 20 }, (_, i) => ({ device: `boot-${i}/253:0/1`, bytes: '1' })));
    assert.equal(count?.retired.length, 8);
    assert.equal(writtenOf(count), 20n);
  });
});

describe('a volume\'s userWritten', () => {
  const status = (nodeUUID: string, userWritten?: UserWrittenCount): VolumeStatusRecord => ({
    volumeUUID: 'v', nodeUUID, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [], logicalUsedBytes: '0', physicalUsedBytes: '0',
    ...(userWritten ? { userWritten } : {}), reportedAt: new Date().toISOString(),
  });
  const nodes = [randomUUID(), randomUUID(), randomUUID()];
  const statuses = [
    status(nodes[0]!, { device: A, base: '1000', last: '24', retired: [] }),
    status(nodes[1]!, { device: C, base: '0', last: '2048', retired: [] }),
    status(nodes[2]!),
    // A node that was the primary once and holds no copy now: its writes were the volume's too.
    status(randomUUID(), { device: B, base: '0', last: '1', retired: [] }),
  ];
  const wire = (replicaCount: number) =>
    volumeToWire({ key: 'k', record: volumeRecord(nodes.slice(0, replicaCount), { replicaCount }), revision: '7' }, { statuses, presentNodes: new Set(nodes) }, { UUID: '', name: '' }, 'cluster').statistics.userWritten;

  it('is the sum over every node that was its primary', () => {
    assert.equal(volumeWritten(statuses), 3073n);
    assert.equal(wire(3), '3073');
    assert.equal(wire(2), '3073');
  });

  it('is the same sum for a single copy (its device-mapper device counts too), and "0" when no node reported a count', () => {
    assert.equal(wire(1), '3073');
    const none = volumeToWire({ key: 'k', record: volumeRecord(nodes.slice(0, 1), { replicaCount: 1 }), revision: '7' }, { statuses: [status(nodes[0]!)], presentNodes: new Set(nodes) }, { UUID: '', name: '' }, 'cluster');
    assert.equal(none.statistics.userWritten, '0');
  });
});
