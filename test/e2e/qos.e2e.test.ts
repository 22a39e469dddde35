// QoS enforced in the I/O path (issue 18, docs/decisions.md "QoS is enforced by a ublk server of
// ours", docs/policies.md), on the real kernel and through the product's API only: a real etcd
// and control plane on this host, two storage guests running the real agent, an initiator guest
// running fio through NVMe/TCP (native multipath, one path per node, as
// test/e2e/replication.e2e.test.ts).
//
// Policies are created with `POST /api/v2/policies`, attached with `PUT /api/v2/volumes/{UUID}`,
// changed live with `PUT /api/v2/policies/{UUID}`, and taken off by switching the volume to an
// unlimited policy (the API has no detach: `qosPolicyUUID: ""` means "not given", and a volume
// without one follows its project's default). Each step waits until the API says the primary
// enforces the limits (`GET /policies/{UUID}/enforcement` Enforced with them, the policy Active)
// and the primary's dm table points where it should (qos-bed.ts, waitEnforced); fio then measures.
// Last, a per-GB limit is measured before and after the volume grows (PUT size) under the host.
//
// On a kernel without ublk (Debian 12's 6.1) attaching a policy is refused with a 400 that names
// the node and says why, and nothing is written.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { VolumeWire as Volume } from '../../control-plane/volumes/volume-wire.js';
import { volumeSubsystemNQN } from '../../lib/contract/nqn.js';
import { BYTES_PER_MB, volumeQosLimits, type PolicyLimit } from '../../lib/contract/qos.js';
import { keys } from '../../lib/etcd/keys.js';
import { removeDir } from '../helpers/processes.js';
import { adminApi } from '../helpers/admin-api.js';
import { waitUntil } from '../helpers/wait.js';
import { storageLogs, type StorageGuest } from './cluster-lab.js';
import { dmTarget, emptyQosBed, policyLimitBody, qosBedPathPort, runFioUnstalled, startQosBed, ublkDevices, waitEnforced } from './qos-bed.js';
import { connectPaths } from './replication-host.js';
import { labKernelLabel, StepTimer, type Guest } from './lab/index.js';
import { volumeFailedError } from './volume-failure.js';

const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : false;
const HOST = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;
const NAMES = ['qos-a', 'qos-b'] as const;
const VOLUME_MIB = 128;
/** fio's measured part of each run (after a ramp that takes the bucket's first second out). */
const FIO_SECONDS = 12;
/** The issue's limits; lowered to what this bed exceeds unthrottled (measured in the same run). */
const ISSUE_READ_IOPS = 2000;
const ISSUE_WRITE_MBPS = 20;
/** A run this much longer than its job stood still (docs/e2e.md, "Stalls"). */
const STALL_SECONDS = 25;
/** Runs of one measurement before its stalls fail the step. */
const FIO_ATTEMPTS = 5;
/** Writes measured in MB/s use large sequential requests: the bed's MB/s grows with the request size. */
const WRITE_BS = '256k';

interface FioRates {
  readonly iops: number;
  readonly bytesPerSecond: number;
}

describe(`QoS enforced in the I/O path, through the policy API (two storage guests, one initiator, QEMU, ${labKernelLabel()})`, { timeout: 1_800_000, skip }, () => {
  const bed = emptyQosBed();
  const { storage } = bed;
  const { step, timings } = new StepTimer();
  const measured: string[] = [];
  const logDir = process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
  const persistDir = mkdtempSync(join(tmpdir(), 'strata-qos-e2e-'));
  const { api, request } = adminApi(() => bed.plane!);

  const host = (): Guest => {
    assert.ok(bed.initiator, 'the initiator guest did not start');
    return bed.initiator;
  };
  const storageOf = (nodeUUID: string): StorageGuest => {
    const found = storage.find((s) => s.nodeUUID() === nodeUUID);
    assert.ok(found, `no storage guest serves node ${nodeUUID}`);
    return found;
  };
  const agentLogs = () => storageLogs(storage);
  const until = <T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> => waitUntil(probe, () => `${what}\n${agentLogs()}`, timeoutMs, 500);
  const sh = async (guest: Guest, command: string, timeoutMs = 60_000) => (await guest.runOk(['sh', '-c', command], { timeoutMs })).stdout;
  const pathPort = (i: number, port: number) => qosBedPathPort(bed, i, port);

  /**
   * fio on the host's device, QD16, direct: 4 KiB random reads, or large sequential writes. A run
   * stalled when a guest's kernel logged a timed-out command, a controller reset, an expired
   * keep-alive or a reconnect while it ran, or when its wall time exceeds its own by more than
   * STALL_SECONDS (this emulated bed leaves a storage guest's own drive with commands outstanding
   * at times: docs/e2e.md, "Stalls"). Its rate measures the stall, not the limit, so it is printed
   * and measured again; a fifth stall in a row fails the step with the kernels' lines.
   */
  async function fio(kind: 'randread' | 'write', seconds = FIO_SECONDS): Promise<FioRates> {
    const job = { rw: kind, bs: kind === 'randread' ? '4k' : WRITE_BS, seconds, sizeMiB: VOLUME_MIB - 8 } as const;
    const onStall = (line: string) => {
      console.log(`# qos e2e: ${line}`);
      measured.push(line);
    };
    try {
      return await runFioUnstalled({ host: host(), device, job, watched: [host(), ...storage.map((s) => s.guest)], attempts: FIO_ATTEMPTS, stallSeconds: STALL_SECONDS, onStall });
    } catch (error) {
      assert.fail(`${(error as Error).message}\n${agentLogs()}`);
    }
  }
  const within10 = (value: number, limit: number, what: string) => {
    measured.push(`${what}: ${value.toFixed(1)} (limit ${limit})`);
    assert.ok(Math.abs(value - limit) <= limit * 0.1, `${what}: measured ${value.toFixed(1)}, limit ${limit} ± 10 %`);
  };
  const primaryGuest = async () => storageOf((await api<Volume>('GET', `/volumes/${volume.UUID}`)).primaryNodeUUID).guest;
  const volumeAvailable = () =>
    until('volume Available', async () => {
      const v = await api<Volume>('GET', `/volumes/${volume.UUID}`);
      if (v.state === 'Failed') throw await volumeFailedError(bed.client!, v);
      return v.state === 'Available' && v;
    }, 240_000);
  /** Until the API and the primary's kernel say the policy's limit is what the volume gets; the seconds from `since`. */
  const enforced = async (policyUUID: string, limit: PolicyLimit, since: number): Promise<number> => {
    const apiSaidAt = await waitEnforced({ api, policyUUID, volumeUUID: volume.UUID, expected: volumeQosLimits(limit, sizeBytes), primaryGuest, context: agentLogs, ...(volume.replicaCount === 1 ? { unstaged: /^loop\d+$/ } : {}) });
    return (apiSaidAt - since) / 1000;
  };
  const createPolicy = (name: string, limit: PolicyLimit) =>
    api<{ UUID: string }>('POST', '/policies', { name, description: 'qos e2e', qoSRateLimitPolicy: policyLimitBody(limit) });
  /** Attaches the policy to the volume (PUT /volumes/{UUID}) and waits until it is enforced. */
  const attach = async (policyUUID: string, limit: PolicyLimit): Promise<void> => {
    const since = Date.now();
    await api('PUT', `/volumes/${volume.UUID}`, { qosPolicyUUID: policyUUID });
    await volumeAvailable();
    const seconds = await enforced(policyUUID, limit, since);
    measured.push(`attached and enforced ${seconds.toFixed(1)} s after the PUT`);
  };

  before(async () => {
    await startQosBed(bed, {
      names: NAMES,
      serialTag: 'Q',
      hostName: 'qos-host',
      driveMiB: 384,
      persistDir,
      // A long lease: a TCG guest running fio misses keep-alives, and a failover would move the
      // primary (and its stage) in the middle of a measurement.
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
  let sizeBytes = 0n;
  let device = '';
  let hasUblk = false;
  let unthrottled: { read: FioRates; write: FioRates } = { read: { iops: 0, bytesPerSecond: 0 }, write: { iops: 0, bytesPerSecond: 0 } };
  let readLimit = 0;
  /** MB/s (the API's unit: whole MB/s). */
  let writeLimitMBps = 0;
  let policyUUID = '';
  /** The first step measured the bed unthrottled: every later limit is chosen from it. */
  let bedMeasured = false;
  /** Skips a step whose limits would come from a bed the first step did not measure (its failure says why). */
  const unmeasured = (t: { skip(message: string): void }): boolean => {
    if (bedMeasured) return false;
    t.skip('the first step did not measure the bed unthrottled');
    return true;
  };

  it('a 2-copy volume, connected, measured unthrottled', async () => {
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'qos', size: `${VOLUME_MIB}MiB`, replicaCount: 2, acl: { values: [HOST] } });
    volume = await step('create 2 copies → Available', () =>
      until('volume Available', async () => {
        const v = await api<Volume>('GET', `/volumes/${created.UUID}`);
        if (v.state === 'Failed') throw await volumeFailedError(bed.client!, v);
        return v.state === 'Available' && v.protectionState === 'FullyProtected' && v;
      }, 300_000),
    );
    const stored = JSON.parse((await bed.client!.get(keys.volume(volume.UUID)).string())!) as { sizeBytes: string; placement: { port: number } };
    sizeBytes = BigInt(stored.sizeBytes);
    device = await step('connect a path to each node', () =>
      connectPaths({ host: host(), nodes: storage.map((s, index) => ({ index, guest: s.guest })), port: stored.placement.port, subsystemNQN: volumeSubsystemNQN(bed.subsystemNQN, volume.UUID), volumeUUID: volume.UUID, hostNQN: HOST, pathPort, keepAliveSeconds: 30 }),
    );
    hasUblk = (await (await primaryGuest()).run(['test', '-e', '/dev/ublk-control'], { timeoutMs: 10_000 })).code === 0;
    if (!hasUblk) return;
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
    measured.push(`unthrottled: ${unthrottled.read.iops.toFixed(0)} read IOPS, ${(unthrottled.write.bytesPerSecond / BYTES_PER_MB).toFixed(2)} MB/s written`);
    // Each limit at most half of what the bed did unthrottled, at most the issue's: a limit the
    // bed cannot reach measures the bed, not the limit (this shared emulated bed varies by a
    // factor of 2 between runs). The API takes whole MB/s.
    readLimit = Math.min(ISSUE_READ_IOPS, Math.floor(unthrottled.read.iops / 2 / 10) * 10);
    writeLimitMBps = Math.min(ISSUE_WRITE_MBPS, Math.floor(unthrottled.write.bytesPerSecond / BYTES_PER_MB / 2));
    assert.ok(readLimit >= 10 && writeLimitMBps >= 1, `the bed is too slow for a limit to bite: ${JSON.stringify(unthrottled)}`);
    measured.push(`limits chosen: ${readLimit} read IOPS, ${writeLimitMBps} MB/s written`);
    bedMeasured = true;
  });

  it('a read IOPS policy attached, then switched live to a write MB/s limit: each measured within ±10 % (6.12); refused with a 400 naming the node (no ublk)', async (t) => {
    assert.ok(volume, 'the first step created the volume');
    if (!hasUblk) {
      const policy = await createPolicy('qos-e2e-read', { kind: 'limitIOPS', read: 100, write: 0 });
      const generation = (await api<Volume & { ETag?: string }>('GET', `/volumes/${volume.UUID}`)).ETag;
      const res = await request('PUT', `/volumes/${volume.UUID}`, { qosPolicyUUID: policy.UUID });
      assert.equal(res.status, 400, res.text);
      const body = res.json as { error: string; details?: unknown };
      const primary = storageOf(volume.primaryNodeUUID);
      assert.match(body.error, /lacks userspace block devices \(ublk/);
      assert.match(body.error, new RegExp(primary.nodeUUID()));
      assert.match(body.error, /Debian 12's 6\.1 kernel has no ublk/);
      const after = await api<Volume & { ETag?: string }>('GET', `/volumes/${volume.UUID}`);
      assert.equal(after.ETag, generation, 'nothing written');
      assert.equal(await dmTarget(primary.guest, volume.UUID).then((t) => /^md/.test(t)), true, 'served straight from the array');
      assert.deepEqual(await ublkDevices(primary.guest), []);
      return;
    }
    if (unmeasured(t)) return;
    const readPolicy: PolicyLimit = { kind: 'limitIOPS', read: readLimit, write: 0 };
    policyUUID = (await createPolicy('qos-e2e', readPolicy)).UUID;
    await step('attach the read IOPS policy → Enforced', () => attach(policyUUID, readPolicy));
    const read = await step('fio randread limited', () => fio('randread'));
    within10(read.iops, readLimit, 'read IOPS');

    const writePolicy: PolicyLimit = { kind: 'limitBw', read: 0, write: writeLimitMBps };
    const putAt = Date.now();
    await api('PUT', `/policies/${policyUUID}`, { qoSRateLimitPolicy: policyLimitBody(writePolicy) });
    const seconds = await step('the write MB/s limit enforced', () => enforced(policyUUID, writePolicy, putAt));
    measured.push(`switched to a write MB/s limit, enforced ${seconds.toFixed(1)} s after the PUT`);
    const write = await step('fio write limited', () => fio('write'));
    within10(write.bytesPerSecond / BYTES_PER_MB, writeLimitMBps, 'write MB/s');
  });

  it('a live change of the policy shows within seconds, the device unchanged', async (t) => {
    if (!hasUblk) return t.skip('no ublk in this kernel');
    if (unmeasured(t)) return;
    const guest = await primaryGuest();
    const deviceBefore = await dmTarget(guest, volume.UUID);
    readLimit = Math.max(10, Math.floor(readLimit / 2));
    const changed: PolicyLimit = { kind: 'limitIOPS', read: readLimit, write: 0 };
    const putAt = Date.now();
    await api('PUT', `/policies/${policyUUID}`, { qoSRateLimitPolicy: policyLimitBody(changed) });
    const seconds = await step('the halved limit enforced', () => enforced(policyUUID, changed, putAt));
    measured.push(`live change enforced ${seconds.toFixed(1)} s after the PUT`);
    assert.ok(seconds < 15, `applied within seconds (${seconds.toFixed(1)} s)`);
    const read = await step('fio randread after the change', () => fio('randread', 8));
    within10(read.iops, readLimit, 'read IOPS after a live change');
    assert.equal(await dmTarget(guest, volume.UUID), deviceBefore, 'a change of limits only does not touch the table');
  });

  it('a restarted agent (kill -9) adopts the running server: no second device, still limited', async (t) => {
    if (!hasUblk) return t.skip('no ublk in this kernel');
    if (unmeasured(t)) return;
    const primary = storageOf((await api<Volume>('GET', `/volumes/${volume.UUID}`)).primaryNodeUUID);
    const before = await dmTarget(primary.guest, volume.UUID);
    await step('kill -9 the primary agent and start it again', async () => {
      await primary.stopAgent('KILL');
      await primary.startAgent({ timeoutMs: 300_000 });
    });
    await until('the new agent adopted the server', async () => /adopted the QoS server an earlier agent started/.test(primary.agentLogTail(500_000)), 240_000);
    assert.equal(await dmTarget(primary.guest, volume.UUID), before);
    assert.deepEqual(await ublkDevices(primary.guest), [before], 'never a second server for the volume');
    const read = await step('fio randread after the agent restart', () => fio('randread', 8));
    within10(read.iops, readLimit, 'read IOPS after an agent restart');
  });

  it('a policy in use cannot be deleted; switching the volume to an unlimited policy lifts the limit: the table back on the array, the server gone', async (t) => {
    if (!hasUblk) return t.skip('no ublk in this kernel');
    if (unmeasured(t)) return;
    const refused = await request('DELETE', `/policies/${policyUUID}`);
    assert.equal(refused.status, 400, refused.text);
    const unlimited: PolicyLimit = { kind: 'limitIOPS', read: 0, write: 0 };
    const unlimitedUUID = (await createPolicy('qos-e2e-unlimited', unlimited)).UUID;
    await step('switch to the unlimited policy → no stage', () => attach(unlimitedUUID, unlimited));
    const read = await step('fio randread without limits', () => fio('randread', 8));
    measured.push(`after the switch to an unlimited policy: ${read.iops.toFixed(0)} read IOPS`);
    assert.ok(read.iops > readLimit * 1.3, `the limit is lifted: ${read.iops.toFixed(0)} read IOPS against a limit of ${readLimit}`);
    const deleted = await request('DELETE', `/policies/${policyUUID}`);
    assert.equal(deleted.status, 200, `no volume uses it any more: ${deleted.text}`);
  });

  it('a per-GB read limit scales with the volume\'s size: grown by half under a connected host, the limit rises by half', async (t) => {
    if (!hasUblk) return t.skip('no ublk in this kernel');
    if (unmeasured(t)) return;
    const grownMiB = (VOLUME_MIB * 3) / 2;
    const grownBytes = BigInt(grownMiB) * 1024n * 1024n;
    // Grown, the limit is at most half of what the bed read unthrottled; before, two thirds of that.
    const perGb = Math.floor((Math.min(ISSUE_READ_IOPS, unthrottled.read.iops / 2) * 1e9) / Number(grownBytes));
    const limit: PolicyLimit = { kind: 'limitIOPSPerGB', read: perGb, write: 0 };
    const before = volumeQosLimits(limit, sizeBytes).readIops;
    const grown = volumeQosLimits(limit, grownBytes).readIops;
    assert.ok(before >= 10, `the bed is too slow for a per-GB limit to bite: ${JSON.stringify(unthrottled)}`);
    measured.push(`per-GB limit ${perGb} read IOPS/GB: ${before} at ${VOLUME_MIB} MiB, ${grown} at ${grownMiB} MiB`);
    const perGbUUID = (await createPolicy('qos-e2e-per-gb', limit)).UUID;
    await step('attach the per-GB policy → Enforced', () => attach(perGbUUID, limit));
    const read = await step('fio randread per-GB limited', () => fio('randread', 8));
    within10(read.iops, before, `read IOPS at ${VOLUME_MIB} MiB`);

    const putAt = Date.now();
    await api('PUT', `/volumes/${volume.UUID}`, { size: `${grownMiB}MiB` });
    await step('grown → Available', () => volumeAvailable());
    sizeBytes = grownBytes;
    const seconds = await step('the scaled limit enforced', () => enforced(perGbUUID, limit, putAt));
    measured.push(`grown and the scaled limit enforced ${seconds.toFixed(1)} s after the PUT`);
    await step('the host sees the new size', () =>
      until('blockdev size grown', async () => (await sh(host(), `blockdev --getsize64 ${device}`)).trim() === grownBytes.toString(), 60_000),
    );
    const after = await step('fio randread after the resize', () => fio('randread', 8));
    within10(after.iops, grown, `read IOPS at ${grownMiB} MiB`);
  });

  it('a single-copy volume is served through device-mapper over a loop device (6.1 too): data written through the host is in its file and counted in userWritten; a read IOPS policy measured within ±10 %, then lifted by an unlimited policy, the table back on the loop device (6.12)', async () => {
    // The 2-copy volume goes first: one QoS server on the bed at a time (waitEnforced counts them).
    await host().run(['nvme', 'disconnect', '-n', volumeSubsystemNQN(bed.subsystemNQN, volume.UUID)], { timeoutMs: 60_000 });
    await api('DELETE', `/volumes/${volume.UUID}`);
    const gone = volume.UUID;
    await step('the 2-copy volume deleted', () => until('volume gone', async () => (await request('GET', `/volumes/${gone}`)).status === 404, 240_000));
    volume = await api<Volume>('POST', '/projects/default/volumes', { name: 'qos-single', size: `${VOLUME_MIB}MiB`, replicaCount: 1, acl: { values: [HOST] } });
    volume = await step('create 1 copy → Available', () => volumeAvailable());
    const stored = JSON.parse((await bed.client!.get(keys.volume(volume.UUID)).string())!) as { sizeBytes: string; placement: { port: number } };
    sizeBytes = BigInt(stored.sizeBytes);
    const index = storage.findIndex((s) => s.nodeUUID() === volume.primaryNodeUUID);
    assert.ok(index >= 0, `no storage guest serves node ${volume.primaryNodeUUID}`);
    const guest = storage[index]!.guest;
    const nqn = volumeSubsystemNQN(bed.subsystemNQN, volume.UUID);
    assert.equal((await sh(guest, `cat /sys/kernel/config/nvmet/subsystems/${nqn}/namespaces/*/device_path`)).trim(), `/dev/mapper/strata-${volume.UUID}`, 'the namespace is on the device-mapper device');
    const loop = await dmTarget(guest, volume.UUID);
    assert.match(loop, /^loop\d+$/, 'linear onto a loop device');
    const file = (await sh(guest, `cat /sys/block/${loop}/loop/backing_file`)).trim();
    assert.match(file, new RegExp(`/${volume.UUID}\\.`), 'over the volume\'s own file');
    device = await step('connect the path', () =>
      connectPaths({ host: host(), nodes: [{ index, guest }], port: stored.placement.port, subsystemNQN: nqn, volumeUUID: volume.UUID, hostNQN: HOST, pathPort, keepAliveSeconds: 30 }),
    );
    assert.equal((await sh(host(), `blockdev --getss ${device}`)).trim(), '4096', 'the volume\'s 4 KiB blocks');
    await sh(host(), `head -c 1048576 /dev/urandom > /tmp/single.bin && dd if=/tmp/single.bin of=${device} bs=1M count=1 seek=3 oflag=direct status=none`);
    const written = (await sh(host(), 'md5sum < /tmp/single.bin')).split(' ')[0];
    const inFile = (await sh(guest, `dd if=${file} bs=1M count=1 skip=3 iflag=direct status=none | md5sum`)).split(' ')[0];
    assert.equal(inFile, written, 'the bytes the host wrote are in the volume\'s file on its node');
    // Its device-mapper device counts what hosts write (statistics.userWritten, a lower bound read every pass).
    await step('userWritten counts the MiB', () =>
      until('userWritten ≥ 1 MiB', async () => BigInt((await api<Volume>('GET', `/volumes/${volume.UUID}`)).statistics.userWritten) >= 1048576n, 120_000),
    );
    if (!hasUblk) {
      const policy = await createPolicy('qos-e2e-single-refused', { kind: 'limitIOPS', read: 100, write: 0 });
      const res = await request('PUT', `/volumes/${volume.UUID}`, { qosPolicyUUID: policy.UUID });
      assert.equal(res.status, 400, res.text);
      assert.match((res.json as { error: string }).error, new RegExp(volume.primaryNodeUUID));
      return;
    }
    await step('fill the volume', () => sh(host(), `dd if=/dev/zero of=${device} bs=1M count=${VOLUME_MIB - 8} oflag=direct status=none`, 600_000));
    const free = await step('fio randread unthrottled', () => fio('randread', 8));
    const limit = Math.min(ISSUE_READ_IOPS, Math.floor(free.iops / 2 / 10) * 10);
    measured.push(`single copy: ${free.iops.toFixed(0)} read IOPS unthrottled, limit ${limit}`);
    assert.ok(limit >= 10, `the bed is too slow for a limit to bite: ${free.iops.toFixed(1)} IOPS`);
    const readPolicy: PolicyLimit = { kind: 'limitIOPS', read: limit, write: 0 };
    await step('attach a read IOPS policy → Enforced', async () => attach((await createPolicy('qos-e2e-single', readPolicy)).UUID, readPolicy));
    const read = await step('fio randread limited', () => fio('randread'));
    within10(read.iops, limit, 'single copy: read IOPS');
    const unlimited: PolicyLimit = { kind: 'limitIOPS', read: 0, write: 0 };
    await step('switch to an unlimited policy → no stage', async () => attach((await createPolicy('qos-e2e-single-unlimited', unlimited)).UUID, unlimited));
    assert.equal(await dmTarget(guest, volume.UUID), loop, 'the table back on the same loop device');
    const lifted = await step('fio randread without limits', () => fio('randread', 8));
    measured.push(`single copy after the switch to an unlimited policy: ${lifted.iops.toFixed(0)} read IOPS`);
    assert.ok(lifted.iops > limit * 1.3, `the limit is lifted: ${lifted.iops.toFixed(0)} read IOPS against a limit of ${limit}`);
  });
});
