// A promotion with a third copy whose node has not relinked its export yet: the new primary tries
// that copy again for a moment instead of recording it out of sync (the 3-copy promotion race);
// and one whose connection hangs: the promotion does not wait for the kernel's minute.
// The block stack is a fake that records what the manager asks of it.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import type { ReplicaSetWriter } from '../../../lib/etcd/replica-set-store.js';
import { notConnected, type ArrayState, type BlockStack, type LegDevice, type LegTarget } from './block-stack.js';
import { ReplicaManager, type ServeInput } from './replica-manager.js';

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
  const writer: ReplicaSetWriter = {
    markOutOfSync: async (_v, _e, _p, nodes) => {
      outOfSync.push([...nodes]);
      return { outcome: 'changed' } as unknown as Awaited<ReturnType<ReplicaSetWriter['markOutOfSync']>>;
    },
    markInSync: async () => ({ outcome: 'changed' }) as unknown as Awaited<ReturnType<ReplicaSetWriter['markInSync']>>,
    handOver: async () => ({ outcome: 'none' }),
  };
  return { writer, outOfSync };
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

function manager(stack: BlockStack, writer: ReplicaSetWriter, promotionLegWaitMs?: number, promotionConnectTimeoutMs?: number) {
  return new ReplicaManager({
    stack,
    writer,
    clusterSubsystemNQN: () => CLUSTER,
    logger: pino({ level: 'silent' }),
    monitorIntervalMs: 60_000,
    legLossGraceMs: 2000,
    rejoinIntervalMs: 5000,
    ...(promotionLegWaitMs === undefined ? {} : { promotionLegWaitMs }),
    ...(promotionConnectTimeoutMs === undefined ? {} : { promotionConnectTimeoutMs }),
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
    await manager(stack, writer, 300).serve(promotion());
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
    const served = await manager(stack, writer, 3000, 400).serve(promotion()).finally(() => clearInterval(keepAlive));
    const took = Date.now() - started;
    assert.equal(served.hostDevicePath, `/dev/mapper/strata-${VOLUME}`);
    assert.ok(took >= 400 && took < 2500, `bounded by the connect timeout, not the 3 s refusal wait (${took} ms)`);
    assert.equal(calls.connect, 1, 'a copy that did not answer in time is not dialled again');
    assert.deepEqual(calls.assembledWith, []);
    assert.deepEqual(outOfSync, [[C]]);
  });

  it('does not wait at the first epoch (a new volume waits for every copy through NotReadyYet instead)', async () => {
    const { stack, calls } = fakeStack(1);
    const { writer } = recordingWriter();
    await manager(stack, writer).serve(promotion(1)).catch(() => undefined);
    assert.equal(calls.connect, 1);
  });
});
