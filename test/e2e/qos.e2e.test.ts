// QoS enforced in the I/O path (issue 18, docs/decisions.md "QoS is enforced by a ublk server of
// ours"), on the real kernel: a real etcd and control plane on this host, two storage guests
// running the real agent, an initiator guest running fio through NVMe/TCP (native multipath, one
// path per node, as test/e2e/replication.e2e.test.ts).
//
// The policy API is not part of this branch (the control plane's half of issue 18), so the test
// writes the volume's limits into its assignments itself, the field the control plane fills
// (VolumeAssignment.qos, lib/contract/qos.ts). The active cluster manager rewrites assignments
// that differ from what it derives, so it is stopped once the volume is Available: the agents
// serve from etcd alone. Without a control plane the agents' reports (VolumeStatus.qos) are not
// stored, so enforcement is checked where it happens: the primary's device-mapper table on its
// ublk device, the server's limits file, the agent's log, and the rates fio measures.
//
// On a kernel without ublk (Debian 12's 6.1) the same volume is served straight from its array
// and the agent says why (NotEnforced, naming the node and the kernel).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { VolumeWire as Volume } from '../../control-plane/volumes/volume-wire.js';
import { volumeSubsystemNQN } from '../../lib/contract/nqn.js';
import { UNLIMITED, type QosLimits } from '../../lib/contract/qos.js';
import { keys } from '../../lib/etcd/keys.js';
import type { VolumeAssignment } from '../../lib/records.js';
import { removeDir } from '../helpers/processes.js';
import { adminApi } from '../helpers/admin-api.js';
import { waitUntil } from '../helpers/wait.js';
import type { StorageGuest } from './cluster-lab.js';
import { dmTarget as dmTargetOn, emptyQosBed, qosBedPathPort, runFio, startQosBed, ublkDevices as ublkDevicesOn } from './qos-bed.js';
import { connectPaths } from './replication-host.js';
import { labKernelLabel, StepTimer, type Guest } from './lab/index.js';

const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : false;
const HOST = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;
const NAMES = ['qos-a', 'qos-b'] as const;
const VOLUME_MIB = 128;
/** fio's measured part of each run (after a ramp that takes the bucket's first second out). */
const FIO_SECONDS = 12;
/** The issue's limits; lowered to what this bed exceeds unthrottled (measured in the same run). */
const ISSUE_READ_IOPS = 2000;
const ISSUE_WRITE_MBPS = 20;
const MB = 1_000_000;

interface FioRates {
  readonly iops: number;
  readonly bytesPerSecond: number;
}

describe(`QoS enforced in the I/O path (two storage guests, one initiator, QEMU, ${labKernelLabel()})`, { timeout: 1_800_000, skip }, () => {
  const bed = emptyQosBed();
  const { storage } = bed;
  const { step, timings } = new StepTimer();
  const measured: string[] = [];
  const logDir = process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
  const persistDir = mkdtempSync(join(tmpdir(), 'strata-qos-e2e-'));
  const { api } = adminApi(() => bed.plane!);

  const host = (): Guest => {
    assert.ok(bed.initiator, 'the initiator guest did not start');
    return bed.initiator;
  };
  const storageOf = (nodeUUID: string): StorageGuest => {
    const found = storage.find((s) => s.nodeUUID() === nodeUUID);
    assert.ok(found, `no storage guest serves node ${nodeUUID}`);
    return found;
  };
  const agentLogs = () => storage.map((s) => `--- ${s.name} agent log:\n${s.agentLogTail(3000)}`).join('\n');
  const until = <T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> => waitUntil(probe, () => `${what}\n${agentLogs()}`, timeoutMs, 500);
  const sh = async (guest: Guest, command: string, timeoutMs = 60_000) => (await guest.runOk(['sh', '-c', command], { timeoutMs })).stdout;
  const pathPort = (i: number, port: number) => qosBedPathPort(bed, i, port);

  /** fio on the host's device: 4 KiB random reads or 64 KiB sequential writes, QD16, direct. */
  async function fio(kind: 'randread' | 'write', seconds = FIO_SECONDS): Promise<FioRates> {
    return runFio(host(), device, { rw: kind, bs: kind === 'randread' ? '4k' : '64k', seconds, sizeMiB: VOLUME_MIB - 8 });
  }
  const within10 = (value: number, limit: number, what: string) => {
    measured.push(`${what}: ${value.toFixed(1)} (limit ${limit})`);
    assert.ok(Math.abs(value - limit) <= limit * 0.1, `${what}: measured ${value.toFixed(1)}, limit ${limit} ± 10 %`);
  };

  /** Writes `qos` into every node's assignment of the volume (what the control plane's half will do). */
  async function setQos(qos: QosLimits | null): Promise<void> {
    for (const nodeUUID of volume.nodeList) {
      const key = keys.assignment(nodeUUID, volume.UUID);
      const a = JSON.parse((await bed.client!.get(key).string())!) as VolumeAssignment;
      await bed.client!.put(key).value(JSON.stringify({ ...a, qos }));
    }
  }
  const primaryGuest = () => storageOf(primaryNode).guest;
  /** The device the primary's dm table points at (`ublkbN`, `md...`), read from the kernel. */
  const dmTarget = () => dmTargetOn(primaryGuest(), volume.UUID);
  const ublkDevices = () => ublkDevicesOn(primaryGuest());
  async function limitsFile(): Promise<string> {
    return sh(primaryGuest(), `cat /run/strata/qos/${volume.UUID}.limits 2>/dev/null || true`);
  }

  before(async () => {
    await startQosBed(bed, {
      names: NAMES,
      serialTag: 'Q',
      hostName: 'qos-host',
      driveMiB: 384,
      persistDir,
      // A long lease: the control plane is stopped mid-test (nothing may move the primary
      // meanwhile), and a TCG guest running fio misses keep-alives.
      agentArgs: ['--reconcile-interval-seconds', '5', '--log-level', 'debug', '--lease-ttl-seconds', '60'],
      storageMemoryMiB: 768,
      hostMemoryMiB: 512,
      step,
      api,
    });
  }, { timeout: 600_000 });

  after(async () => {
    await bed.initiator?.run(['nvme', 'disconnect-all'], { timeoutMs: 30_000 }).catch(() => undefined);
    mkdirSync(logDir, { recursive: true });
    for (const s of storage) writeFileSync(join(logDir, `${s.name}.${process.pid}.agent.log`), s.agentLogTail(2_000_000));
    await Promise.all([...storage.map((s) => s.stop().catch(() => undefined)), bed.initiator?.stop()]);
    if (bed.plane) {
      writeFileSync(join(logDir, `qos-control-plane.${process.pid}.log`), bed.plane.logs.map((l) => JSON.stringify(l)).join('\n'));
      await bed.plane.stop();
      removeDir(bed.plane.stateDir);
    }
    bed.client?.close();
    await bed.etcd?.stop();
    removeDir(persistDir);
    console.log(`# qos e2e timings: ${timings.join(', ')}`);
    console.log(`# qos e2e measured: ${measured.join('; ')}`);
  }, { timeout: 180_000 });

  let volume: Volume;
  let device = '';
  let primaryNode = '';
  let hasUblk = false;
  let unthrottled: { read: FioRates; write: FioRates } = { read: { iops: 0, bytesPerSecond: 0 }, write: { iops: 0, bytesPerSecond: 0 } };
  let readLimit = 0;
  /** Bytes per second. */
  let writeLimit = 0;

  it('a 2-copy volume, connected, measured unthrottled; the control plane stopped', async () => {
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'qos', size: `${VOLUME_MIB}MiB`, replicaCount: 2, acl: { values: [HOST] } });
    volume = await step('create 2 copies → Available', () =>
      until('volume Available', async () => {
        const v = await api<Volume>('GET', `/volumes/${created.UUID}`);
        if (v.state === 'Failed') throw new Error(`volume Failed: ${JSON.stringify(v)}`);
        return v.state === 'Available' && v.protectionState === 'FullyProtected' && v;
      }, 300_000),
    );
    primaryNode = volume.primaryNodeUUID;
    const port = (JSON.parse((await bed.client!.get(keys.volume(volume.UUID)).string())!) as { placement: { port: number } }).placement.port;
    device = await step('connect a path to each node', () =>
      connectPaths({ host: host(), nodes: storage.map((s, index) => ({ index, guest: s.guest })), port, subsystemNQN: volumeSubsystemNQN(bed.subsystemNQN, volume.UUID), volumeUUID: volume.UUID, hostNQN: HOST, pathPort, keepAliveSeconds: 30 }),
    );
    hasUblk = (await primaryGuest().run(['test', '-e', '/dev/ublk-control'], { timeoutMs: 10_000 })).code === 0;
    // Every block written once: reads of never-written extents of a sparse file cost nothing.
    await step('fill the volume', () => sh(host(), `dd if=/dev/zero of=${device} bs=1M count=${VOLUME_MIB - 8} oflag=direct status=none`, 600_000));
    // Each measured twice, the better run kept: a stall of this emulated bed (CI, 6.12: a 15 s
    // randread took 68 s and measured 54 IOPS, against 1,048 later in the same run) would set
    // limits so low that the token bucket cannot be measured against them within ±10 %.
    const better = async (kind: 'randread' | 'write'): Promise<FioRates> => {
      const first = await step(`fio ${kind} unthrottled`, () => fio(kind));
      const second = await step(`fio ${kind} unthrottled, again`, () => fio(kind));
      return first.bytesPerSecond >= second.bytesPerSecond ? first : second;
    };
    unthrottled = { read: await better('randread'), write: await better('write') };
    measured.push(`unthrottled: ${unthrottled.read.iops.toFixed(0)} read IOPS, ${(unthrottled.write.bytesPerSecond / MB).toFixed(2)} MB/s written`);
    // The largest limit at most half of what the bed did unthrottled, at most the issue's: a limit
    // the bed cannot reach measures the bed, not the limit, and this shared emulated bed varies
    // by a factor of 2 between runs (a busy host: 232 read IOPS and 0.93 MB/s unthrottled).
    readLimit = Math.min(ISSUE_READ_IOPS, Math.floor(unthrottled.read.iops / 2 / 10) * 10);
    writeLimit = Math.min(ISSUE_WRITE_MBPS * MB, Math.floor(unthrottled.write.bytesPerSecond / 2 / (MB / 10)) * (MB / 10));
    assert.ok(readLimit >= 10 && writeLimit >= MB / 10, `the bed is too slow for a limit to bite: ${JSON.stringify(unthrottled)}`);
    measured.push(`limits chosen: ${readLimit} read IOPS, ${writeLimit / MB} MB/s written`);
    await step('stop the control plane (it rewrites assignments without qos)', () => bed.plane!.stop());
    writeFileSync(join(persistDir, 'control-plane.log'), bed.plane!.logs.map((l) => JSON.stringify(l)).join('\n'));
    removeDir(bed.plane!.stateDir);
    bed.plane = undefined;
  });

  it('read IOPS and write MB/s limits measured within ±10 % (6.12); NotEnforced with the reason (no ublk)', async () => {
    assert.ok(bed.plane === undefined && readLimit > 0, 'the first step set up the volume, chose the limits and stopped the control plane');
    const limits = { ...UNLIMITED, readIops: readLimit, writeBytesPerSecond: writeLimit };
    await setQos(limits);
    if (!hasUblk) {
      await until('the agent says why the policy is not enforced', async () => /QoS not enforced[^\n]*has no ublk|has no ublk[^\n]*QoS not enforced/.test(storageOf(primaryNode).agentLogTail(200_000)), 60_000);
      assert.match(await dmTarget(), /^md/, 'served straight from the array');
      assert.deepEqual(await ublkDevices(), []);
      return;
    }
    await step('the table moves onto the ublk device', () => until('dm on ublkb', async () => /^ublkb\d+$/.test(await dmTarget()), 60_000));
    assert.equal((await ublkDevices()).length, 1, 'one server for the volume');
    assert.match(await limitsFile(), new RegExp(`^read-iops ${readLimit}$`, 'm'));
    const read = await step('fio randread limited', () => fio('randread'));
    within10(read.iops, readLimit, 'read IOPS');
    const write = await step('fio write limited', () => fio('write'));
    within10(write.bytesPerSecond / MB, writeLimit / MB, 'write MB/s');
  });

  it('a live change shows within seconds, the device unchanged', async (t) => {
    if (!hasUblk) return t.skip('no ublk in this kernel');
    const deviceBefore = await dmTarget();
    const halved = Math.floor(readLimit / 2);
    const putAt = Date.now();
    await setQos({ ...UNLIMITED, readIops: halved, writeBytesPerSecond: writeLimit });
    await until('the new limit reaches the server', async () => new RegExp(`^read-iops ${halved}$`, 'm').test(await limitsFile()), 30_000);
    const appliedMs = Date.now() - putAt;
    measured.push(`live change applied ${(appliedMs / 1000).toFixed(1)} s after the assignment's write`);
    assert.ok(appliedMs < 15_000, `applied within seconds (${appliedMs} ms)`);
    const read = await step('fio randread after the change', () => fio('randread', 8));
    within10(read.iops, halved, 'read IOPS after a live change');
    assert.equal(await dmTarget(), deviceBefore, 'a live change does not touch the table');
    readLimit = halved;
  });

  it('a restarted agent (kill -9) adopts the running server: no second device, still limited', async (t) => {
    if (!hasUblk) return t.skip('no ublk in this kernel');
    const before = await dmTarget();
    const primary = storageOf(primaryNode);
    await step('kill -9 the primary agent and start it again', async () => {
      await primary.stopAgent('KILL');
      await primary.startAgent({ timeoutMs: 300_000 });
    });
    await until('the new agent adopted the server', async () => /adopted the QoS server an earlier agent started/.test(primary.agentLogTail(500_000)), 240_000);
    assert.equal(await dmTarget(), before);
    assert.deepEqual(await ublkDevices(), [before], 'never a second server for the volume');
    const read = await step('fio randread after the agent restart', () => fio('randread', 8));
    within10(read.iops, readLimit, 'read IOPS after an agent restart');
  });

  it('removing the limits lifts them: the table back on the array, the server gone', async (t) => {
    if (!hasUblk) return t.skip('no ublk in this kernel');
    await setQos(null);
    await until('dm back on the array and no ublk device', async () => /^md/.test(await dmTarget()) && (await ublkDevices()).length === 0, 60_000);
    const read = await step('fio randread without limits', () => fio('randread', 8));
    measured.push(`after removal: ${read.iops.toFixed(0)} read IOPS`);
    assert.ok(read.iops > readLimit * 1.3, `the limit is lifted: ${read.iops.toFixed(0)} read IOPS against a limit of ${readLimit}`);
    await sleep(0);
  });
});
