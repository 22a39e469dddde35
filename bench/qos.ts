// bench/qos: the QoS stage of issue 18 on the real kernel, through the product's REST API, each
// figure printed beside a baseline measured in the same run.
//
//   npm run bench:qos [-- --rounds 3 --fio-seconds 20 --volume-mib 256 --skip cost|accuracy]
//
// Bed (test/e2e/qos-bed.ts, as test/e2e/qos.e2e.test.ts): a private etcd and the real control
// plane on this host, two storage guests running the real agent on Debian 13's 6.12 (ublk), one
// initiator guest with nvme-cli (one path per node) and fio. One 2-copy volume (its primary's stage;
// a single copy gets the same stage over its loop device: docs/datapath.md, "Single-copy volumes"),
// prefilled (reads of never-written extents of a sparse file cost nothing), with one policy
// attached through `PUT /api/v2/volumes/{UUID}` and changed live with `PUT /api/v2/policies/{UUID}`.
// Before each measurement the bench waits until `GET /api/v2/policies/{UUID}/enforcement` says the
// volume's primary enforces exactly the expected limits, the policy's `state` is Active, and the
// primary's dm table `strata-<volume>` points at a `ublkbN` device (or at the md array, without a stage).
//
// "Without a policy" is the same policy with every limit 0 (unlimited): the API cannot detach a
// policy from a volume (`qosPolicyUUID: ''` means "not given"), and an all-zero policy takes the
// stage out of the path, which the bench checks (dm on the array, no ublk device).
//
// Figures:
// Every figure comes from a fio run in which no guest's kernel logged a stall (qos-bed.ts
// runFioUnstalled; the lab's emulated drives lose a batch of commands at times: docs/e2e.md,
// "Stalls"); a stalled run is printed and measured again, and the count is among the results.
//
//  1. The stage's cost: fio 4 KiB randread and randwrite, QD16, direct, libaio, with a generous
//     policy (limits no bed reaches: the stage is in the path, its buckets never empty) against
//     none, in the order none, generous, generous, none per round; each round printed, then the
//     medians, their ratio (IOPS, mean and p99 completion latency). Target: ≤ 10 % IOPS at QD16.
//  2. Accuracy of each limit kind: read IOPS, write IOPS (4 KiB random), read MB/s, write MB/s
//     (64 KiB random), read and write IOPS per GB (× the volume's size in GB, lib/contract/qos.ts),
//     each limit about half of what the bed did unthrottled in the same run: measured vs limit.
//
// Everything runs under TCG on a shared 2-core machine: absolute figures are slow and noisy; the
// baselines and ratios are the comparable part. Every step has a timeout; guests, etcd and the
// control plane are stopped at the end, also on error. Logs go to $STRATA_E2E_LOG_DIR (default
// <tmpdir>/strata-e2e-logs) as bench-qos.<pid>.*.log.
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { VolumeWire as Volume } from '../control-plane/volumes/volume-wire.js';
import { NQN_UUID_PREFIX, volumeSubsystemNQN } from '../lib/contract/nqn.js';
import { BYTES_PER_MB, volumeQosLimits, type PolicyLimit, type QosLimits } from '../lib/contract/qos.js';
import { keys } from '../lib/etcd/keys.js';
import type { VolumeRecord } from '../lib/records.js';
import { adminApi } from '../test/helpers/admin-api.js';
import { waitUntil } from '../test/helpers/wait.js';
import { emptyQosBed, policyLimitBody, qosBedPathPort, runFioUnstalled, startQosBed, waitEnforced, type FioJob, type FioSide } from '../test/e2e/qos-bed.js';
import { connectPaths } from '../test/e2e/replication-host.js';
import { labKernelLabel } from '../test/e2e/lab/index.js';
import { withTimeout } from '../test/e2e/lab/util.js';
import { runLabBench } from './lab-run.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    'fio-seconds': { type: 'string', default: '20' },
    'volume-mib': { type: 'string', default: '256' },
    /** Parts to leave out (comma-separated): cost, accuracy. */
    skip: { type: 'string', default: '' },
  },
});
const ROUNDS = Number(values.rounds);
const FIO_SECONDS = Number(values['fio-seconds']);
const VOLUME_MIB = Number(values['volume-mib']);
const SKIP = new Set((values.skip ?? '').split(',').filter(Boolean));
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) throw new Error('--rounds must be a positive integer');
if (!(FIO_SECONDS > 0)) throw new Error('--fio-seconds must be positive');
if (!Number.isInteger(VOLUME_MIB) || VOLUME_MIB < 64 || VOLUME_MIB > 2048) throw new Error('--volume-mib: an integer 64-2048');

const HOST = `${NQN_UUID_PREFIX}${randomUUID()}`;
/** fio's span: the prefilled part of the volume. */
const FIO_MIB = VOLUME_MIB - 8;
/** Far above anything this bed does (it does thousands of IOPS at best): the buckets never empty. */
const GENEROUS_IOPS = 1_000_000;
const NONE: PolicyLimit = { kind: 'limitIOPS', read: 0, write: 0 };
/** Runs of one figure before this bed's stalls fail the bench; a run this much longer than its job stood still. */
const FIO_ATTEMPTS = 5;
const STALL_SECONDS = 25;
const GENEROUS: PolicyLimit = { kind: 'limitIOPS', read: GENEROUS_IOPS, write: GENEROUS_IOPS };

const started = Date.now();
const say = (message: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(7)} s] ${message}`);
const median = (xs: readonly number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length === 0 ? NaN : sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const pct = (value: number, baseline: number) => `${value >= baseline ? '+' : ''}${(((value - baseline) / baseline) * 100).toFixed(1)} %`;
async function step<T>(label: string, timeoutMs: number, work: () => Promise<T>): Promise<T> {
  const t = performance.now();
  const result = await withTimeout(work(), timeoutMs, label);
  say(`${label}: ${((performance.now() - t) / 1000).toFixed(2)} s`);
  return result;
}

const bed = emptyQosBed();
const { api } = adminApi(() => bed.plane!);
const persistDir = mkdtempSync(join(tmpdir(), 'strata-bench-qos-'));
const results: string[] = [];
const record = (line: string) => {
  results.push(line);
  say(line);
};

let volume: Volume;
let sizeBytes = 0n;
let device = '';
let policyUUID = '';
const host = () => bed.initiator!;
async function primaryGuest() {
  const primary = (await api<Volume>('GET', `/volumes/${volume.UUID}`)).primaryNodeUUID;
  const found = bed.storage.find((s) => s.nodeUUID() === primary);
  if (!found) throw new Error(`no storage guest serves the primary ${primary}`);
  return found.guest;
}

/**
 * Waits until the API and the primary's kernel say `expected` is enforced (qos-bed.ts,
 * waitEnforced). Returns the seconds from `since` (the request) to the API's word.
 */
async function enforced(expected: QosLimits, since: number): Promise<number> {
  const apiSaidAt = await waitEnforced({ api, policyUUID, volumeUUID: volume.UUID, expected, primaryGuest });
  return (apiSaidAt - since) / 1000;
}

/** Sets the policy's limit live (PUT /policies/{UUID}) and waits until it is enforced; the seconds that took. */
async function setLimit(limit: PolicyLimit): Promise<number> {
  const since = Date.now();
  await api('PUT', `/policies/${policyUUID}`, { qoSRateLimitPolicy: policyLimitBody(limit) });
  return enforced(volumeQosLimits(limit, sizeBytes), since);
}

/** Runs measured again because a guest's kernel logged a stall meanwhile (docs/e2e.md, "Stalls"). */
const stalledRuns: string[] = [];

/** A figure from a run no guest stalled in (qos-bed.ts runFioUnstalled: up to FIO_ATTEMPTS runs). */
async function fio(job: Omit<FioJob, 'seconds' | 'sizeMiB'>, what: string): Promise<FioSide> {
  const onStall = (line: string) => {
    stalledRuns.push(`${line} (${what})`);
    say(`  ${line}; measured again`);
  };
  const r = await step(`fio ${job.rw} ${job.bs} (${what})`, FIO_ATTEMPTS * (FIO_SECONDS + 120) * 1000, () =>
    runFioUnstalled({ host: host(), device, job: { ...job, seconds: FIO_SECONDS, sizeMiB: FIO_MIB }, watched: [host(), ...bed.storage.map((s) => s.guest)], attempts: FIO_ATTEMPTS, stallSeconds: STALL_SECONDS, onStall }),
  );
  say(`  ${Math.round(r.iops)} IOPS, ${(r.bytesPerSecond / BYTES_PER_MB).toFixed(2)} MB/s, clat mean ${r.meanMs.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms (load ${loadavg()[0]!.toFixed(1)})`);
  return r;
}

// ---- figure 1: the stage's cost ----------------------------------------------------------------------
type Stage = 'none' | 'generous';
const ORDER: readonly Stage[] = ['none', 'generous', 'generous', 'none'];
const READ4K = { rw: 'randread', bs: '4k' } as const;
const WRITE4K = { rw: 'randwrite', bs: '4k' } as const;
/** The unthrottled 4 KiB figures of the cost rounds (the accuracy part's baselines). */
const unthrottled = { read: [] as FioSide[], write: [] as FioSide[] };

async function benchCost(): Promise<void> {
  const runs: Record<Stage, { read: FioSide[]; write: FioSide[] }> = { none: { read: [], write: [] }, generous: { read: [], write: [] } };
  let current: Stage | undefined;
  const applied: number[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const line: string[] = [];
    for (const stage of ORDER) {
      if (stage !== current) {
        const seconds = await step(`policy → ${stage}`, 180_000, () => setLimit(stage === 'none' ? NONE : GENEROUS));
        applied.push(seconds);
        current = stage;
      }
      const read = await fio(READ4K, `${stage}, round ${round}`);
      const write = await fio(WRITE4K, `${stage}, round ${round}`);
      runs[stage].read.push(read);
      runs[stage].write.push(write);
      line.push(`${stage} ${Math.round(read.iops)} r / ${Math.round(write.iops)} w`);
    }
    record(`cost round ${round} (IOPS, 4k QD16): ${line.join(', ')}`);
  }
  unthrottled.read.push(...runs.none.read);
  unthrottled.write.push(...runs.none.write);
  for (const side of ['read', 'write'] as const) {
    const of = (stage: Stage, key: keyof FioSide) => median(runs[stage][side].map((r) => r[key]));
    const [iops, base] = [of('generous', 'iops'), of('none', 'iops')];
    record(
      `cost, 4k random ${side}s QD16, medians of ${runs.none[side].length}: generous policy ${Math.round(iops)} IOPS vs none ${Math.round(base)} (×${(iops / base).toFixed(3)}, ${pct(iops, base)}); ` +
        `clat mean ${of('generous', 'meanMs').toFixed(2)} vs ${of('none', 'meanMs').toFixed(2)} ms (${pct(of('generous', 'meanMs'), of('none', 'meanMs'))}), ` +
        `p99 ${of('generous', 'p99Ms').toFixed(2)} vs ${of('none', 'p99Ms').toFixed(2)} ms (${pct(of('generous', 'p99Ms'), of('none', 'p99Ms'))}); ` +
        `each: generous ${runs.generous[side].map((r) => Math.round(r.iops)).join(' ')}, none ${runs.none[side].map((r) => Math.round(r.iops)).join(' ')}; ` +
        `target ≤ 10 % IOPS: ${iops >= base * 0.9 ? 'met' : 'MISSED'}`,
    );
  }
  record(`a policy change enforced (PUT → the API says Enforced, table checked): median ${median(applied).toFixed(1)} s, max ${Math.max(...applied).toFixed(1)} s over ${applied.length}`);
}

// ---- figure 2: accuracy of each limit kind --------------------------------------------------------------
/** Half of `value`, rounded down to a step, at least `min`: a limit the bed reaches, which leaves it room. */
const half = (value: number, step: number, min: number) => Math.max(min, Math.floor(value / 2 / step) * step);

async function benchAccuracy(): Promise<void> {
  await step('policy → none', 180_000, () => setLimit(NONE));
  if (unthrottled.read.length === 0) {
    unthrottled.read.push(await fio(READ4K, 'none'));
    unthrottled.write.push(await fio(WRITE4K, 'none'));
  }
  const read64 = await fio({ rw: 'randread', bs: '64k' }, 'none');
  const write64 = await fio({ rw: 'randwrite', bs: '64k' }, 'none');
  const readIops = median(unthrottled.read.map((r) => r.iops));
  const writeIops = median(unthrottled.write.map((r) => r.iops));
  const sizeGB = Number(sizeBytes) / 1e9;
  const readTarget = half(readIops, 10, 10);
  const writeTarget = half(writeIops, 10, 10);
  const cases: { what: string; limit: PolicyLimit; job: { rw: FioJob['rw']; bs: string }; unit: 'IOPS' | 'MB/s'; baseline: number }[] = [
    { what: 'read IOPS', limit: { kind: 'limitIOPS', read: readTarget, write: 0 }, job: READ4K, unit: 'IOPS', baseline: readIops },
    { what: 'write IOPS', limit: { kind: 'limitIOPS', read: 0, write: writeTarget }, job: WRITE4K, unit: 'IOPS', baseline: writeIops },
    { what: 'read MB/s', limit: { kind: 'limitBw', read: half(read64.bytesPerSecond / BYTES_PER_MB, 1, 1), write: 0 }, job: { rw: 'randread', bs: '64k' }, unit: 'MB/s', baseline: read64.bytesPerSecond / BYTES_PER_MB },
    { what: 'write MB/s', limit: { kind: 'limitBw', read: 0, write: half(write64.bytesPerSecond / BYTES_PER_MB, 1, 1) }, job: { rw: 'randwrite', bs: '64k' }, unit: 'MB/s', baseline: write64.bytesPerSecond / BYTES_PER_MB },
    // Per GB: the per-GB figure that gives about the same IOPS on this volume's size.
    { what: 'read IOPS per GB', limit: { kind: 'limitIOPSPerGB', read: Math.max(1, Math.round(readTarget / sizeGB)), write: 0 }, job: READ4K, unit: 'IOPS', baseline: readIops },
    { what: 'write IOPS per GB', limit: { kind: 'limitIOPSPerGB', read: 0, write: Math.max(1, Math.round(writeTarget / sizeGB)) }, job: WRITE4K, unit: 'IOPS', baseline: writeIops },
  ];
  for (const c of cases) {
    const expected = volumeQosLimits(c.limit, sizeBytes);
    const seconds = await step(`policy → ${c.what} ${JSON.stringify(policyLimitBody(c.limit))}`, 180_000, () => setLimit(c.limit));
    const r = await fio(c.job, c.what);
    const reading = c.job.rw === 'randread';
    const limit = c.unit === 'IOPS' ? (reading ? expected.readIops : expected.writeIops) : (reading ? expected.readBytesPerSecond : expected.writeBytesPerSecond) / BYTES_PER_MB;
    const measured = c.unit === 'IOPS' ? r.iops : r.bytesPerSecond / BYTES_PER_MB;
    const perGb = c.limit.kind === 'limitIOPSPerGB' ? ` (${reading ? c.limit.read : c.limit.write} per GB × ${sizeGB.toFixed(3)} GB)` : '';
    record(
      `accuracy, ${c.what}: measured ${measured.toFixed(c.unit === 'IOPS' ? 1 : 2)} ${c.unit} vs limit ${limit}${perGb}: error ${pct(measured, limit)}; ` +
        `unthrottled in this run ${c.baseline.toFixed(c.unit === 'IOPS' ? 0 : 2)} ${c.unit}; enforced ${seconds.toFixed(1)} s after the PUT`,
    );
  }
}

// ---- main ----------------------------------------------------------------------------------------------
async function main(): Promise<void> {
  say(`bench/qos: ${ROUNDS} round(s), fio ${FIO_SECONDS} s, a ${VOLUME_MIB} MiB 2-copy volume; load ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  await withTimeout(
    startQosBed(bed, {
      names: ['qosb-a', 'qosb-b'],
      serialTag: 'QB',
      hostName: 'qosb-host',
      driveMiB: Math.max(1024, VOLUME_MIB * 3),
      persistDir,
      // A long lease: a TCG guest running fio at QD16 misses keep-alives, and a failover would
      // move the primary (and its stage) in the middle of the figures.
      agentArgs: ['--reconcile-interval-seconds', '5', '--log-level', 'debug', '--lease-ttl-seconds', '60'],
      storageMemoryMiB: 768,
      hostMemoryMiB: 512,
      step: (label, work) => step(label, 600_000, work),
      api,
    }),
    1_200_000,
    'the bed',
  );
  const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'qos-bench', size: `${VOLUME_MIB}MiB`, replicaCount: 2, acl: { values: [HOST] } });
  volume = await step('create a 2-copy volume → Available', 360_000, () =>
    waitUntil(async () => {
      const v = await api<Volume>('GET', `/volumes/${created.UUID}`);
      if (v.state === 'Failed') throw new Error(`volume Failed: ${JSON.stringify(v)}`);
      return v.state === 'Available' && v.protectionState === 'FullyProtected' && v;
    }, 'volume Available', 300_000, 500),
  );
  const stored = JSON.parse((await bed.client!.get(keys.volume(volume.UUID)).string())!) as VolumeRecord;
  sizeBytes = BigInt(stored.sizeBytes);
  device = await step('connect a path to each node', 180_000, () =>
    connectPaths({
      host: host(),
      nodes: bed.storage.map((s, index) => ({ index, guest: s.guest })),
      port: stored.placement!.port,
      subsystemNQN: volumeSubsystemNQN(bed.subsystemNQN, volume.UUID),
      volumeUUID: volume.UUID,
      hostNQN: HOST,
      pathPort: (i, port) => qosBedPathPort(bed, i, port),
      keepAliveSeconds: 30,
    }),
  );
  await step(`prefill ${FIO_MIB} MiB`, 900_000, () => host().runOk(['dd', 'if=/dev/zero', `of=${device}`, 'bs=1M', `count=${FIO_MIB}`, 'oflag=direct', 'status=none'], { timeoutMs: 900_000 }));
  const policy = await api<{ UUID: string }>('POST', '/policies', { name: 'qos-bench', description: 'bench/qos', qoSRateLimitPolicy: policyLimitBody(GENEROUS) });
  policyUUID = policy.UUID;
  const attachedAt = Date.now();
  await step('attach the policy (PUT /volumes/{UUID}) → Available', 300_000, async () => {
    await api('PUT', `/volumes/${volume.UUID}`, { qosPolicyUUID: policyUUID });
    await waitUntil(async () => (await api<Volume>('GET', `/volumes/${volume.UUID}`)).state === 'Available', 'volume Available after the attach', 240_000, 500);
  });
  const attach = await step('the attached policy enforced', 180_000, () => enforced(volumeQosLimits(GENEROUS, sizeBytes), attachedAt));
  record(`attach (PUT /volumes/{UUID} qosPolicyUUID) → the API says Enforced, the table on ublk: ${attach.toFixed(1)} s`);

  if (!SKIP.has('cost')) await benchCost();
  if (!SKIP.has('accuracy')) await benchAccuracy();
  const primaryNow = (await api<Volume>('GET', `/volumes/${volume.UUID}`)).primaryNodeUUID;
  if (primaryNow !== volume.primaryNodeUUID) record(`the primary moved during the run (${volume.primaryNodeUUID} → ${primaryNow}): the figures span a failover`);
  record(`runs measured again after a stall of the bed (every figure above is from a run without one): ${stalledRuns.length}${stalledRuns.length > 0 ? `; ${stalledRuns.join('; ')}` : ''}`);
}

await runLabBench({
  name: 'bench/qos',
  bed: `TCG-emulated guests on a shared 2-core machine, ${labKernelLabel()}`,
  results,
  persistDir,
  main,
  running: () => ({ storage: bed.storage, ...(bed.initiator ? { initiator: bed.initiator } : {}), ...(bed.plane ? { plane: bed.plane } : {}) }),
  stopHost: async () => {
    bed.client?.close();
    await bed.etcd?.stop();
  },
  say,
});
