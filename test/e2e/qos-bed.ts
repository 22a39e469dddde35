// The QoS bed (issue 18), shared by test/e2e/qos.e2e.test.ts and bench/qos.ts: a private etcd and
// the real control plane on this host, two storage guests running the real agent, one initiator
// guest (the host) that connects one path per node (replication-host.ts) and runs fio. Plus the
// looks both take at the primary: which device its dm table points at, its ublk devices, fio; and
// the policy API's side: a limit's body, the wait until the API and the kernel say it is enforced.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import type { NodeWire } from '../../control-plane/nodes/nodes-service.js';
import type { VolumeEnforcementWire } from '../../control-plane/policies/qos-enforcement.js';
import { isUnlimited, sameLimits, type PolicyLimit, type QosLimits } from '../../lib/contract/qos.js';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { startControlPlaneProcess, type ControlPlaneProcess } from '../helpers/processes.js';
import { waitUntil } from '../helpers/wait.js';
import { startStorageGuest, type StorageGuest } from './cluster-lab.js';
import { freeLoopbackPort, freeLoopbackPortRange, prepareLab, startGuest, type Guest } from './lab/index.js';
import { markKernelLogs, stallLinesSince } from './lab/stalls.js';

const FROM_GUESTS = '10.0.2.2';
export const QOS_BED_VOLUME_PORTS = 16;

/**
 * What is running, filled as it starts: the caller stops whatever is set, also when the start
 * failed half-way (a guest booted while another did not).
 */
export interface QosBed {
  etcd?: TestEtcd;
  client?: Etcd3;
  plane?: ControlPlaneProcess;
  readonly storage: StorageGuest[];
  initiator?: Guest;
  subsystemNQN: string;
  portMin: number;
}

export function emptyQosBed(): QosBed {
  return { storage: [], subsystemNQN: '', portMin: 0 };
}

/** This host's port that reaches `port` on node i's guest (every node is 10.0.2.2 to the host). */
export function qosBedPathPort(bed: QosBed, i: number, port: number): number {
  return bed.portMin + i * QOS_BED_VOLUME_PORTS + (port - bed.portMin);
}

export interface QosBedOptions {
  /** Storage guests' names; their drives' serials are `STRATA-<serialTag><i>-DATA0`. */
  readonly names: readonly string[];
  readonly serialTag: string;
  readonly hostName: string;
  readonly driveMiB: number;
  /** Drive images, agent state and logs go below it. */
  readonly persistDir: string;
  readonly agentArgs: readonly string[];
  readonly storageMemoryMiB: number;
  readonly hostMemoryMiB: number;
  /** Times each labelled part (the e2e's StepTimer, the bench's step()). */
  readonly step: <T>(label: string, work: () => Promise<T>) => Promise<T>;
  /** The admin API of bed.plane. */
  readonly api: <T>(method: string, path: string, body?: unknown) => Promise<T>;
}

/** Starts etcd, the control plane, the guests and the agents; resolves once every node is Active with capacity. */
export async function startQosBed(bed: QosBed, o: QosBedOptions): Promise<void> {
  const lab = await o.step('lab', () => prepareLab());
  bed.etcd = await startEtcd();
  bed.client = createEtcdClient([bed.etcd.endpoint]);
  bed.portMin = await freeLoopbackPortRange(QOS_BED_VOLUME_PORTS * o.names.length);
  const portMax = bed.portMin + QOS_BED_VOLUME_PORTS - 1;
  bed.plane = await startControlPlaneProcess({ etcdEndpoint: bed.etcd.endpoint, extraArgs: ['--volume-port-min', String(bed.portMin), '--volume-port-max', String(portMax), '--creating-timeout-seconds', '300'] });
  bed.subsystemNQN = (await o.api<{ subsystemNQN: string }>('GET', '/cluster')).subsystemNQN;
  const grpcPort = Number(bed.plane.grpcEndpoint.split(':')[1]);
  const etcdPort = bed.etcd.clientPort;
  const started = await o.step(`boot ${o.names.length + 1} guests`, () =>
    Promise.allSettled([
      ...o.names.map(async (name, i) => {
        const stateDir = join(o.persistDir, `${name}-state`);
        mkdirSync(stateDir, { recursive: true });
        return startStorageGuest({
          name,
          drives: [{ serial: `STRATA-${o.serialTag}${i}-DATA0`, sizeMiB: o.driveMiB, image: join(o.persistDir, `${name}-data0.img`) }],
          dataSerials: [`STRATA-${o.serialTag}${i}-DATA0`],
          etcdPort,
          controlPlaneGrpcPort: grpcPort,
          advertiseAddress: FROM_GUESTS,
          replicationHostPort: await freeLoopbackPort(),
          volumePortMin: bed.portMin,
          volumePortMax: portMax,
          agentStateDir: stateDir,
          agentLogFile: join(o.persistDir, 'logs', `${name}.agent.log`),
          agentArgs: o.agentArgs,
          memoryMiB: o.storageMemoryMiB,
          lab,
          bootTimeoutMs: 240_000,
        });
      }),
      startGuest({ name: o.hostName, memoryMiB: o.hostMemoryMiB, lab, bootTimeoutMs: 240_000 }),
    ]),
  );
  for (const r of started.slice(0, o.names.length)) if (r.status === 'fulfilled') bed.storage.push(r.value as StorageGuest);
  const last = started[o.names.length];
  if (last?.status === 'fulfilled') bed.initiator = last.value as Guest;
  for (const r of started) if (r.status === 'rejected') throw r.reason;
  await o.step(`start ${o.names.length} agents`, () => Promise.all(bed.storage.map((s) => s.startAgent({ timeoutMs: 240_000 }))));
  await o.step(`${o.names.length} nodes Active`, () =>
    waitUntil(async () => {
      const list = (await o.api<{ nodes: NodeWire[] }>('GET', '/nodes')).nodes;
      return list.length === o.names.length && list.every((n) => n.state === 'Active' && BigInt(n.statistics.managedPhysicalStorage) > 0n);
    }, `${o.names.length} nodes Active with capacity in the API`, 180_000, 500),
  );
}

const sh = async (guest: Guest, command: string, timeoutMs = 60_000) => (await guest.runOk(['sh', '-c', command], { timeoutMs })).stdout;

/** The device the volume's dm table points at on `guest` (`ublkbN`, `md...`), read from the kernel. */
export async function dmTarget(guest: Guest, volumeUUID: string): Promise<string> {
  return (await sh(guest, `d=$(dmsetup table strata-${volumeUUID} | awk '{print $4}'); basename $(readlink -f /sys/dev/block/$d)`)).trim();
}

export async function ublkDevices(guest: Guest): Promise<string[]> {
  return (await sh(guest, 'ls /sys/block | grep ^ublkb || true')).split('\n').filter(Boolean);
}

export interface FioSide {
  readonly iops: number;
  readonly bytesPerSecond: number;
  /** Completion latency (fio's clat), milliseconds. */
  readonly meanMs: number;
  readonly p99Ms: number;
}

export interface FioJob {
  readonly rw: 'randread' | 'randwrite' | 'read' | 'write';
  readonly bs: string;
  readonly seconds: number;
  /** The span of the device fio uses. */
  readonly sizeMiB: number;
}

/** fio on the host's device: QD16, direct, libaio, a 2 s ramp (the buckets' first second out); the side the job did. */
export async function runFio(host: Guest, device: string, job: FioJob): Promise<FioSide> {
  const out = await sh(
    host,
    `fio --name=q --filename=${device} --rw=${job.rw} --bs=${job.bs} --iodepth=16 --direct=1 --ioengine=libaio --size=${job.sizeMiB}M --runtime=${job.seconds} --time_based --ramp_time=${FIO_RAMP_SECONDS} --output-format=json`,
    (job.seconds + 180) * 1000,
  );
  type Side = { iops: number; bw_bytes: number; clat_ns: { mean: number; percentile?: Record<string, number> } };
  const result = (JSON.parse(out.slice(out.indexOf('{'))) as { jobs: { read: Side; write: Side }[] }).jobs[0]!;
  const side = job.rw.endsWith('read') ? result.read : result.write;
  return { iops: side.iops, bytesPerSecond: side.bw_bytes, meanMs: side.clat_ns.mean / 1e6, p99Ms: (side.clat_ns.percentile?.['99.000000'] ?? NaN) / 1e6 };
}

/** fio's ramp before its measured part (runFio). */
export const FIO_RAMP_SECONDS = 2;

export interface UnstalledFio {
  readonly host: Guest;
  readonly device: string;
  readonly job: FioJob;
  /** Every guest whose kernel can stall the path: the host and the storage guests. */
  readonly watched: readonly Guest[];
  /** Runs before the stalls fail the measurement. */
  readonly attempts: number;
  /** A run this much longer than its job stood still too (a stall straddling its end). */
  readonly stallSeconds: number;
  /** Told each stalled run, in a line. */
  readonly onStall?: (line: string) => void;
}

/** The first watched guest whose kernel died (Guest.kernelCrash()), undefined while all live. */
function crashOf(guests: readonly Guest[]): string | undefined {
  for (const guest of guests) {
    const crash = guest.kernelCrash();
    if (crash) return crash;
  }
  return undefined;
}

/**
 * runFio until a run no watched guest's kernel logged a stall in (lab/stalls.ts: a timed-out
 * command, a reset, an expired keep-alive, a reconnect, an I/O error) and whose wall time is its
 * job's plus at most `stallSeconds`: this bed's emulated drives lose a batch of commands at times
 * (docs/e2e.md, "Stalls"), and a rate measured across one measures the bed. Throws with the
 * kernels' lines after `attempts` stalled runs in a row.
 */
export async function runFioUnstalled(o: UnstalledFio): Promise<FioSide> {
  const { job } = o;
  const stalls: string[] = [];
  for (let attempt = 1; attempt <= o.attempts; attempt++) {
    const marks = await markKernelLogs(o.watched);
    const started = Date.now();
    const side = await runFio(o.host, o.device, job);
    const wallSeconds = (Date.now() - started) / 1000;
    const crash = crashOf(o.watched);
    if (crash) throw new Error(`fio ${job.rw} ${job.bs}: a guest's kernel died during the run: ${crash}`);
    const lines = await stallLinesSince(marks);
    if (wallSeconds <= job.seconds + FIO_RAMP_SECONDS + o.stallSeconds && lines.length === 0) return side;
    const line = `fio ${job.rw} ${job.bs} stalled (attempt ${attempt}): ${wallSeconds.toFixed(0)} s for a ${job.seconds + FIO_RAMP_SECONDS} s job, ${side.iops.toFixed(1)} IOPS; ${lines.length} kernel lines${lines[0] ? `, first: ${lines[0]}` : ''}`;
    o.onStall?.(line);
    stalls.push(line, ...lines.slice(0, 8));
  }
  throw new Error(`fio ${job.rw} ${job.bs} stalled ${o.attempts} times in a row:\n${stalls.join('\n')}`);
}

/** A policy's limit as the API's `qoSRateLimitPolicy` member (0 = unlimited). */
export function policyLimitBody(limit: PolicyLimit): Record<string, Record<string, number>> {
  switch (limit.kind) {
    case 'limitIOPS':
      return { limitIOPS: { readIOPSLimit: limit.read, writeIOPSLimit: limit.write } };
    case 'limitBw':
      return { limitBw: { readBWLimit: limit.read, writeBWLimit: limit.write } };
    case 'limitIOPSPerGB':
      return { limitIOPSPerGB: { readIOPSPerGBLimit: limit.read, writeIOPSPerGBLimit: limit.write } };
  }
}

export interface EnforcedWait {
  readonly api: <T>(method: string, path: string, body?: unknown) => Promise<T>;
  readonly policyUUID: string;
  readonly volumeUUID: string;
  readonly expected: QosLimits;
  /** The guest of the volume's primary now. */
  readonly primaryGuest: () => Promise<Guest>;
  /** Extra text for a timeout's message (agents' logs). */
  readonly context?: () => string;
  /** What the table points at without a stage: the array (the default), a single copy's loop device. */
  readonly unstaged?: RegExp;
}

/**
 * Until the API says the volume's primary enforces `expected` (its entry in
 * `GET /policies/{UUID}/enforcement` Enforced with these limits, the policy Active), then until the
 * primary's dm table points at a ublk device (at the array, or a single copy's loop device, with no
 * ublk device, when `expected` is unlimited: no stage). The report is sent after the table's reload, so the second wait is
 * short; its grace covers a server still deleting its device after the switch. Resolves with the
 * time (Date.now()) the API first said so.
 */
export async function waitEnforced(w: EnforcedWait): Promise<number> {
  let last: VolumeEnforcementWire | undefined;
  let lastState = '';
  await waitUntil(
    async () => {
      const { volumes } = await w.api<{ volumes: VolumeEnforcementWire[] }>('GET', `/policies/${w.policyUUID}/enforcement`);
      last = volumes.find((v) => v.UUID === w.volumeUUID);
      lastState = (await w.api<{ state: string }>('GET', `/policies/${w.policyUUID}`)).state;
      return last?.state === 'Enforced' && sameLimits(last.limits, w.expected) && lastState === 'Active';
    },
    () => `the volume's limits Enforced and the policy Active (last: ${JSON.stringify(last)}, policy ${lastState})${w.context ? `\n${w.context()}` : ''}`,
    120_000,
    250,
  );
  const apiSaidAt = Date.now();
  const guest = await w.primaryGuest();
  const stage = !isUnlimited(w.expected);
  let seen = '';
  await waitUntil(
    async () => {
      const target = await dmTarget(guest, w.volumeUUID);
      const ublk = await ublkDevices(guest);
      // The stage's device runs without an I/O scheduler (strata-ublk sets it: native/README.md).
      const scheduler = stage && /^ublkb\d+$/.test(target) ? (await sh(guest, `cat /sys/block/${target}/queue/scheduler`)).trim() : '';
      seen = `dm table on ${target}, ublk devices: ${ublk.join(' ') || 'none'}${scheduler ? `, its scheduler: ${scheduler}` : ''}`;
      return stage ? /^ublkb\d+$/.test(target) && ublk.length === 1 && scheduler.includes('[none]') : (w.unstaged ?? /^md/).test(target) && ublk.length === 0;
    },
    () => `the primary's stack to match the API's Enforced ${JSON.stringify(w.expected)} (${seen})`,
    30_000,
    1000,
  );
  return apiSaidAt;
}
