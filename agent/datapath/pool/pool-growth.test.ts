// The growth steps of a node pool and the devices' states, from array states as the 6.1 kernel
// shows them (the sequences were read off a QEMU guest; pool.e2e.ts runs them for real).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseBtrfsUsage } from './btrfs-usage.js';
import type { MdArray, MdMember } from './md-array.js';
import { commandsOf, deviceStatuses, isParitylessRaid4, offlineLevelStep, parityFactor, planGrowth, type DesiredDevice, type GrowthPlan } from './pool-growth.js';

const MiB = 1024n * 1024n;
const member = (serial: string, slot: number | null, flags = ['in_sync']): MdMember => ({
  block: `nvme${serial.slice(1)}n1`,
  serial,
  slot,
  flags,
  sizeBytes: 512n * MiB,
});
const array = (overrides: Partial<MdArray>): MdArray => ({
  block: 'md127',
  device: '/dev/md127',
  level: 'raid0',
  raidDisks: 1,
  syncAction: 'none',
  syncProgress: undefined,
  reshapePending: false,
  degraded: 0,
  arrayBytes: 1020n * MiB,
  members: [member('D0', 0)],
  ...overrides,
});
const blank = (serial: string): DesiredDevice => ({ serial, block: `nvme${serial.slice(1)}n1`, signature: '' });
const listed = (serial: string): DesiredDevice => ({ serial, block: `nvme${serial.slice(1)}n1` });
const fsFits = { deviceSize: 1020n * MiB, deviceSlack: 0n };
const plan = (a: MdArray, desired: DesiredDevice[], ec = false, filesystem = fsFits) => planGrowth({ array: a, ec, desired, filesystem });
const states = (a: MdArray, desired: DesiredDevice[], p: GrowthPlan, adding: string[] = []) =>
  deviceStatuses(a, desired, p, new Set(adding), () => 512n * MiB).map((d) => `${d.serial}:${d.role}:${d.state}`);

describe('pool growth', () => {
  it('a one-device raid1 becomes raid0, then grows by the new devices into a parity-less raid4', () => {
    const raid1 = array({ level: 'raid1', syncAction: 'idle', members: [member('D0', 0)] });
    const first = plan(raid1, [listed('D0'), blank('D1')]);
    assert.deepEqual(first.step, { kind: 'to-raid0' });
    assert.deepEqual(commandsOf(first.step, '/dev/md127', '/pool'), [['mdadm', ['--grow', '/dev/md127', '--level=0']]]);
    assert.deepEqual(states(raid1, [listed('D0'), blank('D1')], first), ['D0:data:Healthy', 'D1:data:Adding']);

    const raid0 = array({ level: 'raid0', members: [member('D0', 0)] });
    const second = plan(raid0, [listed('D0'), blank('D1'), blank('D2')]);
    assert.deepEqual(second.step, { kind: 'grow-raid0', add: ['/dev/nvme1n1', '/dev/nvme2n1'], serials: ['D1', 'D2'], raidDevices: 3 });
    assert.deepEqual(commandsOf(second.step, '/dev/md127', '/pool'), [
      // raid4 as the end level: mdadm would otherwise turn it into raid0 online (unsafe).
      ['mdadm', ['--grow', '/dev/md127', '--level=4', '--raid-devices=4', '--force', '--add', '/dev/nvme1n1', '/dev/nvme2n1']],
    ]);
  });

  it('waits while md reshapes, leaves the parity-less raid4 as it is while online, grows the filesystem and the raid4 again', () => {
    const desired = [listed('D0'), listed('D1')];
    const reshaping = array({
      level: 'raid4',
      raidDisks: 3,
      syncAction: 'reshape',
      syncProgress: 0.4,
      reshapePending: true,
      degraded: 1,
      members: [member('D0', 0), member('D1', 1)],
    });
    const waiting = plan(reshaping, desired);
    assert.equal(waiting.step.kind, 'wait');
    assert.deepEqual(states(reshaping, desired, waiting, ['D1']), ['D0:data:Healthy', 'D1:data:Adding']);

    // The reshape is done: the array stays raid4 with its parity slot empty. Online, the agent
    // never turns it into raid0 (reads in flight across that level change came back wrong on
    // 6.12); only right after assembly, before mounting.
    const raid4 = array({ level: 'raid4', raidDisks: 3, syncAction: 'idle', degraded: 1, members: [member('D0', 0), member('D1', 1)] });
    assert.ok(isParitylessRaid4(raid4));
    assert.deepEqual(plan(raid4, desired).step, { kind: 'done' });
    assert.deepEqual(states(raid4, desired, plan(raid4, desired)), ['D0:data:Healthy', 'D1:data:Healthy']);
    assert.deepEqual(offlineLevelStep(raid4, false), { kind: 'to-raid0' });
    assert.deepEqual(commandsOf({ kind: 'to-raid0' }, '/dev/md127', '/pool'), [['mdadm', ['--grow', '/dev/md127', '--level=0']]]);
    assert.equal(offlineLevelStep(reshaping, false), undefined, 'not while md reshapes');
    assert.equal(offlineLevelStep(raid4, true), undefined, 'not on an ec node');
    assert.equal(offlineLevelStep(array({ level: 'raid0', raidDisks: 2, members: [member('D0', 0), member('D1', 1)] }), false), undefined);
    const withParity = array({ level: 'raid4', raidDisks: 3, syncAction: 'idle', members: [member('D0', 0), member('D1', 1), member('D2', 2)] });
    assert.ok(!isParitylessRaid4(withParity));
    assert.equal(offlineLevelStep(withParity, false), undefined);

    // A parity-less raid4 grows again the same way.
    const again = plan(raid4, [...desired, blank('D2')]);
    assert.deepEqual(again.step, { kind: 'grow-raid0', add: ['/dev/nvme2n1'], serials: ['D2'], raidDevices: 3 });
    assert.deepEqual(commandsOf(again.step, '/dev/md127', '/pool'), [['mdadm', ['--grow', '/dev/md127', '--level=4', '--raid-devices=4', '--force', '--add', '/dev/nvme2n1']]]);

    const grown = array({ level: 'raid4', raidDisks: 3, syncAction: 'idle', degraded: 1, members: [member('D0', 0), member('D1', 1)] });
    const resize = plan(grown, desired, false, { deviceSize: 510n * MiB, deviceSlack: 510n * MiB });
    assert.deepEqual(resize.step, { kind: 'resize-filesystem' });
    assert.deepEqual(commandsOf(resize.step, '/dev/md127', '/pool/n'), [['btrfs', ['filesystem', 'resize', 'max', '/pool/n']]]);
    assert.deepEqual(states(grown, desired, resize, ['D1']), ['D0:data:Healthy', 'D1:data:Adding'], 'Adding until the filesystem has grown');

    const done = plan(grown, desired);
    assert.deepEqual(done.step, { kind: 'done' });
    assert.deepEqual(states(grown, desired, done, ['D1']), ['D0:data:Healthy', 'D1:data:Healthy']);
    // btrfs refuses to resize to less than 256 MiB: such an array is left as it is.
    assert.deepEqual(plan(array({ arrayBytes: 200n * MiB }), [listed('D0')], false, { deviceSize: 100n * MiB, deviceSlack: 100n * MiB }).step, { kind: 'done' });
  });

  it('raid5/6: adds the new devices as spares, then grows the device count', () => {
    const raid5 = array({ level: 'raid5', raidDisks: 3, syncAction: 'idle', members: [member('D0', 0), member('D1', 1), member('D2', 2)] });
    const desired = [listed('D0'), listed('D1'), listed('D2'), blank('D3')];
    const add = plan(raid5, desired, true);
    assert.deepEqual(add.step, { kind: 'add-spares', add: ['/dev/nvme3n1'], serials: ['D3'] });
    assert.deepEqual(commandsOf(add.step, '/dev/md127', '/p'), [['mdadm', ['--add', '/dev/md127', '/dev/nvme3n1']]]);
    const withSpare = array({ ...raid5, members: [...raid5.members, member('D3', null, ['spare'])] });
    const grow = plan(withSpare, desired, true);
    assert.deepEqual(grow.step, { kind: 'grow-raid-devices', raidDevices: 4 });
    assert.deepEqual(commandsOf(grow.step, '/dev/md127', '/p'), [['mdadm', ['--grow', '/dev/md127', '--raid-devices=4']]]);
    assert.deepEqual(states(withSpare, desired, grow, ['D3']), ['D0:data:Healthy', 'D1:data:Healthy', 'D2:data:Healthy', 'D3:data:Adding']);
  });

  it('refuses what md cannot do and devices it must not touch, and says why', () => {
    const journaled = array({
      level: 'raid5',
      raidDisks: 3,
      syncAction: 'idle',
      members: [member('D0', 0), member('D1', 1), member('D2', 2), { ...member('J9', null, ['journal']) }],
    });
    const p = plan(journaled, [listed('D0'), listed('D1'), listed('D2'), blank('D3')], true);
    assert.deepEqual(p.step, { kind: 'done' });
    assert.match(p.refused.get('D3') ?? '', /write journal.*cannot reshape/);
    assert.deepEqual(states(journaled, [listed('D0'), listed('D1'), listed('D2'), blank('D3')], p), [
      'D0:data:Healthy',
      'D1:data:Healthy',
      'D2:data:Healthy',
      'D3:data:Failed',
      'J9:journal:Healthy',
    ]);

    const raid0 = array({});
    const odd = plan(raid0, [listed('D0'), { serial: 'GONE' }, { ...blank('D5'), signature: 'ext4' }, { ...blank('D6'), signature: 'ours' }]);
    assert.deepEqual(odd.step, { kind: 'done' });
    assert.match(odd.refused.get('GONE') ?? '', /not present/);
    assert.match(odd.refused.get('D5') ?? '', /holds data \(ext4\)/);
    assert.match(odd.refused.get('D6') ?? '', /not in the running array/);
    assert.match(plan(array({ level: 'raid1', raidDisks: 2, syncAction: 'idle', members: [member('D0', 0), member('D1', 1)] }), [blank('D2')]).refused.get('D2') ?? '', /raid1/);
  });

  it('member states: faulty, recovering, an md member the node record does not list', () => {
    const degraded = array({
      level: 'raid5',
      raidDisks: 3,
      syncAction: 'recover',
      syncProgress: 0.5,
      degraded: 1,
      members: [member('D0', 0), member('D1', 1, ['faulty']), member('D2', 2, []), member('X9', null, ['spare'])],
    });
    const desired = [listed('D0'), listed('D1'), listed('D2')];
    assert.deepEqual(states(degraded, desired, plan(degraded, desired, true)), ['D0:data:Healthy', 'D1:data:Failed', 'D2:data:Rebuilding', 'X9:data:Rebuilding']);
  });

  it('parity factor of the md levels', () => {
    assert.deepEqual(parityFactor('raid0', 3), { num: 1n, den: 1n });
    assert.deepEqual(parityFactor('raid1', 1), { num: 1n, den: 1n });
    assert.deepEqual(parityFactor('raid1', 2), { num: 2n, den: 1n });
    assert.deepEqual(parityFactor('raid5', 4), { num: 4n, den: 3n });
    assert.deepEqual(parityFactor('raid6', 6), { num: 6n, den: 4n });
  });

  it('parses btrfs filesystem usage -b (6.2)', () => {
    const out = [
      'Overall:',
      '    Device size:\t\t         399507456',
      '    Device allocated:\t\t         113246208',
      '    Device unallocated:\t\t         286261248',
      '    Device missing:\t\t                 0',
      '    Device slack:\t\t           1048576',
      '    Used:\t\t\t          21331968',
      '    Free (estimated):\t\t         294649856\t(min: 151519232)',
      '    Free (statfs, df):\t\t         293601280',
      '    Data ratio:\t\t\t              1.00',
      '    Metadata ratio:\t\t              2.00',
      '    Global reserve:\t\t           5767168\t(used: 0)',
      '    Multiple profiles:\t\t                no',
      '',
      'Data,single: Size:37748736, Used:20971520 (55.56%)',
      '   /dev/md127\t  37748736',
      '',
      'Metadata,DUP: Size:33554432, Used:163840 (0.49%)',
      '   /dev/md127\t  67108864',
      '',
      'System,DUP: Size:8388608, Used:16384 (0.20%)',
    ].join('\n');
    assert.deepEqual(parseBtrfsUsage(out), {
      deviceSize: 399507456n,
      deviceSlack: 1048576n,
      dataUsed: 20971520n,
      metadataUsed: 163840n,
      freeEstimated: 294649856n,
    });
    assert.throws(() => parseBtrfsUsage('nothing'), /Device size/);
  });
});
