// A promotion with a third copy whose node has not relinked its export yet: the new primary tries
// that copy again for a moment instead of recording it out of sync (the 3-copy promotion race);
// and one whose connection hangs: the promotion does not wait for the kernel's minute.
// A primary whose assignment no longer lists a copy it is still connected to (a node replace)
// drops that leg before it adds the copy that replaces it.
// The block stack is a fake that records what the manager asks of it.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import type { ReplicaSetWriter } from '../../../lib/etcd/replica-set-store.js';
import { notConnected, type ArrayState, type BlockStack, type LegDevice, type LegTarget } from './block-stack.js';
import { replicationSubsystemNQN } from '../../../lib/replication.js';
import { waitUntil } from '../../../test/helpers/wait.js';
import { ReplicaManager, type QosServers, type ServeInput } from './replica-manager.js';
import { StrataError } from '../../../lib/errors.js';

const CLUSTER = 'nqn.2016-01.com.lightbitslabs:uuid:0b5c3f52-8e0a-4d5e-9a55-3f1b2c4d5e6f';
const VOLUME = '7d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b';
const [B, C, A] = ['node-b', 'node-c', 'node-a'];

/**
 * Copy C refuses its first `refusals` connections (its export still admits the old primary);
 * with `hangs`, its connections never finish (a node that answers TCP but not NVMe).
 */
function fakeStack(refusals: number, hangs = false) {
  const connected = new Map<string, LegDevice>();
  const calls = { connect: 0, assembledWith: [] as string[] };
  const leg = (t: LegTarget): LegDevice => connected.get(t.nodeUUID) ?? notConnected(t.nodeUUID);
  const array = (): ArrayState => ({
    block: 'md127',
    members: [{ block: 'loop0', flags: ['in_sync'], slot: 0 }, ...calls.assembledWith.map((block, i) => ({ block, flags: ['in_sync', 'write_mostly'], slot: i + 1 }))],
    syncAction: 'idle',
    syncProgress: undefined,
    degraded: 0,
  });
  const stack = {
    ensureLoop: async () => 'loop0',
    blockBytes: async () => 1n << 40n,
    fenceTable: async () => '0 8 flakey 7:1 0 0 1',
    arrayOf: async () => undefined,
    connectLeg: async (t: LegTarget) => {
      calls.connect += 1;
      if (t.nodeUUID === C && hangs) return new Promise<LegDevice>(() => undefined);
      if (t.nodeUUID === C && calls.connect <= refusals) throw new Error('Failed to write to /dev/nvme-fabrics: Input/output error');
      const device: LegDevice = { nodeUUID: t.nodeUUID, controller: 'nvme1', controllerState: 'live', block: 'nvme1n1' };
      connected.set(t.nodeUUID, device);
      return device;
    },
    hasSuperblock: async () => true,
    assembleArray: async (_v: string, _loop: string, legs: string[]) => {
      calls.assembledWith = legs;
      return { block: 'md127' };
    },
    readArray: async () => array(),
    leg: async (t: LegTarget) => leg(t),
    loopOf: async () => 'loop0',
    disconnectLeg: async (t: LegTarget) => void connected.delete(t.nodeUUID),
    removeGoneLegs: async () => undefined,
    linearTable: async () => '0 8 linear 9:127 0',
    ensureDm: async () => undefined,
    hostDevicePath: () => `/dev/mapper/strata-${VOLUME}`,
  };
  return { stack: stack as unknown as BlockStack, calls };
}

function recordingWriter() {
  const outOfSync: string[][] = [];
  const hostSizes: bigint[] = [];
  const writer: ReplicaSetWriter = {
    markOutOfSync: async (_v, _e, _p, nodes) => {
      outOfSync.push([...nodes]);
      return { outcome: 'changed' } as unknown as Awaited<ReturnType<ReplicaSetWriter['markOutOfSync']>>;
    },
    markInSync: async () => ({ outcome: 'changed' }) as unknown as Awaited<ReturnType<ReplicaSetWriter['markInSync']>>,
    handOver: async () => ({ outcome: 'none' }),
    recordHostSize: async (_v, _e, _p, bytes) => {
      hostSizes.push(bytes);
      return 'done';
    },
  };
  return { writer, outOfSync, hostSizes };
}

/** Node B promoted at epoch 3: A (the lost primary) out of the in-sync set, C in it. */
function promotion(epoch = 3): ServeInput {
  return {
    volumeUUID: VOLUME,
    nodeUUID: B,
    sizeBytes: 1n << 30n,
    backing: { devicePath: `/pool/${VOLUME}.img`, bufferedIo: false },
    replication: {
      epoch,
      primaryNodeUUID: B,
      primaryHostNQN: `${CLUSTER}:node:${B}`,
      legs: [
        { nodeUUID: A, endpoint: '10.0.0.1:4421', inSync: false },
        { nodeUUID: B, endpoint: '10.0.0.2:4421', inSync: true },
        { nodeUUID: C, endpoint: '10.0.0.3:4421', inSync: true },
      ],
    },
  };
}

function manager(
  stack: BlockStack,
  writer: ReplicaSetWriter,
  { promotionLegWaitMs, promotionConnectTimeoutMs, monitorIntervalMs = 60_000, qos }: { promotionLegWaitMs?: number; promotionConnectTimeoutMs?: number; monitorIntervalMs?: number; qos?: QosServers | undefined } = {},
) {
  return new ReplicaManager({
    stack,
    writer,
    clusterSubsystemNQN: () => CLUSTER,
    logger: pino({ level: 'silent' }),
    monitorIntervalMs,
    legLossGraceMs: 2000,
    rejoinIntervalMs: 5000,
    ...(promotionLegWaitMs === undefined ? {} : { promotionLegWaitMs }),
    ...(promotionConnectTimeoutMs === undefined ? {} : { promotionConnectTimeoutMs }),
    ...(qos ? { qos } : {}),
  });
}

describe('ReplicaManager promotion', () => {
  it('tries an in-sync copy that refuses the new primary again, and assembles with it: nothing recorded out of sync', async () => {
    const { stack, calls } = fakeStack(3);
    const { writer, outOfSync } = recordingWriter();
    const served = await manager(stack, writer).serve(promotion());
    assert.equal(served.hostDevicePath, `/dev/mapper/strata-${VOLUME}`);
    assert.equal(calls.connect, 4, 'three refusals, then the copy answers');
    assert.deepEqual(calls.assembledWith, ['nvme1n1']);
    assert.deepEqual(outOfSync, []);
  });

  it('records the copy out of sync once the wait runs out, and serves from the copies it has', async () => {
    const { stack, calls } = fakeStack(Number.POSITIVE_INFINITY);
    const { writer, outOfSync } = recordingWriter();
    const started = Date.now();
    await manager(stack, writer, { promotionLegWaitMs: 300 }).serve(promotion());
    assert.ok(Date.now() - started < 2000, 'the wait is bounded');
    assert.ok(calls.connect >= 2 && calls.connect <= 4, `tried again within 300 ms (${calls.connect} attempts)`);
    assert.deepEqual(calls.assembledWith, []);
    assert.deepEqual(outOfSync, [[C]]);
  });

  it('gives up on a copy whose connection hangs after the connect timeout, records it out of sync first, and serves', async () => {
    const { stack, calls } = fakeStack(0, true);
    const { writer, outOfSync } = recordingWriter();
    // The hung connection holds nothing open, and the deadline's timer does not keep a process alive.
    const keepAlive = setInterval(() => undefined, 1000);
    const started = Date.now();
    const served = await manager(stack, writer, { promotionLegWaitMs: 3000, promotionConnectTimeoutMs: 400 }).serve(promotion()).finally(() => clearInterval(keepAlive));
    const took = Date.now() - started;
    assert.equal(served.hostDevicePath, `/dev/mapper/strata-${VOLUME}`);
    assert.ok(took >= 400 && took < 2500, `bounded by the connect timeout, not the 3 s refusal wait (${took} ms)`);
    assert.equal(calls.connect, 1, 'a copy that did not answer in time is not dialled again');
    assert.deepEqual(calls.assembledWith, []);
    assert.deepEqual(outOfSync, [[C]]);
  });

  it('dials the copies while the loop device is made (both on the critical path), and assembles once both are there', async () => {
    const { stack, calls } = fakeStack(0);
    let loopMade: () => void = () => undefined;
    let dialledBeforeLoop = false;
    (stack as unknown as { ensureLoop: () => Promise<string> }).ensureLoop = () =>
      new Promise<string>((resolve) => {
        loopMade = () => resolve('loop0');
      });
    const serving = manager(stack, recordingWriter().writer).serve(promotion());
    for (let i = 0; i < 20 && calls.connect === 0; i++) await new Promise((r) => setTimeout(r, 5));
    dialledBeforeLoop = calls.connect > 0;
    loopMade();
    await serving;
    assert.ok(dialledBeforeLoop, 'the copy was dialled before the loop device existed');
    assert.deepEqual(calls.assembledWith, ['nvme1n1']);
  });

  it('a copy not in sync here refuses to serve and dials nothing', async () => {
    const { stack, calls } = fakeStack(0);
    const p = promotion();
    const input = { ...p, replication: { ...p.replication, legs: p.replication.legs.map((l) => (l.nodeUUID === B ? { ...l, inSync: false } : l)) } };
    (stack as unknown as { stopServing: () => Promise<undefined> }).stopServing = async () => undefined;
    await assert.rejects(manager(stack, recordingWriter().writer).serve(input), /not in sync/);
    assert.equal(calls.connect, 0);
  });

  it('does not wait at the first epoch (a new volume waits for every copy through NotReadyYet instead)', async () => {
    const { stack, calls } = fakeStack(1);
    const { writer } = recordingWriter();
    await manager(stack, writer).serve(promotion(1)).catch(() => undefined);
    assert.equal(calls.connect, 1);
  });
});

describe('ReplicaManager: a replica\'s loop device, made ahead of a promotion', () => {
  const BACKING = `/pool/${VOLUME}.img`;
  /** Loop devices by backing file, arrays by loop device; every call that changes them, in order. */
  function loopBed({ attachFails = false } = {}) {
    const events: string[] = [];
    const loops = new Map<string, string>();
    const arrays = new Map<string, string>();
    let next = 0;
    let scans = 0;
    const stack = {
      ensureLoop: async (file: string) => {
        const found = loops.get(file);
        if (found) return found;
        if (attachFails) throw new Error('losetup: failed to set up loop device');
        const loop = `loop${next++}`;
        loops.set(file, loop);
        events.push(`attach ${loop}`);
        return loop;
      },
      loopOf: async (file: string) => loops.get(file),
      loopsOfVolume: async () => {
        scans += 1;
        return [...loops.values()];
      },
      detachLoop: async (loop: string) => {
        for (const [file, l] of loops) if (l === loop) loops.delete(file);
        events.push(`detach ${loop}`);
      },
      arrayOf: async (loop: string) => arrays.get(loop),
      stopArray: async (array: string) => {
        for (const [loop, a] of arrays) if (a === array) arrays.delete(loop);
        events.push(`stop ${array}`);
      },
      disconnectAll: async () => undefined,
      fenceTable: async () => '0 8 flakey 7:1 0 0 1',
      ensureDm: async () => undefined,
      removeDm: async () => undefined,
      hostDevicePath: () => `/dev/mapper/strata-${VOLUME}`,
    };
    const m = manager(stack as unknown as BlockStack, recordingWriter().writer);
    const replica = (devicePath = BACKING): ServeInput => ({ ...promotion(), nodeUUID: C, backing: { devicePath, bufferedIo: false } });
    return { m, events, loops, arrays, replica, scans: () => scans };
  }

  it('a replica makes one loop device over its backing and keeps it; later passes look for no mirror parts again', async () => {
    const { m, events, loops, replica, scans } = loopBed();
    const served = await m.serve(replica());
    assert.ok(served.replicationExport, 'the export serves the file itself');
    await m.serve(replica());
    await m.serve(replica());
    assert.deepEqual(events, ['attach loop0']);
    assert.equal(loops.get(BACKING), 'loop0');
    assert.equal(scans(), 1, 'the node\'s loop devices are scanned once, not at every pass');
  });

  it('a demoted primary stops its mirror and keeps the loop device of its backing; one over a replaced backing file goes', async () => {
    const { m, events, loops, arrays, replica } = loopBed();
    loops.set(`${BACKING} (deleted)`, 'loop7');
    loops.set(BACKING, 'loop3');
    arrays.set('loop3', 'md127');
    await m.serve(replica());
    assert.deepEqual(events, ['stop md127', 'detach loop7']);
    assert.equal(loops.get(BACKING), 'loop3');
  });

  it('the volume leaving the node takes its loop device with it', async () => {
    const { m, events, loops, replica } = loopBed();
    await m.serve(replica());
    await m.release(VOLUME);
    assert.deepEqual(events, ['attach loop0', 'detach loop0']);
    assert.equal(loops.size, 0);
    await m.serve(replica());
    assert.deepEqual(events.slice(2), ['attach loop1'], 'served again: looked at again, and made again');
  });

  it('a loop device that cannot be made does not stop the replica serving its copy', async () => {
    const { m, replica } = loopBed({ attachFails: true });
    const served = await m.serve(replica());
    assert.ok(served.replicationExport);
  });
});

describe('ReplicaManager monitor: a copy replaced on another node', () => {
  it('drops the leg of a copy the assignment no longer lists (still connected, in the mirror), then adds the copy that replaces it', async () => {
    // Node B is the primary; node A's copy was replaced by node C (A left the node list and the
    // in-sync set in one transaction), but A's kernel still serves its export: B is connected to
    // it and its leg is in B's mirror, which has two slots.
    const nqnOf = (node: string) => replicationSubsystemNQN(CLUSTER, VOLUME, node);
    const connected = new Map<string, string>([[nqnOf(A), 'nvme1n1']]);
    let members = [{ block: 'loop0', flags: ['in_sync'], slot: 0 }, { block: 'nvme1n1', flags: ['in_sync', 'write_mostly'], slot: 1 }];
    const calls: string[] = [];
    const leg = (t: LegTarget): LegDevice => {
      const block = connected.get(t.nqn);
      return block ? { nodeUUID: t.nodeUUID, controller: block.replace(/n1$/, ''), controllerState: 'live', block } : notConnected(t.nodeUUID);
    };
    const stack = {
      ensureLoop: async () => 'loop0',
      blockBytes: async () => 1n << 40n,
      fenceTable: async () => '0 8 flakey 7:1 0 0 1',
      arrayOf: async () => 'md127',
      readArray: async (): Promise<ArrayState> => ({ block: 'md127', members, syncAction: members.length > 2 ? 'recover' : 'idle', syncProgress: undefined, degraded: 2 - members.length }),
      leg: async (t: LegTarget) => leg(t),
      loopOf: async () => 'loop0',
      snapshot: async () => ({ loopOf: () => 'loop0', leg, connectedNQNs: () => [...connected.keys()] }),
      disconnectAll: async (prefix: string) => {
        for (const [nqn, block] of connected) {
          if (!nqn.startsWith(prefix)) continue;
          connected.delete(nqn);
          calls.push(`disconnect ${nqn}`);
          // md fails a leg whose device went away.
          members = members.map((m) => (m.block === block ? { ...m, flags: ['faulty'] } : m));
        }
      },
      removeGoneLegs: async () => {
        calls.push('remove gone legs');
        members = members.filter((m) => !m.flags.includes('faulty'));
      },
      connectLeg: async (t: LegTarget) => {
        calls.push(`connect ${t.nodeUUID}`);
        connected.set(t.nqn, 'nvme2n1');
        return leg(t);
      },
      addLeg: async (_array: string, block: string) => {
        // md: with both slots taken the new device would only be a spare.
        calls.push(members.length < 2 ? `add ${block}` : `add ${block} as a spare`);
        members = [...members, { block, flags: [], slot: 1 }];
      },
      linearTable: async () => '0 8 linear 9:127 0',
      ensureDm: async () => undefined,
      hostDevicePath: () => `/dev/mapper/strata-${VOLUME}`,
    };
    const { writer, outOfSync } = recordingWriter();
    const replicas = manager(stack as unknown as BlockStack, writer, { monitorIntervalMs: 10 });
    await replicas.serve({
      ...promotion(2),
      replication: {
        epoch: 2,
        primaryNodeUUID: B,
        primaryHostNQN: `${CLUSTER}:node:${B}`,
        legs: [
          { nodeUUID: B, endpoint: '10.0.0.2:4421', inSync: true },
          { nodeUUID: C, endpoint: '10.0.0.3:4421', inSync: false },
        ],
      },
    });
    replicas.start();
    try {
      await waitUntil(async () => calls.some((c) => c.startsWith('add ')), 'the replacing copy added', 5000, 10);
    } finally {
      await replicas.stop();
    }
    assert.deepEqual(calls.slice(0, 4), [`disconnect ${nqnOf(A)}`, 'remove gone legs', `connect ${C}`, 'add nvme2n1']);
    assert.deepEqual(outOfSync, [], 'nothing to record: the leader took the copy out of the in-sync set with the node list');
  });
});

describe('ReplicaManager QoS (the primary serves the host through the QoS server when its assignment has limits)', () => {
  const LIMITS = { readIops: 300, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 2_000_000 };

  /** A primary whose mirror runs already; every device-mapper table and QoS call in order. */
  function qosBed(startFails?: Error) {
    const events: string[] = [];
    let table = '';
    const stack = {
      ensureLoop: async () => 'loop0',
      blockBytes: async () => 1n << 40n,
      fenceTable: async () => '0 8 flakey 7:1 0 0 1',
      arrayOf: async () => 'md127',
      readArray: async (): Promise<ArrayState> => ({ block: 'md127', members: [{ block: 'loop0', flags: ['in_sync'], slot: 0 }, { block: 'nvme1n1', flags: ['in_sync', 'write_mostly'], slot: 1 }], syncAction: 'idle', syncProgress: undefined, degraded: 0 }),
      leg: async (t: LegTarget): Promise<LegDevice> => ({ nodeUUID: t.nodeUUID, controller: 'nvme1', controllerState: 'live', block: 'nvme1n1' }),
      linearTable: async (_size: bigint, block: string) => `0 8 linear ${block} 0`,
      blockPath: (block: string) => `/dev/${block}`,
      ensureDm: async (_v: string, t: string) => {
        if (t !== table) events.push(`dm ${t.split(' ')[3]}`);
        table = t;
      },
      dmTable: async () => table,
      hostDevicePath: () => `/dev/mapper/strata-${VOLUME}`,
      loopsOfVolume: async () => ['loop0'],
      disconnectAll: async () => void events.push('disconnect'),
      stopArray: async () => void events.push('stop array'),
      stopServing: async () => {
        events.push('fence');
        return undefined;
      },
      loopOf: async () => 'loop0',
      freezeArray: async (block: string) => void events.push(`freeze ${block}`),
      failLegsBut: async (block: string, keep: string) => {
        events.push(`fail ${block} but ${keep}`);
        return true;
      },
      detachLoop: async () => undefined,
      removeDm: async () => void events.push('remove dm'),
    };
    let served: { limits: typeof LIMITS } | undefined;
    const qos = {
      start: async (volume: string, spec: { backing: string; limits: typeof LIMITS }) => {
        events.push(`qos start ${spec.backing} ${spec.limits.readIops}`);
        if (startFails) throw startFails;
        served = { limits: spec.limits };
        return { id: 3, device: '/dev/ublkb3' };
      },
      stop: async () => {
        if (served) events.push('qos stop');
        served = undefined;
      },
      state: () => served && { device: { device: '/dev/ublkb3' }, limits: served.limits, running: true },
    };
    const writer = recordingWriter().writer;
    const m = manager(stack as unknown as BlockStack, { ...writer, handOver: async (...args) => { events.push('move'); return writer.handOver(...args); } }, { qos });
    /** B primary, C in sync; `withA`: A in sync too (two copies to mirror again after a hand-over). */
    const input = (qosLimits: typeof LIMITS | null, primary = B, withA = false): ServeInput => {
      const p = promotion(2);
      const legs = withA ? p.replication.legs.map((l) => ({ ...l, inSync: true })) : p.replication.legs.filter((l) => l.nodeUUID !== A);
      return { ...p, qos: qosLimits, replication: { ...p.replication, primaryNodeUUID: primary, legs } };
    };
    return { m, events, input, stack };
  }

  it('starts the server over the array, then points the table at its device; new limits go to the server only; removed: the table back, then the server stops', async () => {
    const { m, events, input } = qosBed();
    await m.serve(input(LIMITS));
    assert.deepEqual(events, ['qos start /dev/md127 300', 'dm ublkb3']);
    assert.deepEqual(await m.qosStatus(VOLUME), { state: 'Enforced', reason: '', limits: LIMITS });

    events.length = 0;
    await m.serve(input({ ...LIMITS, readIops: 150 }));
    assert.deepEqual(events, ['qos start /dev/md127 150'], 'a live change: no table reload');
    assert.equal((await m.qosStatus(VOLUME))?.limits.readIops, 150);

    events.length = 0;
    await m.serve(input({ readIops: 0, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 0 }));
    assert.deepEqual(events, ['dm md127', 'qos stop']);
    assert.equal(await m.qosStatus(VOLUME), undefined, 'no policy, nothing to report');
  });

  it('demoted to a replica: the fence first, then the server stops before the array', async () => {
    const { m, events, input } = qosBed();
    await m.serve(input(LIMITS));
    events.length = 0;
    await m.serve(input(LIMITS, C));
    assert.deepEqual(events.slice(0, 1), ['dm 7:1'], 'the fence');
    assert.ok(events.indexOf('qos stop') >= 0 && events.indexOf('qos stop') < events.indexOf('stop array'), events.join(', '));
    assert.equal(await m.qosStatus(VOLUME), undefined, 'a replica reports nothing');
  });

  /** Connections that take a moment to go: when they start and when they are gone. */
  const slowDisconnect = (events: string[]) => async (): Promise<undefined> => {
    events.push('disconnect start');
    await new Promise((r) => setTimeout(r, 30));
    events.push('disconnect end');
    return undefined;
  };

  it('a hand-over with two copies to mirror again: the fence, the server stops, the mirror goes read-only, then the replicas\' connections go while the primary moves', async () => {
    const { m, events, input, stack } = qosBed();
    await m.serve(input(LIMITS, B, true));
    events.length = 0;
    stack.disconnectAll = slowDisconnect(events);
    await m.handOver(VOLUME);
    // Read-only before any connection goes: md's last superblock reaches every copy alike, and
    // nothing after, so the move need not wait for the connections to go.
    assert.deepEqual(events, ['fence', 'qos stop', 'freeze md127', 'disconnect start', 'move', 'disconnect end']);
  });

  it('a hand-over whose mirror cannot be made read-only: the replicas\' connections are gone before the primary moves', async () => {
    const { m, events, input, stack } = qosBed();
    await m.serve(input(LIMITS, B, true));
    events.length = 0;
    stack.freezeArray = async () => {
      throw new Error('md: md127 still in use');
    };
    stack.disconnectAll = slowDisconnect(events);
    await m.handOver(VOLUME);
    assert.deepEqual(events, ['fence', 'qos stop', 'disconnect start', 'disconnect end', 'move']);
  });

  it('a hand-over to the one copy left: no freeze (the new mirror is that copy alone); its leg is marked faulty, then its connection goes while the primary moves', async () => {
    const { m, events, input, stack } = qosBed();
    await m.serve(input(LIMITS));
    events.length = 0;
    stack.disconnectAll = slowDisconnect(events);
    await m.handOver(VOLUME);
    // md writes nothing to a faulty member: the copy is cut off from this mirror before the move,
    // and its connection need not be gone first. The fence drained every host write before.
    assert.deepEqual(events, ['fence', 'fail md127 but loop0', 'disconnect start', 'move', 'disconnect end']);
  });

  it('a hand-over to the one copy left whose leg md does not mark faulty: the connection is gone before the primary moves', async () => {
    for (const refusal of ['md refused', 'throws']) {
      const { m, events, input, stack } = qosBed();
      await m.serve(input(LIMITS));
      events.length = 0;
      stack.failLegsBut = async (block: string, keep: string) => {
        events.push(`fail ${block} but ${keep}`);
        if (refusal === 'throws') throw new Error('EBUSY');
        return false;
      };
      stack.disconnectAll = slowDisconnect(events);
      await m.handOver(VOLUME);
      assert.deepEqual(events, ['fence', 'fail md127 but loop0', 'disconnect start', 'disconnect end', 'move'], refusal);
    }
  });

  it('a hand-over with no in-sync copy to take it: nothing marked faulty, the connections go first', async () => {
    const { m, events, input, stack } = qosBed();
    const only = input(LIMITS);
    await m.serve({ ...only, replication: { ...only.replication, legs: only.replication.legs.map((l) => ({ ...l, inSync: l.nodeUUID === B })) } });
    events.length = 0;
    stack.disconnectAll = slowDisconnect(events);
    await m.handOver(VOLUME);
    assert.deepEqual(events, ['fence', 'disconnect start', 'disconnect end', 'move']);
  });

  it('without ublk in the kernel: served from the array, NotEnforced naming the node and the kernel, and not tried again', async () => {
    const { m, events, input } = qosBed(new StrataError('KERNEL_CAPABILITY_MISSING', 'QoS cannot be enforced on this node: ublk is missing'));
    await m.serve(input(LIMITS));
    assert.deepEqual(events, ['qos start /dev/md127 300', 'dm md127']);
    const status = await m.qosStatus(VOLUME);
    assert.equal(status?.state, 'NotEnforced');
    assert.match(status?.reason ?? '', new RegExp(`^node ${B}: kernel \\S+ has no ublk \\(Debian 13's 6\\.12 has it\\)`));
    events.length = 0;
    await m.serve(input(LIMITS));
    assert.deepEqual(events, [], 'the missing ublk is remembered');
  });

  it('a table that does not point at the server is never reported Enforced', async () => {
    const { m, input, stack } = qosBed();
    await m.serve(input(LIMITS));
    await stack.ensureDm(VOLUME, '0 8 flakey 7:1 0 0 1'); // fenced between passes
    assert.deepEqual(await m.qosStatus(VOLUME), { state: 'NotEnforced', reason: `node ${B}: the volume's device-mapper table does not point at its QoS server's device`, limits: LIMITS });
  });
});

describe('ReplicaManager: a grown volume', () => {
  const GiB = 1n << 30n;
  const OFFSET = 4n << 20n;
  /**
   * Node B the primary, its mirror running at 1 GiB over its loop device and C's leg; the volume
   * grew to 2 GiB and B's backing with it. C's leg shows its grown backing once `replicaGrew`;
   * the QoS server's device, when there is one, has the size the array had when it started.
   */
  function growthBed(options: { syncAction?: string; qos?: boolean } = {}) {
    const sizes = new Map<string, bigint>([['md127', GiB], ['loop0', GiB + OFFSET], ['nvme1n1', GiB + OFFSET]]);
    const events: string[] = [];
    const bed = { replicaGrew: false };
    let loaded = GiB / 512n; // the device as the volume's old size made it
    const stack = {
      ensureLoop: async () => 'loop0',
      loopOf: async () => 'loop0',
      loopsOfVolume: async () => [],
      arrayOf: async () => 'md127',
      blockBytes: async (block: string) => sizes.get(block) ?? 0n,
      growLoop: async (loop: string) => {
        events.push(`set capacity ${loop}`);
        sizes.set(loop, 2n * GiB + OFFSET);
      },
      rescanLeg: async (controller: string, block: string, min: bigint) => {
        events.push(`rescan ${controller}`);
        if (bed.replicaGrew) sizes.set(block, 2n * GiB + OFFSET);
        return (sizes.get(block) ?? 0n) >= min;
      },
      growArray: async (block: string, bytes: bigint) => {
        events.push(`grow ${block} ${bytes}`);
        sizes.set(block, bytes);
      },
      readArray: async (): Promise<ArrayState> => ({
        block: 'md127',
        members: [{ block: 'loop0', flags: ['in_sync'], slot: 0 }, { block: 'nvme1n1', flags: ['in_sync', 'write_mostly'], slot: 1 }],
        syncAction: options.syncAction ?? 'idle',
        syncProgress: undefined,
        degraded: 0,
      }),
      leg: async (t: LegTarget): Promise<LegDevice> => (t.nodeUUID === C ? { nodeUUID: C, controller: 'nvme1', controllerState: 'live', block: 'nvme1n1' } : notConnected(t.nodeUUID)),
      fenceTable: async (bytes: bigint) => `0 ${bytes / 512n} flakey 7:1 0 0 1`,
      linearTable: async (bytes: bigint, block: string) => `0 ${bytes / 512n} linear ${block} 0`,
      ensureDm: async (_v: string, table: string, beforeGrowing?: () => void) => {
        // As the real stack: only before a table longer than the one loaded.
        const sectors = BigInt(table.split(' ')[1]!);
        if (sectors > loaded) beforeGrowing?.();
        loaded = sectors;
        events.push(`dm ${table.split(' ').slice(1, 4).join(' ')}`);
      },
      disconnectAll: async () => undefined,
      hostDevicePath: () => `/dev/mapper/strata-${VOLUME}`,
      blockPath: (block: string) => `/dev/${block}`,
    };
    let qosDevice: { device: string; bytes: bigint } | undefined;
    const qos = {
      start: async () => {
        qosDevice ??= { device: `/dev/ublkb${events.filter((e) => e.startsWith('qos start')).length}`, bytes: sizes.get('md127')! };
        sizes.set(qosDevice.device.slice(5), qosDevice.bytes);
        events.push(`qos start ${qosDevice.device}`);
        return { id: 0, device: qosDevice.device };
      },
      stop: async () => {
        if (qosDevice) events.push(`qos stop ${qosDevice.device}`);
        qosDevice = undefined;
      },
      state: () => undefined,
    };
    const { writer, hostSizes } = recordingWriter();
    const m = manager(stack as unknown as BlockStack, writer, { qos: options.qos ? qos : undefined });
    const LIMITS = { readIops: 300, writeIops: 300, readBytesPerSecond: 0, writeBytesPerSecond: 0 };
    /** `hostBytes`: the size the replica set says the primary's path serves (the old one, by default). */
    const input = (primary = B, hostBytes = GiB): ServeInput => {
      const p = promotion(2);
      return {
        ...p,
        sizeBytes: 2n * GiB,
        ...(options.qos ? { qos: LIMITS } : {}),
        replication: { ...p.replication, primaryNodeUUID: primary, legs: p.replication.legs.filter((l) => l.nodeUUID !== A), hostSizeBytes: hostBytes.toString() },
        beforeGrowing: () => events.push('mark revalidate'),
      };
    };
    return { m, events, input, bed, hostSizes };
  }

  it('keeps serving at the old size until every leg shows its grown backing (no leg failed for it), then grows md, then dm, the revalidate written ahead of the reload', async () => {
    const { m, events, input, bed, hostSizes } = growthBed();
    const waiting = await m.serve(input());
    assert.match(waiting.growing ?? '', /waiting for node node-c/);
    assert.deepEqual(hostSizes, [], 'the replicas keep the old size while the primary serves it');
    assert.deepEqual(events, ['set capacity loop0', 'rescan nvme1', 'dm 2097152 linear md127'], 'the old size (1 GiB in sectors), no revalidate');
    assert.deepEqual(m.legStatus(VOLUME)?.map((l) => l.state), ['InSync', 'InSync'], 'nothing recorded out of sync');

    events.length = 0;
    bed.replicaGrew = true;
    const grown = await m.serve(input());
    assert.equal(grown.growing, undefined);
    assert.deepEqual(events, ['rescan nvme1', `grow md127 ${2n * GiB}`, 'mark revalidate', 'dm 4194304 linear md127']);
    assert.deepEqual(hostSizes, [2n * GiB], 'recorded once the path serves the new size: the replicas may show it now');

    events.length = 0;
    assert.equal((await m.serve(input(B, 2n * GiB))).growing, undefined);
    assert.deepEqual(events, ['dm 4194304 linear md127'], 'grown: nothing more to do');
    assert.equal(hostSizes.length, 1, 'the recorded size is not written again');
  });

  it('waits for a running resync before md grows (the kernel refuses meanwhile)', async () => {
    const { m, events, input, bed } = growthBed({ syncAction: 'recover' });
    bed.replicaGrew = true;
    const served = await m.serve(input());
    assert.match(served.growing ?? '', /recover is done/);
    assert.ok(!events.some((e) => e.startsWith('grow')), events.join(', '));
  });

  it('a replica keeps its fence at the size the primary serves, and grows it (the revalidate written ahead of the reload) once the replica set records the new one', async () => {
    const { m, events, input } = growthBed();
    const behind = await m.serve(input(C));
    assert.equal(behind.growing, undefined, 'nothing to retry: the assignment brings the recorded size');
    assert.match(behind.awaiting ?? '', /primary serves 1073741824 of 2147483648 bytes/);
    assert.deepEqual(events.slice(0, 1), ['dm 2097152 flakey 7:1'], 'the old size: a host never learns the new one through this path first');

    events.length = 0;
    const served = await m.serve(input(C, 2n * GiB));
    assert.equal(served.awaiting, undefined);
    assert.deepEqual(events.slice(0, 2), ['mark revalidate', 'dm 4194304 flakey 7:1']);
  });

  it('a replica set without a recorded size (written before it existed): the fence shows the volume\'s size', async () => {
    const { m, events, input } = growthBed();
    const p = input(C);
    const { hostSizeBytes: _dropped, ...replication } = p.replication;
    assert.equal((await m.serve({ ...p, replication })).awaiting, undefined);
    assert.deepEqual(events.slice(0, 2), ['mark revalidate', 'dm 4194304 flakey 7:1']);
  });

  it('with QoS: the table moves onto the grown array, the old server stops, one of the new size starts and the table moves onto it', async () => {
    const { m, events, input, bed } = growthBed({ qos: true });
    await m.serve(input());
    assert.deepEqual(events.slice(-2), ['qos start /dev/ublkb0', 'dm 2097152 linear ublkb0'], 'at the old size, through the old server');
    events.length = 0;
    bed.replicaGrew = true;
    await m.serve(input());
    assert.deepEqual(events.slice(2), ['qos start /dev/ublkb0', 'mark revalidate', 'dm 4194304 linear md127', 'qos stop /dev/ublkb0', 'qos start /dev/ublkb1', 'dm 4194304 linear ublkb1']);
  });
});
