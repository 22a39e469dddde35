// The pool's data-integrity counts from a fake sysfs laid out as the 6.1 and 6.12 kernels do:
// md's per-member corrected read errors and btrfs' devinfo error_stats.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createFakeSysfs, type FakeSysfs } from '../../../test/helpers/sysfs-fixture.js';
import { integrityErrorsOf, parseBtrfsErrorStats, readBtrfsErrorStats } from './integrity-errors.js';
import { pcieNamespaces, readMdArray } from './md-array.js';
import { toPoolReportMessage, type NodePoolStatus } from './pool-report.js';

const FSID = '5c7e7f1a-2b3c-4d5e-8f90-123456789abc';
const stats = (read: number, corruption: number, generation: number, write = 0, flush = 0) =>
  `write_errs ${write}\nread_errs ${read}\nflush_errs ${flush}\ncorruption_errs ${corruption}\ngeneration_errs ${generation}\n`;

describe('data-integrity counters', () => {
  let sysfs: FakeSysfs;

  before(() => {
    sysfs = createFakeSysfs();
    for (const [i, serial] of ['S0', 'S1', 'S2'].entries()) {
      sysfs.addController({ name: `nvme${i}`, serial, pciAddress: `0000:0${i}:00.0`, namespaces: [{ name: `nvme${i}n1`, sectors: 2097152 }] });
    }
    const md = (path: string, value: string) => sysfs.write(`block/md127/md/${path}`, `${value}\n`);
    md('level', 'raid5');
    md('raid_disks', '3');
    for (const [i, errors] of [0, 24, 8].entries()) {
      md(`dev-nvme${i}n1/slot`, String(i));
      md(`dev-nvme${i}n1/state`, 'in_sync');
      md(`dev-nvme${i}n1/errors`, String(errors));
    }
    // Another btrfs (the OS) and ours, found by the md device among its devices.
    sysfs.write('fs/btrfs/11111111-2222-4333-8444-555555555555/devices/vda2', '');
    sysfs.write('fs/btrfs/11111111-2222-4333-8444-555555555555/devinfo/1/error_stats', stats(100, 100, 100));
    sysfs.write(`fs/btrfs/${FSID}/devices/md127`, '');
    sysfs.write(`fs/btrfs/${FSID}/devinfo/1/error_stats`, stats(1, 3, 2, 7, 5));
    sysfs.write('fs/btrfs/features/extended_iref', '0\n');
  });
  after(() => sysfs.cleanup());

  it('parses error_stats, and refuses "invalid" (stats not loaded) and partial files', () => {
    assert.deepEqual(parseBtrfsErrorStats(stats(1, 3, 2, 7, 5)), { writeErrs: 7n, readErrs: 1n, flushErrs: 5n, corruptionErrs: 3n, generationErrs: 2n });
    assert.equal(parseBtrfsErrorStats('invalid\n'), undefined);
    assert.equal(parseBtrfsErrorStats('write_errs 0\nread_errs 0\n'), undefined);
  });

  it('reads the btrfs of the md array, not another one', async () => {
    assert.deepEqual(await readBtrfsErrorStats(sysfs.root, 'md127'), { writeErrs: 7n, readErrs: 1n, flushErrs: 5n, corruptionErrs: 3n, generationErrs: 2n });
    assert.equal(await readBtrfsErrorStats(sysfs.root, 'md5'), undefined, 'no btrfs on it: not measured');
  });

  it('maps md\'s corrected errors to the members\' serials (recoverable) and btrfs\' read, corruption and generation errors to the node (unrecoverable)', async () => {
    const array = await readMdArray(sysfs.root, 'md127', await pcieNamespaces(sysfs.root));
    assert.deepEqual(array.members.map((m) => [m.serial, m.errors]), [['S0', 0n], ['S1', 24n], ['S2', 8n]]);
    const counts = integrityErrorsOf(array, await readBtrfsErrorStats(sysfs.root, 'md127'));
    assert.equal(counts.recoverable, 32n);
    assert.equal(counts.unrecoverable, 6n, 'write and flush errors are not integrity errors of stored data');
    assert.deepEqual([...counts.recoverableBySerial], [['S0', 0n], ['S1', 24n], ['S2', 8n]]);
  });

  it('leaves unmeasured what sysfs does not show', async () => {
    const array = await readMdArray(sysfs.root, 'md127', await pcieNamespaces(sysfs.root));
    const unread = { ...array, members: array.members.map(({ errors: _errors, ...m }) => m) };
    const counts = integrityErrorsOf(unread, undefined);
    assert.deepEqual([counts.recoverable, counts.unrecoverable, counts.recoverableBySerial.size], [undefined, undefined, 0]);
  });

  it('sends measured counts in the pool report, and none for what was not measured', () => {
    const pool: NodePoolStatus = {
      nodeUUID: 'n', state: 'Ready', error: '', level: 'raid5', journal: false, rawBytes: 0n, arrayBytes: 0n, capacityBytes: 0n, freeBytes: 0n,
      provisionedBytes: 0n, logicalUsedBytes: 0n, physicalUsedBytes: 0n, physicalUsedIncludingParityBytes: 0n, rebuildProgressPercent: 0, measuredAt: '',
      devices: [
        { serial: 'S1', role: 'data', state: 'Healthy', sizeBytes: 1n, error: '', recoverableIntegrityErrors: 24n },
        { serial: 'S9', role: 'data', state: 'Adding', sizeBytes: 1n, error: '' },
      ],
      recoverableIntegrityErrors: 32n,
      unrecoverableIntegrityErrors: 6n,
    };
    const [measured] = toPoolReportMessage({ sequence: 1, pools: [pool] }).pools!;
    assert.deepEqual([measured?.recoverable_integrity_errors, measured?.unrecoverable_integrity_errors], [{ count: '32' }, { count: '6' }]);
    assert.deepEqual(measured?.devices?.map((d) => d.recoverable_integrity_errors), [{ count: '24' }, null]);
    const { recoverableIntegrityErrors: _r, unrecoverableIntegrityErrors: _u, ...unmeasured } = pool;
    const [none] = toPoolReportMessage({ sequence: 2, pools: [unmeasured] }).pools!;
    assert.deepEqual([none?.recoverable_integrity_errors, none?.unrecoverable_integrity_errors], [null, null]);
  });
});
