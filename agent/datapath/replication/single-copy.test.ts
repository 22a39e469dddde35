// A single-copy volume's host path: a device-mapper device over a loop device over its file, and
// through the QoS server's device when it has limits. The block stack and the QoS servers are
// fakes that record what is asked of them (the kernel's side is in the QoS e2e suite).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { StrataError } from '../../../lib/errors.js';
import type { BlockStack } from './block-stack.js';
import { SingleCopyPaths, type SingleCopyInput } from './single-copy.js';

const VOLUME = '7d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b';
const NODE = 'node-a';
const FILE = `/var/lib/strata/pool/volumes/${VOLUME}.raw`;
const MiB = 1n << 20n;
const LIMITS = { readIops: 300, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 0 };

function bed(options: { startFails?: Error } = {}) {
  const events: string[] = [];
  const sizes = new Map<string, bigint>([['loop0', 64n * MiB]]);
  const fileBytes = { now: 64n * MiB };
  let table = '';
  let loops: string[] = [];
  const stack = {
    ensureLoop: async (file: string, buffered: boolean) => {
      if (loops.length === 0) {
        events.push(`loop ${file} ${buffered ? 'buffered' : 'direct'}`);
        loops = ['loop0'];
        sizes.set('loop0', fileBytes.now);
      }
      return 'loop0';
    },
    growLoop: async (loop: string) => {
      events.push(`set capacity ${loop}`);
      sizes.set(loop, fileBytes.now);
    },
    blockBytes: async (block: string) => sizes.get(block) ?? 0n,
    blockPath: (block: string) => `/dev/${block}`,
    linearTable: async (bytes: bigint, block: string) => `0 ${bytes / 512n} linear ${block} 0`,
    ensureDm: async (_v: string, t: string, beforeGrowing?: () => void) => {
      if (t === table) return;
      if (table && BigInt(t.split(' ')[1]!) > BigInt(table.split(' ')[1]!)) beforeGrowing?.();
      events.push(`dm ${t.split(' ').slice(1, 4).join(' ')}`);
      table = t;
    },
    dmTable: async () => table,
    removeDm: async () => {
      if (table) events.push('remove dm');
      table = '';
    },
    loopsOfVolume: async () => loops,
    detachLoop: async (loop: string) => {
      events.push(`detach ${loop}`);
      loops = loops.filter((l) => l !== loop);
    },
    hostDevicePath: () => `/dev/mapper/strata-${VOLUME}`,
    writtenBytes: async () => ({ bytes: 8192n, device: 'boot-1/253:4/9' }),
  };
  let served: { limits: typeof LIMITS; bytes: bigint } | undefined;
  const qos = {
    start: async (_volume: string, spec: { backing: string; limits: typeof LIMITS }) => {
      events.push(`qos start ${spec.backing} ${spec.limits.readIops}`);
      if (options.startFails) throw options.startFails;
      served = { limits: spec.limits, bytes: served?.bytes ?? sizes.get('loop0')! };
      sizes.set('ublkb3', served.bytes);
      return { id: 3, device: '/dev/ublkb3' };
    },
    stop: async () => {
      if (served) events.push('qos stop');
      served = undefined;
      sizes.delete('ublkb3');
    },
    state: () => served && { device: { device: '/dev/ublkb3' }, limits: served.limits, running: true },
  };
  const paths = new SingleCopyPaths({ stack: stack as unknown as BlockStack, qos, logger: pino({ level: 'silent' }) });
  const input = (qos: typeof LIMITS | null, sizeBytes = 64n * MiB, extra: Partial<SingleCopyInput> = {}): SingleCopyInput => ({
    volumeUUID: VOLUME,
    nodeUUID: NODE,
    sizeBytes,
    backing: { devicePath: FILE, bufferedIo: false },
    qos,
    ...extra,
  });
  return { paths, events, input, fileBytes };
}

describe('SingleCopyPaths (a single copy served through device-mapper over a loop device)', () => {
  it('serves the file through a loop device and a linear table, found again on the next call; no limits, nothing to report', async () => {
    const { paths, events, input } = bed();
    assert.deepEqual(await paths.serve(input(null)), { hostDevicePath: `/dev/mapper/strata-${VOLUME}` });
    assert.deepEqual(events, [`loop ${FILE} direct`, 'dm 131072 linear loop0']);
    events.length = 0;
    await paths.serve(input(null));
    assert.deepEqual(events, [], 'nothing changes the second time');
    assert.equal(await paths.qosStatus(VOLUME), undefined);
  });

  it('a compressed volume\'s loop device reads through the page cache', async () => {
    const { paths, events, input } = bed();
    await paths.serve(input(null, 64n * MiB, { backing: { devicePath: FILE, bufferedIo: true } }));
    assert.equal(events[0], `loop ${FILE} buffered`);
  });

  it('limits: the server over the loop device first, then the table onto its device; a change goes to the server only; removed: the table back, then the server stops', async () => {
    const { paths, events, input } = bed();
    await paths.serve(input(LIMITS));
    assert.deepEqual(events, [`loop ${FILE} direct`, 'qos start /dev/loop0 300', 'dm 131072 linear ublkb3']);
    assert.deepEqual(await paths.qosStatus(VOLUME), { state: 'Enforced', reason: '', limits: LIMITS });
    events.length = 0;
    await paths.serve(input({ ...LIMITS, readIops: 150 }));
    assert.deepEqual(events, ['qos start /dev/loop0 150'], 'a live change: no table reload');
    assert.equal((await paths.qosStatus(VOLUME))?.limits.readIops, 150);
    events.length = 0;
    await paths.serve(input({ readIops: 0, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 0 }));
    assert.deepEqual(events, ['dm 131072 linear loop0', 'qos stop'], 'all-zero limits are no limits');
    assert.equal(await paths.qosStatus(VOLUME), undefined);
  });

  it('a grown file: the loop device takes its size, the namespace is marked to re-read it before the table grows, and a QoS server of the new size replaces the old one', async () => {
    const { paths, events, input, fileBytes } = bed();
    await paths.serve(input(LIMITS));
    events.length = 0;
    fileBytes.now = 96n * MiB;
    const marks: string[] = [];
    await paths.serve(input(LIMITS, 96n * MiB, { beforeGrowing: () => void marks.push(events.at(-1) ?? '') }));
    assert.deepEqual(events, ['set capacity loop0', 'qos start /dev/loop0 300', 'dm 196608 linear loop0', 'qos stop', 'qos start /dev/loop0 300', 'dm 196608 linear ublkb3']);
    assert.deepEqual(marks, ['qos start /dev/loop0 300'], 'marked once, before the first longer table');
    assert.equal((await paths.qosStatus(VOLUME))?.state, 'Enforced');
  });

  it('a loop device that cannot show the volume\'s size fails the serve (the file did not grow)', async () => {
    const { paths, input } = bed();
    await paths.serve(input(null));
    await assert.rejects(paths.serve(input(null, 96n * MiB)), /shows 67108864 of 100663296 bytes/);
  });

  it('without ublk in the kernel: served straight from the loop device, NotEnforced naming the node and the kernel, and not tried again', async () => {
    const { paths, events, input } = bed({ startFails: new StrataError('KERNEL_CAPABILITY_MISSING', 'ublk is missing') });
    await paths.serve(input(LIMITS));
    assert.deepEqual(events, [`loop ${FILE} direct`, 'qos start /dev/loop0 300', 'dm 131072 linear loop0']);
    const status = await paths.qosStatus(VOLUME);
    assert.equal(status?.state, 'NotEnforced');
    assert.match(status?.reason ?? '', new RegExp(`^node ${NODE}: kernel .* has no ublk`));
    events.length = 0;
    await paths.serve(input({ ...LIMITS, readIops: 100 }));
    assert.deepEqual(events, [], 'no second start on a kernel without ublk');
  });

  it('counts what hosts wrote through the device-mapper device, and nothing for a volume not served here', async () => {
    const { paths, input } = bed();
    assert.equal(await paths.writtenBytes(VOLUME), undefined);
    await paths.serve(input(null));
    assert.deepEqual(await paths.writtenBytes(VOLUME), { bytes: 8192n, device: 'boot-1/253:4/9' });
  });

  it('a namespace that points straight at the file keeps it: nothing is built, nothing counted, and its limits are NotEnforced saying why', async () => {
    const { paths, events, input } = bed();
    await paths.servedFromFile(input(LIMITS));
    assert.deepEqual(events, []);
    assert.equal(await paths.writtenBytes(VOLUME), undefined);
    const status = await paths.qosStatus(VOLUME);
    assert.equal(status?.state, 'NotEnforced');
    assert.match(status?.reason ?? '', /^node node-a: the volume's namespace points straight at its file/);
  });

  it('release: the table goes, then the server, then the loop device; a replaced QoS device before it moves the table onto the new device', async () => {
    const { paths, events, input } = bed();
    await paths.serve(input(LIMITS));
    events.length = 0;
    await paths.qosDeviceReplaced(VOLUME);
    assert.deepEqual(events, [], 'the same device: the table already points at it');
    await paths.release(VOLUME);
    assert.deepEqual(events, ['remove dm', 'qos stop', 'detach loop0']);
    assert.equal(await paths.qosStatus(VOLUME), undefined);
    events.length = 0;
    await paths.qosDeviceReplaced(VOLUME);
    await paths.release(VOLUME);
    assert.deepEqual(events, [], 'nothing left to do');
  });
});
