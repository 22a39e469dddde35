// bench/replication: replication on the real kernel (issue 11), each figure printed beside a
// baseline measured in the same run.
//
//   npm run bench:replication [-- --kills 5 --ttl 5 --short-ttl 4 --fio-seconds 20 --resync-mib 0,8,32,128 --bitmap-chunk-kib 1024 --l2 [--l2-kind tap|mcast]]
//
// Bed: a private etcd and the real control plane on this host; three storage guests running the
// real agent (dist/agent/main.js) on Debian's kernel (nvmet, md raid1, device-mapper, the NVMe/TCP
// initiator), one vCPU each, with drive images and agent state kept on this host so that a killed
// guest boots again as the same server with its data; one initiator guest playing the host with
// nvme-cli (native multipath) and fio. Networking as in test/e2e/replication.e2e.test.ts: every
// node is 10.0.2.2 to the others; each node's replication port (4421) is forwarded from its own
// host port and advertised as 10.0.2.2:<that port>; a volume's port is forwarded from a distinct
// host port per node (pathPort), and the host connects one path per node by hand.
// With --l2, the storage guests also share a private L2 segment (test/e2e/lab/link.ts:
// 192.168.77.11-13/24, MTU 9000; --l2-kind tap: a Linux bridge and taps, the default as root;
// mcast: QEMU's socket backend on a multicast group) and advertise their replication port on it,
// so a primary reaches its replicas guest to guest, not through slirp and the host. The host's
// paths to the volume stay on the user network (the same for 1, 2 and 3 copies).
// Everything runs under TCG (emulated CPUs) on a shared 2-core machine: absolute figures are slow
// and noisy; the baselines and ratios are the comparable part.
//
// Figures:
//  1. Write IOPS and latency of 1, 2 and 3 copies: fio randwrite 4k, iodepth 16, direct, libaio
//     on a 256 MiB volume each (prefilled), in the order 1 2 3 3 2 1. Baseline: 1 copy.
//  2. Failover pause seen by the host: test/e2e/scripts/acked-writes.py writes 4 KiB blocks with
//     O_DIRECT|O_DSYNC and logs each acknowledged one; the pause is the last acknowledged write
//     before the fault → the first after (the longest gap from the count acknowledged at the fault on).
//     Baseline: the longest gap between acknowledged writes in the same round before the fault.
//     Unplanned: SIGKILL of the primary's QEMU, with the agents' default lease TTL (10 s) and
//     with --short-ttl; the killed guest boots again and its copy rejoins before the next round.
//     Planned: SIGTERM of the primary's agent, started again after. Every round verifies every
//     acknowledged write reads back and no write failed.
//  3. Resync after a short outage: SIGKILL of a 1 GiB volume's replica, N MiB written through
//     the host meanwhile, the guest boots again; time from its node being Active again to its
//     copy rejoining the in-sync set. Baseline: the host's time to write those N MiB, and N = 0.
//
// Every step has a timeout; guests, etcd and the control plane are stopped at the end, also on
// error. Agent logs (debug: per-phase pass timings) and the control plane's are copied to
// $STRATA_E2E_LOG_DIR (default <tmpdir>/strata-e2e-logs) as bench-replication.<pid>.*.log.
import { mkdirSync, mkdtempSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { randomUUID } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { NQN_UUID_PREFIX, volumeSubsystemNQN } from '../lib/contract/nqn.js';
import { createEtcdClient } from '../lib/etcd/client.js';
import { keys } from '../lib/etcd/keys.js';
import type { ReplicaSetRecord, VolumeRecord } from '../lib/records.js';
import { startStorageGuest, type StorageGuest, type StorageGuestOptions } from '../test/e2e/cluster-lab.js';
import { connectPaths, startAckedWrites } from '../test/e2e/replication-host.js';
import { createPrivateSegment, freeLoopbackPort, freeLoopbackPortRange, prepareLab, startGuest, type Guest, type PrivateSegment, type SegmentKind } from '../test/e2e/lab/index.js';
import { withTimeout } from '../test/e2e/lab/util.js';
import { startEtcd, type TestEtcd } from '../test/helpers/etcd.js';
import { waitUntil } from '../test/helpers/wait.js';
import { startControlPlaneProcess, type ControlPlaneProcess } from '../test/helpers/processes.js';
import { runLabBench } from './lab-run.js';

const { values } = parseArgs({
  options: {
    kills: { type: 'string', default: '5' },
    'short-ttl': { type: 'string', default: '4' },
    /** The agents' lease TTL until the short-TTL phase (default: the agent's own default, 5 s). */
    ttl: { type: 'string', default: '' },
    'fio-seconds': { type: 'string', default: '20' },
    'resync-mib': { type: 'string', default: '0,8,32,128' },
    skip: { type: 'string', default: '' },
    /** The agents' md bitmap chunk (KiB) for the volumes this run creates; default: the agent's. */
    'bitmap-chunk-kib': { type: 'string', default: '' },
    /** Replication between the storage guests over a private L2 segment (see the header). */
    l2: { type: 'boolean', default: false },
    /** The segment's kind: tap (a bridge; root) or mcast; default tap as root, else mcast. */
    'l2-kind': { type: 'string', default: '' },
  },
});
const L2 = values.l2 === true;
const L2_KIND = (values['l2-kind'] || (process.getuid?.() === 0 ? 'tap' : 'mcast')) as SegmentKind;
if (L2_KIND !== 'tap' && L2_KIND !== 'mcast') throw new Error('--l2-kind: tap or mcast');
const KILLS = Number(values.kills);
const SHORT_TTL = Number(values['short-ttl']);
const FIO_SECONDS = Number(values['fio-seconds']);
const RESYNC_MIB = (values['resync-mib'] ?? '').split(',').filter(Boolean).map(Number);
/**
 * Parts to leave out (comma-separated): fio, unplanned, planned, resync; ttl or short-ttl: the
 * unplanned rounds at --ttl (before the agents restart with --short-ttl) or at --short-ttl.
 */
const SKIP = new Set((values.skip ?? '').split(',').filter(Boolean));
if (!Number.isInteger(KILLS) || KILLS < 1) throw new Error('--kills must be a positive integer');
if (!Number.isInteger(SHORT_TTL) || SHORT_TTL < 2) throw new Error('--short-ttl must be an integer of at least 2 (the agent\'s minimum)');
if (!(FIO_SECONDS > 0)) throw new Error('--fio-seconds must be positive');
if (RESYNC_MIB.some((n) => !Number.isInteger(n) || n < 0 || n > 512)) throw new Error('--resync-mib: integers 0-512');

const MiB = 1024 * 1024;
const HOST = `${NQN_UUID_PREFIX}${randomUUID()}`;
const FROM_GUESTS = '10.0.2.2';
const NAMES = ['bench-a', 'bench-b', 'bench-c'] as const;
const VOLUME_PORTS = 16;
const DRIVE_MIB = 4096;
const FIO_MIB = 256;
const FAILOVER_MIB = 256;
const RESYNC_VOLUME_MIB = 1024;
/** The agent's default lease TTL (agent/config.ts). */
const AGENT_DEFAULT_TTL = 5;
const TTL = values.ttl ? Number(values.ttl) : AGENT_DEFAULT_TTL;
if (!Number.isInteger(TTL) || TTL < 2) throw new Error('--ttl must be an integer of at least 2');

const started = Date.now();
const say = (message: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(7)} s] ${message}`);
const s2 = (seconds: number) => `${seconds.toFixed(2)} s`;
const ratio = (value: number, baseline: number) => (baseline > 0 ? `×${(value / baseline).toFixed(2)}` : '—');
const median = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : sorted[Math.floor((sorted.length - 1) / 2)]!;
};
async function step<T>(label: string, timeoutMs: number, work: () => Promise<T>): Promise<T> {
  const t = performance.now();
  const result = await withTimeout(work(), timeoutMs, label);
  say(`${label}: ${s2((performance.now() - t) / 1000)}`);
  return result;
}
const until = <T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs: number, intervalMs = 250): Promise<T> => waitUntil(probe, what, timeoutMs, intervalMs);

let etcd: TestEtcd | undefined;
let client: Etcd3 | undefined;
let plane: ControlPlaneProcess | undefined;
let initiator: Guest | undefined;
let segment: PrivateSegment | undefined;
const storage: StorageGuest[] = [];
const guestOptions: StorageGuestOptions[] = [];
/** Agent flags every start gets now (the lease TTL of the current phase). */
let agentFlags: string[] = values.ttl ? ['--lease-ttl-seconds', values.ttl] : [];
/** Volume ports forwarded to each node's guest (host port → guest port), re-added when it boots again. */
const forwards: Map<number, number>[] = NAMES.map(() => new Map());
const persistDir = mkdtempSync(join(tmpdir(), 'strata-bench-replication-'));
let portMin = 0;
let subsystemNQN = '';
const results: string[] = [];
const record = (line: string) => {
  results.push(line);
  say(line);
};

// ---- the API and etcd ---------------------------------------------------------------------------
interface Volume {
  UUID: string;
  name: string;
  state: string;
  protectionState: string;
  primaryNodeUUID: string;
  nodeList: string[];
}
async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${plane!.apiUrl}/api/v2${path}`, {
    method,
    headers: { Authorization: `Bearer ${plane!.adminToken()}`, 'Content-Type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return (text ? JSON.parse(text) : undefined) as T;
}
const getVolume = (uuid: string) => api<Volume>('GET', `/volumes/${uuid}`);
const replicaSet = async (uuid: string) => JSON.parse((await client!.get(keys.replicaSet(uuid)).string()) ?? 'null') as ReplicaSetRecord;
const volumePort = async (uuid: string) => (JSON.parse((await client!.get(keys.volume(uuid)).string())!) as VolumeRecord).placement!.port;
const nodeActive = async (uuid: string) => (await api<{ nodes: { UUID: string; state: string }[] }>('GET', '/nodes')).nodes.some((n) => n.UUID === uuid && n.state === 'Active');

/**
 * Creates a volume and waits until it is Available and FullyProtected. A volume that fails on the
 * known creation race (the primary's pass ran before a replica exported its copy: "waiting for
 * replica(s) ... to create the volume's mirror", reported as Failed and taken as final by the
 * controller) is deleted and replaced, up to 10 times, and counted: docs/benchmarks.md reports it.
 */
let creationRaces = 0;
async function createVolume(name: string, mib: number, replicaCount: number): Promise<Volume> {
  for (let attempt = 1; ; attempt++) {
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: attempt === 1 ? name : `${name}-${attempt}`, size: `${mib}MiB`, replicaCount, acl: { values: [HOST] } });
    const v = await until(`${name} Available`, async () => {
      const got = await getVolume(created.UUID);
      return (got.state === 'Failed' || (got.state === 'Available' && got.protectionState === 'FullyProtected')) && got;
    }, 300_000, 500);
    if (v.state !== 'Failed') return v;
    const reason = String(plane!.logs.find((l) => l['msg'] === 'volume failed' && l['volumeUUID'] === created.UUID)?.['reason'] ?? '(no reason logged)');
    if (attempt >= 10 || !/waiting for replica\(s\)/.test(reason)) throw new Error(`${name} Failed: ${reason}`);
    creationRaces += 1;
    say(`  ${name} Failed on the creation race (${reason}); deleted, creating another`);
    await api('DELETE', `/projects/default/volumes/${created.UUID}`);
  }
}

// ---- guests --------------------------------------------------------------------------------------
const host = () => initiator!;
const indexOf = (nodeUUID: string) => storage.findIndex((s) => s.nodeUUID() === nodeUUID);
const storageOf = (nodeUUID: string) => storage[indexOf(nodeUUID)]!;
const sh = async (guest: Guest, command: string, timeoutMs = 120_000) => (await guest.runOk(['sh', '-c', command], { timeoutMs })).stdout;
/** This host's port that reaches `port` on node i's guest. */
const pathPort = (i: number, port: number) => portMin + i * VOLUME_PORTS + (port - portMin);
const nqnOf = (uuid: string) => volumeSubsystemNQN(subsystemNQN, uuid);

/** Forwards the volume's port of each node holding a copy and connects the host to each path; returns the block device. */
async function connectAllPaths(volume: Volume): Promise<string> {
  const port = await volumePort(volume.UUID);
  const nodes = volume.nodeList.map((uuid) => ({ index: indexOf(uuid), guest: storageOf(uuid).guest }));
  for (const { index } of nodes) forwards[index]!.set(pathPort(index, port), port);
  return connectPaths({ host: host(), nodes, port, subsystemNQN: nqnOf(volume.UUID), volumeUUID: volume.UUID, hostNQN: HOST, pathPort });
}
/** Every path of the volume's subsystem on the host is a live controller (a returning node's path reconnected). */
async function allPathsLive(uuid: string, paths: number): Promise<boolean> {
  const out = await sh(host(), `for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = "${nqnOf(uuid)}" ] && cat $c/state; done`);
  const states = out.split('\n').filter(Boolean);
  return states.length === paths && states.every((s) => s === 'live');
}

/** Boots a killed storage guest again with its drives and identity, restores its forwards, starts its agent. */
async function rebootGuest(i: number): Promise<void> {
  const node = storage[i]!.nodeUUID();
  const rebooted = await startStorageGuest(guestOptions[i]!);
  storage[i] = rebooted;
  for (const [hostPort, guestPort] of forwards[i]!) await rebooted.guest.addHostForward(hostPort, guestPort);
  await rebooted.startAgent({ timeoutMs: 300_000, extraArgs: agentFlags });
  if (rebooted.nodeUUID() !== node) throw new Error(`${NAMES[i]} came back as ${rebooted.nodeUUID()}, not ${node}`);
}
async function killGuest(i: number): Promise<void> {
  process.kill(storage[i]!.guest.pid, 'SIGKILL');
  await storage[i]!.guest.exited;
}

/**
 * The failover pause in an acknowledged-write log: the longest gap between consecutive
 * acknowledgements from `from` on (the count acknowledged just before the fault, so the gap
 * holding the fault is among them: the last acknowledged write before it → the first after), and
 * the baseline, the longest gap before `from` in the same round. Clock-free: mapping this host's
 * fault time onto the initiator's clock picked a wrong gap once (0.33 s for a failover whose
 * promotion took 7.9 s): the initiator's clock drifts under load (TCG).
 */
function pauseAfter(times: number[], from: number): { pause: number; baseline: number } {
  if (from < 2 || from >= times.length) throw new Error(`no acknowledged write on both sides of the fault (${from} of ${times.length})`);
  let pause = 0;
  let baseline = 0;
  for (let k = 1; k < times.length; k++) {
    const gap = times[k]! - times[k - 1]!;
    if (k >= from) pause = Math.max(pause, gap);
    else baseline = Math.max(baseline, gap);
  }
  return { pause, baseline };
}

// ---- figure 1: write IOPS and latency ------------------------------------------------------------
interface FioResult {
  iops: number;
  meanMs: number;
  p99Ms: number;
}
async function fio(device: string): Promise<FioResult> {
  const out = await sh(host(), `fio --name=w --filename=${device} --rw=randwrite --bs=4k --iodepth=16 --direct=1 --ioengine=libaio --size=${FIO_MIB}M --runtime=${FIO_SECONDS} --time_based --ramp_time=2 --output-format=json`, (FIO_SECONDS + 120) * 1000);
  const write = (JSON.parse(out.slice(out.indexOf('{'))) as { jobs: { write: { iops: number; clat_ns: { mean: number; percentile: Record<string, number> } } }[] }).jobs[0]!.write;
  return { iops: write.iops, meanMs: write.clat_ns.mean / 1e6, p99Ms: (write.clat_ns.percentile['99.000000'] ?? NaN) / 1e6 };
}
async function benchWrites(): Promise<void> {
  const devices = new Map<number, string>();
  const volumes: Volume[] = [];
  for (const copies of [1, 2, 3]) {
    const volume = await step(`create a ${copies}-copy volume → Available`, 360_000, () => createVolume(`fio-${copies}`, FIO_MIB, copies));
    const device = await step(`connect ${volume.nodeList.length} path(s)`, 180_000, () => connectAllPaths(volume));
    await step(`prefill ${FIO_MIB} MiB`, 600_000, () => sh(host(), `dd if=/dev/zero of=${device} bs=1M count=${FIO_MIB} oflag=direct status=none`, 600_000));
    devices.set(copies, device);
    volumes.push(volume);
  }
  const runs = new Map<number, FioResult[]>();
  for (const copies of [1, 2, 3, 3, 2, 1]) {
    const r = await step(`fio randwrite, ${copies} cop${copies === 1 ? 'y' : 'ies'}`, (FIO_SECONDS + 180) * 1000, () => fio(devices.get(copies)!));
    say(`  ${Math.round(r.iops)} IOPS, mean ${r.meanMs.toFixed(1)} ms, p99 ${r.p99Ms.toFixed(1)} ms (load ${loadavg()[0]!.toFixed(1)})`);
    runs.set(copies, [...(runs.get(copies) ?? []), r]);
  }
  const mean = (copies: number, key: keyof FioResult) => runs.get(copies)!.reduce((sum, r) => sum + r[key], 0) / runs.get(copies)!.length;
  for (const copies of [1, 2, 3]) {
    const each = runs.get(copies)!.map((r) => Math.round(r.iops)).join(' / ');
    record(
      `write ${copies} cop${copies === 1 ? 'y ' : 'ies'}: ${Math.round(mean(copies, 'iops'))} IOPS (${each}) ${ratio(mean(copies, 'iops'), mean(1, 'iops'))} of 1 copy; ` +
        `latency mean ${mean(copies, 'meanMs').toFixed(1)} ms (${ratio(mean(copies, 'meanMs'), mean(1, 'meanMs'))}), p99 ${mean(copies, 'p99Ms').toFixed(1)} ms (${ratio(mean(copies, 'p99Ms'), mean(1, 'p99Ms'))})`,
    );
  }
  // Done with them: the host lets them go and they are deleted (no failovers of theirs in the later figures).
  for (const volume of volumes) {
    await host().run(['nvme', 'disconnect', '-n', nqnOf(volume.UUID)], { timeoutMs: 60_000 });
    await api('DELETE', `/projects/default/volumes/${volume.UUID}`);
  }
}

// ---- figure 2: failover pauses -------------------------------------------------------------------
interface Round {
  pause: number;
  baseline: number;
  promotedAfter: number;
  checked: number;
}
async function failoverRound(kind: 'unplanned' | 'planned', volume: Volume, device: string, tag: string): Promise<Round> {
  const set = await replicaSet(volume.UUID);
  const i = indexOf(set.primaryNodeUUID);
  const writes = startAckedWrites(host(), device, tag);
  await until('writes flowing', async () => (await writes.acked()) > 30, 120_000, 500);
  await sleep(3000);
  const ackedAtFault = await writes.acked();
  const faultAt = Date.now() / 1000;
  let stopped: Promise<void> = Promise.resolve();
  if (kind === 'unplanned') await killGuest(i);
  else stopped = storage[i]!.stopAgent('TERM', 180_000);
  stopped.catch(() => undefined);
  const promoted = await until('another copy promoted', async () => {
    const next = await replicaSet(volume.UUID);
    return next.epoch > set.epoch && next;
  }, 240_000);
  const promotedAfter = Date.now() / 1000 - faultAt;
  await writes.resumed(0, 30); // by count: the initiator's clock drifts from this host's under TCG
  await sleep(1000);
  const result = await writes.stopAndVerify();
  if (result.errors) throw new Error(`${tag}: a write failed on the host: ${result.errors}`);
  if (result.bad > 0) throw new Error(`${tag}: ${result.bad} acknowledged writes did not read back`);
  const { pause, baseline } = pauseAfter(result.times, ackedAtFault);
  say(`  ${kind} ${tag}: pause ${s2(pause)} (longest gap before the fault ${s2(baseline)}); promotion seen ${s2(promotedAfter)} after the fault; ${NAMES[i]} → ${NAMES[indexOf(promoted.primaryNodeUUID)]}; ${result.checked} acknowledged writes verified`);
  // The old primary comes back and its copy rejoins before the next round.
  if (kind === 'unplanned') await step(`  ${NAMES[i]} boots again`, 600_000, () => rebootGuest(i));
  else await step(`  ${NAMES[i]}'s agent starts again`, 600_000, async () => {
    await stopped;
    await storage[i]!.startAgent({ timeoutMs: 300_000, extraArgs: agentFlags });
    await until('node Active', () => nodeActive(storage[i]!.nodeUUID()), 300_000);
  });
  await step('  its copy rejoins; every host path live', 900_000, () =>
    until('rejoined', async () => (await replicaSet(volume.UUID)).inSync.length === volume.nodeList.length && (await allPathsLive(volume.UUID, volume.nodeList.length)), 900_000, 1000),
  );
  return { pause, baseline, promotedAfter, checked: result.checked };
}
function summarize(label: string, rounds: Round[], target: number): void {
  const pauses = rounds.map((r) => r.pause);
  record(
    `${label}: pause median ${s2(median(pauses))}, max ${s2(Math.max(...pauses))} over ${rounds.length} (${pauses.map((p) => p.toFixed(2)).join(', ')}); ` +
      `baseline (longest gap before the fault) median ${s2(median(rounds.map((r) => r.baseline)))}; promotion seen median ${s2(median(rounds.map((r) => r.promotedAfter)))} after the fault; ` +
      `target ≤ ${target} s: ${Math.max(...pauses) <= target ? 'met' : 'MISSED'}`,
  );
}
/** Restarts every agent with the given flags, one at a time (a primary hands its volumes over), each copy rejoining before the next. */
async function restartAgents(flags: string[], volume: Volume): Promise<void> {
  agentFlags = flags;
  for (const s of storage) {
    await s.stopAgent('TERM', 180_000);
    await s.startAgent({ timeoutMs: 300_000, extraArgs: agentFlags });
    // Registered again (presence), or the next stop finds no live copy to hand over to.
    await until('node Active', () => nodeActive(s.nodeUUID()), 300_000);
    await until('every copy in sync', async () => (await replicaSet(volume.UUID)).inSync.length === volume.nodeList.length && (await allPathsLive(volume.UUID, volume.nodeList.length)), 900_000, 1000);
  }
}

// ---- figure 3: resync after a short outage ---------------------------------------------------------
async function benchResync(): Promise<void> {
  const volume = await step(`create a ${RESYNC_VOLUME_MIB} MiB 2-copy volume → Available`, 360_000, () => createVolume('resync', RESYNC_VOLUME_MIB, 2));
  const device = await step('connect its paths', 180_000, () => connectAllPaths(volume));
  for (const [k, mib] of RESYNC_MIB.entries()) {
    const set = await replicaSet(volume.UUID);
    const replica = set.inSync.find((n) => n !== set.primaryNodeUUID)!;
    const i = indexOf(replica);
    await killGuest(i);
    await step(`  ${NAMES[i]} (replica) killed; recorded out of sync`, 120_000, () => until('out of sync', async () => !(await replicaSet(volume.UUID)).inSync.includes(replica), 120_000));
    const seek = (k * 200) % (RESYNC_VOLUME_MIB - 128);
    const t = performance.now();
    if (mib > 0) await sh(host(), `dd if=/dev/urandom of=${device} bs=1M count=${mib} seek=${seek} oflag=direct status=none`, 900_000);
    const writeSeconds = (performance.now() - t) / 1000;
    await step(`  ${NAMES[i]} boots again`, 600_000, () => rebootGuest(i));
    await until('node Active', () => nodeActive(replica), 300_000);
    const returnedAt = performance.now();
    await until('rejoined', async () => (await replicaSet(volume.UUID)).inSync.includes(replica), 900_000, 250);
    const resync = (performance.now() - returnedAt) / 1000;
    // Arrays without a bitmap (the node's pool) say 0.
    const chunk = (await sh(storageOf(set.primaryNodeUUID).guest, 'cat /sys/block/md*/md/bitmap/chunksize 2>/dev/null | grep -vx 0 | sort -u | tr "\\n" " "')).trim();
    record(`resync after ${mib} MiB written during the outage: ${s2(resync)} from the node Active again to the copy in sync (host wrote it in ${s2(writeSeconds)}; md bitmap chunk ${chunk || '?'} bytes)`);
    await until('host path live', () => allPathsLive(volume.UUID, volume.nodeList.length), 300_000, 1000);
  }
}

// ---- main ----------------------------------------------------------------------------------------------
async function main(): Promise<void> {
  say(`bench/replication: kills ${KILLS}, short TTL ${SHORT_TTL} s, fio ${FIO_SECONDS} s, resync ${RESYNC_MIB.join('/')} MiB; replication ${L2 ? `over a private L2 segment (${L2_KIND})` : 'through the user network (slirp, 10.0.2.2)'}; load ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  if (L2) segment = createPrivateSegment(L2_KIND);
  const lab = await step('lab', 600_000, () => prepareLab());
  etcd = await startEtcd();
  client = createEtcdClient([etcd.endpoint]);
  portMin = await freeLoopbackPortRange(VOLUME_PORTS * NAMES.length);
  plane = await startControlPlaneProcess({
    etcdEndpoint: etcd.endpoint,
    extraArgs: ['--volume-port-min', String(portMin), '--volume-port-max', String(portMin + VOLUME_PORTS - 1), '--creating-timeout-seconds', '300'],
  });
  subsystemNQN = (await api<{ subsystemNQN: string }>('GET', '/cluster')).subsystemNQN;
  const grpcPort = Number(plane.grpcEndpoint.split(':')[1]);
  const booted = await step('boot three storage guests and the host', 900_000, () =>
    Promise.allSettled([
      ...NAMES.map(async (name, i) => {
        const stateDir = join(persistDir, `${name}-state`);
        mkdirSync(stateDir, { recursive: true });
        guestOptions[i] = {
          name,
          drives: [{ serial: `STRATA-B${i}-DATA0`, sizeMiB: DRIVE_MIB, image: join(persistDir, `${name}-data0.img`) }],
          dataSerials: [`STRATA-B${i}-DATA0`],
          etcdPort: etcd!.clientPort,
          controlPlaneGrpcPort: grpcPort,
          advertiseAddress: FROM_GUESTS,
          ...(segment ? { privateLink: { segment, address: `192.168.77.${11 + i}/24` } } : { replicationHostPort: await freeLoopbackPort() }),
          volumePortMin: portMin,
          volumePortMax: portMin + VOLUME_PORTS - 1,
          agentStateDir: stateDir,
          agentLogFile: join(persistDir, 'logs', `${name}.agent.log`),
          agentArgs: ['--log-level', 'debug', ...(values['bitmap-chunk-kib'] ? ['--replica-bitmap-chunk-kib', values['bitmap-chunk-kib']] : [])],
          memoryMiB: 1024,
          lab,
          bootTimeoutMs: 300_000,
        };
        return startStorageGuest(guestOptions[i]);
      }),
      startGuest({ name: 'bench-host', memoryMiB: 768, lab, bootTimeoutMs: 300_000 }),
    ]),
  );
  for (const r of booted.slice(0, NAMES.length)) if (r.status === 'fulfilled') storage.push(r.value as StorageGuest);
  storage.sort((x, y) => NAMES.indexOf(x.name as (typeof NAMES)[number]) - NAMES.indexOf(y.name as (typeof NAMES)[number]));
  const last = booted[NAMES.length];
  if (last?.status === 'fulfilled') initiator = last.value as Guest;
  for (const r of booted) if (r.status === 'rejected') throw r.reason;
  await step('start three agents; three nodes Active', 600_000, async () => {
    await Promise.all(storage.map((s) => s.startAgent({ timeoutMs: 300_000, extraArgs: agentFlags })));
    await until('three nodes Active', async () => (await api<{ nodes: { state: string; statistics: { managedPhysicalStorage: string } }[] }>('GET', '/nodes')).nodes.filter((n) => n.state === 'Active' && BigInt(n.statistics.managedPhysicalStorage) > 0n).length === 3, 300_000, 1000);
  });

  if (!SKIP.has('fio')) await benchWrites();

  if (!SKIP.has('unplanned') || !SKIP.has('planned')) {
    const volume = await step('create a 2-copy volume for failovers → Available', 360_000, () => createVolume('failover', FAILOVER_MIB, 2));
    const device = await step('connect its paths', 180_000, () => connectAllPaths(volume));
    if (!SKIP.has('unplanned') && !SKIP.has('ttl')) {
      const rounds: Round[] = [];
      for (let k = 1; k <= KILLS; k++) rounds.push(await step(`unplanned round ${k} (lease TTL ${TTL} s)`, 1_800_000, () => failoverRound('unplanned', volume, device, `kill-ttl${TTL}-${k}`)));
      summarize(`unplanned failover, SIGKILL of the primary's QEMU, lease TTL ${TTL} s${TTL === AGENT_DEFAULT_TTL ? ' (default)' : ''}`, rounds, 6);
    }
    // Planned failover does not wait for a lease (the stopping agent revokes it); its restarts switch the agents to the short TTL.
    await step(`every agent restarted with --lease-ttl-seconds ${SHORT_TTL}`, 1_800_000, () => restartAgents(['--lease-ttl-seconds', String(SHORT_TTL)], volume));
    if (!SKIP.has('planned')) {
      const rounds: Round[] = [];
      for (let k = 1; k <= KILLS; k++) rounds.push(await step(`planned round ${k}`, 1_800_000, () => failoverRound('planned', volume, device, `stop-${k}`)));
      summarize('planned failover, SIGTERM of the primary\'s agent', rounds, 1);
    }
    if (!SKIP.has('unplanned') && !SKIP.has('short-ttl')) {
      const rounds: Round[] = [];
      for (let k = 1; k <= KILLS; k++) rounds.push(await step(`unplanned round ${k} (lease TTL ${SHORT_TTL} s)`, 1_800_000, () => failoverRound('unplanned', volume, device, `kill-ttl${SHORT_TTL}-${k}`)));
      summarize(`unplanned failover, SIGKILL of the primary's QEMU, lease TTL ${SHORT_TTL} s`, rounds, 6);
    }
  }

  if (!SKIP.has('resync')) await benchResync();
  if (creationRaces > 0) record(`volumes that failed at creation on the replica-export race and were replaced: ${creationRaces}`);
}

await runLabBench({
  name: 'bench/replication',
  bed: `TCG-emulated guests on a shared 2-core machine; replication ${L2 ? `over a private L2 segment, ${L2_KIND}` : 'through slirp'}`,
  results,
  persistDir,
  main,
  running: () => ({ storage, ...(initiator ? { initiator } : {}), ...(plane ? { plane } : {}) }),
  stopHost: async () => {
    client?.close();
    await etcd?.stop().catch(() => undefined);
    segment?.close();
  },
  say,
});
