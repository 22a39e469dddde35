// bench/datapath: the data path on the real kernel (a QEMU guest booting Debian's kernel, since
// this host's kernel has no nvmet), each figure printed beside a baseline measured in the same run.
//
//   npm run bench:datapath [-- --volumes 1000 --fio-seconds 15 --skip-fio --concurrency 16]
//
// Setup: a private etcd and the real control plane on this host; one storage guest (2 vCPUs, one
// sparse emulated NVMe drive the node manages) running the real agent (dist/agent/main.js), which
// advertises 127.0.0.1 and listens for volumes on 127.0.0.1 so that the NVMe/TCP initiator of the
// same guest (nvme-cli) connects over loopback. Volumes are created through the REST API.
//
// Figures:
//  1. POST /volumes → Available, and → a host-visible block device after `nvme connect` (found by
//     the namespace UUID, test/e2e/scripts/nvme-ns-by-uuid.sh). Baseline: the same file-backed
//     export done by hand (test/e2e/scripts/nvmet-export.sh) and connected the same way.
//  2. Configfs operations and wall time (POST → Available) to add one volume when 1, 100 and
//     --volumes exist, counted from the agent's debug log ("configfs operation applied").
//     Baseline: the 1-volume figure.
//  3. Agent restart (SIGKILL, start, until its first volume report, which lists every volume)
//     at the same counts, with the configfs operations that restart applied (expected 0) and
//     every volume still Available. Baseline: the restart at the first level (2 volumes).
//  4. fio 4K random read and random write IOPS through a Strata volume vs a hand-made export of
//     the same kind of backing: a sparse NOCOW file on the same btrfs pool, exported by nvmet
//     with its default O_DIRECT file path (buffered_io=0), same size, prefilled the same way,
//     over the same loopback NVMe/TCP. Strata serves the volume through its device-mapper stage
//     (dm linear onto a loop device over the file, direct I/O: docs/datapath.md, "Single-copy
//     volumes"), so the ratio shows what that stage, Strata's export (ANA group, controller-ID
//     window, ACLs, nftables on its port) and the agent cost, not a difference of storage. After
//     the prefill, a sync and 35 s (btrfs' commit of the prefill stalled the first run); then per
//     kind the order S H H S, to even out drift; the means are compared. A run in which the
//     guest's kernel logged a timed-out command, a reset, an expired keep-alive or a reconnect
//     (the lab's emulated drive loses batches at times: docs/e2e.md, "Stalls") is marked `*`
//     with its lines printed, and left out of its path's mean where another run of it was clean.
//
// Everything runs on this 2-core machine under TCG: absolute figures are slow and noisy; the
// ratios are the point. Every step has a timeout; the guest, etcd and the control plane are
// stopped at the end, also on error. The agent's log is copied to $STRATA_E2E_LOG_DIR (default
// <tmpdir>/strata-e2e-logs) as bench-datapath.<pid>.agent.log, the control plane's beside it.
// The agent runs with a 60 s lease and its systemd unit's open-file limit (see startAgent and
// docs/benchmarks.md for what the defaults did under this load).
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { ALLOW_ANY, ALLOW_NONE } from '../lib/contract/acl.js';
import { NQN_UUID_PREFIX } from '../lib/contract/nqn.js';
import { UUID_TEXT } from '../lib/contract/uuid.js';
import { startStorageGuest, type StorageGuest } from '../test/e2e/cluster-lab.js';
import { prepareLab, repoRoot, script } from '../test/e2e/lab/index.js';
import { markKernelLogs, stallLinesSince } from '../test/e2e/lab/stalls.js';
import { withTimeout } from '../test/e2e/lab/util.js';
import { startEtcd, type TestEtcd } from '../test/helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../test/helpers/processes.js';

const { values } = parseArgs({
  options: {
    volumes: { type: 'string', default: '1000' },
    'fio-seconds': { type: 'string', default: '15' },
    'skip-fio': { type: 'boolean', default: false },
    concurrency: { type: 'string', default: '16' },
  },
});
const VOLUMES = Number(values.volumes);
const FIO_SECONDS = Number(values['fio-seconds']);
const SKIP_FIO = values['skip-fio'] ?? false;
const CONCURRENCY = Number(values.concurrency);
if (!Number.isInteger(VOLUMES) || VOLUMES < 1) throw new Error('--volumes must be a positive integer');
if (!(FIO_SECONDS > 0)) throw new Error('--fio-seconds must be positive');
if (!Number.isInteger(CONCURRENCY) || CONCURRENCY < 1) throw new Error('--concurrency must be a positive integer');

const MiB = 1024 * 1024;
/** The population's volumes: small and thin (sparse NOCOW files). */
const SMALL = '16MiB';
/** The fio volume and its hand-exported twin. */
const FIO_MIB = 256;
const DATA_SERIAL = 'STRATA-BENCH-DATA0';
const DRIVE_MIB = 4096;
const LEVELS = [...new Set([1, 100, VOLUMES])].filter((n) => n <= VOLUMES).sort((a, b) => a - b);
/** One port per volume: the population, the probes, the fio volume, and room. */
const PORT_MIN = 20000;
const PORT_MAX = PORT_MIN + Math.max(64, VOLUMES + LEVELS.length + 100) - 1;
/** Thin volumes: allow the population's provisioned size on a small drive (the control plane caps this at 100). */
const OVERCOMMIT = Math.min(100, Math.ceil(((VOLUMES + 16) * 16 * MiB + 2 * FIO_MIB * MiB) / (2048 * MiB)) + 1);
/** The hand-made export: outside the agent's port range and subsystem prefix, so it never touches it. */
const BASELINE = { nqn: 'nqn.2014-08.io.strata.bench:baseline', uuid: randomUUID(), port: 4499 };
/** LimitNOFILE of systemd/strata-agent.service. */
const AGENT_NOFILE = 65536;
const HOST_NQN = `${NQN_UUID_PREFIX}${randomUUID()}`;

const started = Date.now();
const say = (message: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(7)} s] ${message}`);
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const ratio = (value: number, baseline: number) => (baseline > 0 ? `×${(value / baseline).toFixed(2)}` : '—');
async function timed<T>(work: () => Promise<T>): Promise<[number, T]> {
  const start = performance.now();
  const result = await work();
  return [performance.now() - start, result];
}
/** A step with a timeout, its duration printed. */
async function step<T>(label: string, timeoutMs: number, work: () => Promise<T>): Promise<T> {
  const [ms, result] = await timed(() => withTimeout(work(), timeoutMs, label));
  say(`${label}: ${seconds(ms)}`);
  return result;
}

interface VolumeWire {
  UUID: string;
  name: string;
  state: string;
}
interface Connection {
  subsystemNQN: string;
  paths: { address: string; port: number }[];
}
interface LogRecord {
  msg?: string;
  time?: string;
  volumeUUID?: string;
  volumes?: number;
  operations?: number;
}

let etcd: TestEtcd | undefined;
let plane: ControlPlaneProcess | undefined;
let storage: StorageGuest | undefined;

// ---- the API ------------------------------------------------------------------------------------
async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${plane!.apiUrl}/api/v2${path}`, {
    method,
    headers: { Authorization: `Bearer ${plane!.adminToken()}`, 'Content-Type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}
/**
 * POST /volumes. Retried while the cluster has no live node (the agent's lease lapsed: a starved
 * guest) or answers 503, for up to 5 minutes; a create that went through is not sent twice
 * (a 409 on the retry means it did).
 */
async function createVolume(name: string, size: string, acl: string[] = [ALLOW_NONE]): Promise<VolumeWire> {
  const deadline = Date.now() + 300_000;
  for (let retried = false; ; retried = true) {
    try {
      return await api<VolumeWire>('POST', '/volumes', { name, size, projectName: 'default', acl: { values: acl } });
    } catch (err) {
      const message = (err as Error).message;
      if (retried && / 409 /.test(message)) return (await allVolumes()).find((v) => v.name === name)!;
      if (Date.now() > deadline || !/current maximum of 0| 503 /.test(message)) throw err;
      say(`  ${name}: ${message.slice(0, 120)}; retrying`);
      await sleep(2000);
    }
  }
}
async function allVolumes(): Promise<VolumeWire[]> {
  const all: VolumeWire[] = [];
  for (let offset = ''; ; ) {
    const page = (await api<{ volumes: VolumeWire[] }>('GET', `/volumes?projectName=default&limit=1000${offset ? `&offsetUUID=${offset}` : ''}`)).volumes;
    if (page.length === 0) return all;
    all.push(...page);
    offset = page[page.length - 1]!.UUID;
  }
}
/** The distinct reasons the control plane gave for failed volumes (its log). */
function failureReasons(): string {
  const reasons = new Map<string, number>();
  for (const r of plane!.logs) {
    if (r['msg'] !== 'volume failed') continue;
    const reason = String(r['reason']).replace(new RegExp(UUID_TEXT, 'g'), '<UUID>').replace(/\d+/g, 'N');
    reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
  }
  return [...reasons].map(([reason, n]) => `${n}× ${reason}`).join('; ') || '(no reason logged)';
}
/** Polls one volume until Available; a Failed volume ends the wait with the agent's log tail. */
async function available(uuid: string): Promise<void> {
  for (;;) {
    const v = await api<VolumeWire>('GET', `/volumes/${uuid}`);
    if (v.state === 'Available') return;
    if (v.state === 'Failed') throw new Error(`volume ${v.name} Failed: ${failureReasons()}`);
    await sleep(100);
  }
}
/** Polls the list until every volume is Available, printing progress. */
async function allAvailable(expected: number): Promise<void> {
  let lastPrint = Date.now();
  for (;;) {
    const volumes = await allVolumes();
    const ready = volumes.filter((v) => v.state === 'Available').length;
    const failed = volumes.filter((v) => v.state === 'Failed');
    if (failed.length > 0) throw new Error(`${failed.length} volumes Failed (e.g. ${failed[0]!.name}): ${failureReasons()}`);
    if (volumes.length >= expected && ready === volumes.length) return;
    if (Date.now() - lastPrint > 15_000) {
      say(`  ${ready}/${volumes.length} Available`);
      lastPrint = Date.now();
    }
    await sleep(Math.min(5000, 1000 + expected * 4));
  }
}
/** Creates volumes bench-<from>..bench-<to-1> with `concurrency` requests in flight. */
async function populate(from: number, to: number): Promise<void> {
  let next = from;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < to; i = next++) await createVolume(`bench-${i}`, SMALL);
    }),
  );
}

// ---- the guest ----------------------------------------------------------------------------------
const sh = async (command: string, timeoutMs = 60_000, ...args: string[]) =>
  (await storage!.guest.runOk(['sh', '-c', command, 'bench', ...args], { timeoutMs })).stdout.trim();
/** nvme connect over loopback, then the namespace's block device by its UUID. */
async function connect(nqn: string, port: number, uuid: string): Promise<string> {
  await storage!.guest.runOk(['nvme', 'connect', '-t', 'tcp', '-a', '127.0.0.1', '-s', String(port), '-n', nqn, '-q', HOST_NQN], { timeoutMs: 60_000 });
  return (await storage!.guest.runOk(['sh', script('nvme-ns-by-uuid.sh'), uuid, '60'], { timeoutMs: 90_000 })).stdout.trim();
}
/** fio 4K random I/O on a block device; IOPS. */
/** One fio run: its IOPS and the guest kernel's lines saying the I/O path stood still meanwhile (test/e2e/lab/stalls.ts). */
interface FioRun {
  readonly iops: number;
  readonly stalls: readonly string[];
}

async function fio(device: string, rw: 'randread' | 'randwrite'): Promise<FioRun> {
  const marks = await markKernelLogs([storage!.guest]);
  const out = (
    await storage!.guest.runOk(
      ['fio', '--name=bench', `--filename=${device}`, `--rw=${rw}`, '--bs=4k', '--direct=1', '--ioengine=libaio', '--iodepth=16', '--numjobs=1',
        `--runtime=${FIO_SECONDS}`, '--time_based', '--ramp_time=2', '--output-format=json'],
      { timeoutMs: (FIO_SECONDS + 120) * 1000 },
    )
  ).stdout;
  const job = (JSON.parse(out.slice(out.indexOf('{'))) as { jobs: { read: { iops: number }; write: { iops: number } }[] }).jobs[0]!;
  return { iops: rw === 'randread' ? job.read.iops : job.write.iops, stalls: await stallLinesSince(marks) };
}

/**
 * Starts the agent and gives it the open-file limit of its systemd unit (LimitNOFILE=65536 in
 * systemd/strata-agent.service): the lab's init leaves the kernel's default 1024, with which the
 * agent's configfs read-back loses attributes (EMFILE) from about 200 volumes on.
 */
async function startAgent(timeoutMs: number): Promise<void> {
  await storage!.startAgent({ timeoutMs });
  await storage!.guest.runOk(
    ['sh', '-c', 'for i in $(seq 100); do p=$(pgrep -f "^node $0"); [ -n "$p" ] && exec prlimit --pid "$p" --nofile=$1:$1; sleep 0.2; done; exit 1', `${repoRoot}/dist/agent/main.js`, String(AGENT_NOFILE)],
    { timeoutMs: 60_000 },
  );
}

// ---- the agent's log ----------------------------------------------------------------------------
const logSize = () => statSync(storage!.agentLogFile, { throwIfNoEntry: false })?.size ?? 0;
function logSince(offset: number): LogRecord[] {
  const records: LogRecord[] = [];
  for (const line of readFileSync(storage!.agentLogFile).subarray(offset).toString('utf8').split('\n')) {
    try {
      records.push(JSON.parse(line) as LogRecord);
    } catch {
      // a partial last line, or node's own output
    }
  }
  return records;
}
interface OpCount {
  /** Operations applied for the volume of interest. */
  mine: number;
  /** Operations applied for anything else. */
  others: number;
  failed: number;
}
function opsSince(offset: number, volumeUUID?: string): OpCount {
  const records = logSince(offset);
  const applied = records.filter((r) => r.msg === 'configfs operation applied');
  const mine = applied.filter((r) => volumeUUID !== undefined && r.volumeUUID === volumeUUID).length;
  return { mine, others: applied.length - mine, failed: records.filter((r) => r.msg === 'configfs operation failed').length };
}

// ---- the figures --------------------------------------------------------------------------------
interface AddFigure {
  existing: number;
  ms: number;
  ops: OpCount;
}
interface RestartFigure {
  volumes: number;
  /** Host wall time from starting the agent to its first volume report in the log. */
  ms: number;
  /** From the new process's first log line to that report (guest clock); before it, node loads the agent. */
  agentMs: number;
  ops: OpCount;
  allAvailable: boolean;
}

/** Adds one volume while `existing` exist: POST → Available, and the operations it took. */
async function addOne(existing: number): Promise<AddFigure> {
  const offset = logSize();
  const [ms, volume] = await timed(async () => {
    const v = await createVolume(`probe-${existing}`, SMALL);
    await available(v.UUID);
    return v;
  });
  await sleep(1000); // the pass's summary line follows its report
  const ops = opsSince(offset, volume.UUID);
  say(`  add one with ${existing} existing: ${seconds(ms)}, ${ops.mine} configfs operations (+${ops.others} for other volumes, ${ops.failed} failed)`);
  return { existing, ms, ops };
}

/** SIGKILL the agent, start it again, and wait for its first volume report listing every volume. */
async function restart(volumes: number): Promise<RestartFigure> {
  await storage!.stopAgent('KILL', 60_000);
  const offset = logSize();
  const timeoutMs = 300_000 + volumes * 2000;
  const [ms, report] = await timed(() =>
    withTimeout(
      (async () => {
        await startAgent(timeoutMs);
        for (;;) {
          const report = logSince(offset).find((r) => r.msg === 'volume report sent' && typeof r.volumes === 'number');
          if (report) return report;
          await sleep(100);
        }
      })(),
      timeoutMs,
      `agent restart with ${volumes} volumes`,
    ),
  );
  if (report.volumes !== volumes) say(`  note: the first report listed ${report.volumes} volumes, not ${volumes}`);
  const first = logSince(offset).find((r) => r.time);
  const agentMs = first?.time && report.time ? Date.parse(report.time) - Date.parse(first.time) : NaN;
  const ops = opsSince(offset);
  await sleep(2000); // the control plane stores the report: any volume it turned Failed shows now
  const list = await allVolumes();
  const allAvailable = list.length === volumes && list.every((v) => v.state === 'Available');
  say(`  restart with ${volumes} volumes: ${seconds(ms)} to the first report (from the agent's first log line ${seconds(agentMs)}; before it, node starting ${seconds(ms - agentMs)}), ${ops.others} configfs operations, all Available: ${allAvailable}`);
  return { volumes, ms, agentMs, ops, allAvailable };
}

const logDir = process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
try {
  say(`load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  say(`bench/datapath: levels ${LEVELS.join(', ')}; fio ${SKIP_FIO ? 'skipped' : `${FIO_SECONDS} s per run`}; volume ports ${PORT_MIN}-${PORT_MAX}; overcommit ${OVERCOMMIT}`);
  const lab = await step('lab (kernel, initramfs)', 600_000, () => prepareLab());
  etcd = await step('etcd', 60_000, () => startEtcd());
  plane = await step('control plane', 120_000, () =>
    startControlPlaneProcess({
      etcdEndpoint: etcd!.endpoint,
      leaseTtlSeconds: 10,
      extraArgs: ['--volume-port-min', String(PORT_MIN), '--volume-port-max', String(PORT_MAX), '--overcommit-ratio', String(OVERCOMMIT),
        '--creating-timeout-seconds', '3600', '--log-level', 'info'],
    }),
  );
  storage = await step('boot the storage guest', 300_000, () =>
    startStorageGuest({
      name: 'bench-storage',
      drives: [{ serial: DATA_SERIAL, sizeMiB: DRIVE_MIB }],
      dataSerials: [DATA_SERIAL],
      etcdPort: etcd!.clientPort,
      controlPlaneGrpcPort: Number(plane!.grpcEndpoint.split(':')[1]),
      advertiseAddress: '127.0.0.1',
      volumePortMin: PORT_MIN,
      volumePortMax: PORT_MAX,
      // A 60 s lease: a guest starved by the host's load (TCG) missed 10 s keepalives while
      // passing over 100 volumes, and the node dropped out of placement.
      agentArgs: ['--volume-listen-address', '127.0.0.1', '--lease-ttl-seconds', '60', '--log-level', 'debug'],
      // One vCPU: an SMP 6.12 guest runs single-threaded TCG, which elides the guest's barriers
      // and loses the emulated drive's doorbells (docs/e2e.md, "Stalls").
      cpus: 1,
      memoryMiB: 2048,
      lab,
      bootTimeoutMs: 300_000,
    }),
  );
  await step('start the agent', 300_000, () => startAgent(300_000));
  await step('node Active with its pool', 300_000, async () => {
    for (;;) {
      const { nodes } = await api<{ nodes: { state: string; statistics: { managedPhysicalStorage: string } }[] }>('GET', '/nodes');
      if (nodes.some((n) => n.state === 'Active' && BigInt(n.statistics.managedPhysicalStorage) > 0n)) return;
      await sleep(500);
    }
  });

  // 1. The first volume: POST → Available → block device; the same by hand.
  const firstOffset = logSize();
  const [toAvailable, fioVolume] = await timed(async () => {
    const v = await createVolume('bench-fio', `${FIO_MIB}MiB`, [ALLOW_ANY]);
    await withTimeout(available(v.UUID), 600_000, 'first volume Available');
    return v;
  });
  say(`first volume: POST → Available ${seconds(toAvailable)}`);
  const connection = await api<Connection>('GET', `/volumes/${fioVolume.UUID}/connection`);
  const path = connection.paths[0]!;
  const [toDevice, strataDevice] = await timed(() => withTimeout(connect(connection.subsystemNQN, path.port, fioVolume.UUID), 180_000, 'connect the volume'));
  say(`first volume: nvme connect → ${strataDevice} ${seconds(toDevice)} (${path.address}:${path.port})`);
  const firstOps = opsSince(firstOffset, fioVolume.UUID);

  const pool = await sh('findmnt -n -t btrfs -o TARGET | head -n 1');
  if (!pool) throw new Error('no btrfs pool mounted in the guest');
  const baselineFile = `${pool}/strata-bench/baseline.raw`;
  // The same kind of backing as a Strata uncompressed volume: an empty file made NOCOW, then sparse.
  const [handExport] = await timed(() =>
    sh(
      'mkdir -p "${1%/*}" && : > "$1" && chattr +C "$1" && truncate -s "$2" "$1" && sh "$3" "$4" 1 "$1" "$5" "$6" "$6" 127.0.0.1',
      60_000,
      baselineFile, `${FIO_MIB}M`, script('nvmet-export.sh'), BASELINE.nqn, BASELINE.uuid, String(BASELINE.port),
    ),
  );
  say(`hand export (file + configfs script): ${seconds(handExport)}`);
  const [handDevice, baselineDevice] = await timed(() => withTimeout(connect(BASELINE.nqn, BASELINE.port, BASELINE.uuid), 180_000, 'connect the hand export'));
  say(`hand export: nvme connect → ${baselineDevice} ${seconds(handDevice)}`);

  // 4. fio, while one volume exists (the agent idle between its resync passes).
  // Per kind, Strata and the hand export twice each: [Strata runs, hand runs].
  const iops: Record<'randread' | 'randwrite', [FioRun[], FioRun[]]> = { randread: [[], []], randwrite: [[], []] };
  if (!SKIP_FIO) {
    await step(`prefill both with ${FIO_MIB} MiB`, 600_000, () =>
      sh('for d in "$@"; do dd if=/dev/zero of="$d" bs=1M count=' + FIO_MIB + ' oflag=direct status=none; done', 600_000, strataDevice, baselineDevice),
    );
    // The prefill allocated 2 × FIO_MIB in btrfs: its commit (every 30 s) stalled whichever run came
    // first for seconds (a keep-alive expiry on that controller), so the runs start after it.
    await step('settle: sync, then past btrfs\' 30 s commit', 120_000, () => sh('sync && sleep 35', 120_000));
    for (const rw of ['randread', 'randwrite'] as const) {
      for (const which of [0, 1, 1, 0] as const) {
        const run = await fio(which === 0 ? strataDevice : baselineDevice, rw);
        iops[rw][which].push(run);
        say(`fio ${rw} ${which === 0 ? 'Strata volume' : 'hand export'}: ${run.iops.toFixed(0)} IOPS${run.stalls.length > 0 ? `, stalled (${run.stalls.length} kernel lines):\n  ${run.stalls.slice(0, 6).join('\n  ')}` : ''}`);
      }
    }
  }
  await sh('nvme disconnect-all', 60_000);

  // 2 + 3. Add one volume and restart the agent at each level.
  const adds: AddFigure[] = [];
  const restarts: RestartFigure[] = [];
  let count = 1; // the fio volume
  for (const level of LEVELS) {
    if (count < level) {
      const from = count;
      const [ms] = await timed(() =>
        withTimeout(
          (async () => {
            await populate(from, level);
            await allAvailable(level);
          })(),
          600_000 + (level - from) * 5000,
          `populate to ${level}`,
        ),
      );
      say(`populate to ${level}: ${level - from} volumes created and Available in ${seconds(ms)} (${((level - from) / (ms / 1000)).toFixed(1)}/s)`);
      count = level;
    }
    adds.push(await withTimeout(addOne(count), 300_000 + count * 2000, `add one volume with ${count} existing`));
    count += 1;
    restarts.push(await restart(count));
  }

  // ---- the table --------------------------------------------------------------------------------
  const line = (name: string, value: string, baseline = '') => console.log(`${name.padEnd(44)} ${value.padStart(16)}   ${baseline}`);
  console.log('');
  console.log(`bench/datapath (${new Date().toISOString()}; load average at the end: ${loadavg().map((l) => l.toFixed(1)).join(' ')})`);
  line('first volume: POST → Available', seconds(toAvailable), `${ratio(toAvailable, handExport)} hand export (file + configfs script, ${seconds(handExport)})`);
  line('first volume: nvme connect → block device', seconds(toDevice), `${ratio(toDevice, handDevice)} hand export (${seconds(handDevice)})`);
  line('first volume: configfs operations', String(firstOps.mine), `(+${firstOps.others} other, ${firstOps.failed} failed)`);
  const base = adds[0]!;
  for (const a of adds) {
    line(`add one with ${a.existing} existing: POST → Available`, seconds(a.ms), a === base ? '(baseline)' : `${ratio(a.ms, base.ms)} with ${base.existing}`);
    line(`add one with ${a.existing} existing: configfs ops`, `${a.ops.mine} (+${a.ops.others})`, a === base ? '(baseline)' : `${ratio(a.ops.mine, base.ops.mine)} with ${base.existing}; ${a.ops.failed} failed`);
  }
  const first = restarts[0]!;
  for (const r of restarts) {
    line(`agent restart with ${r.volumes} volumes`, seconds(r.ms), `${r === first ? '(baseline)' : `${ratio(r.ms, first.ms)} with ${first.volumes}`}; in the agent ${seconds(r.agentMs)}`);
    line(`agent restart with ${r.volumes}: configfs ops`, String(r.ops.others + r.ops.mine), `all Available after: ${r.allAvailable}`);
  }
  if (!SKIP_FIO) {
    // A stalled run (a kernel line said a command timed out, a keep-alive expired, a path
    // reconnected) measures the bed's stall, not the path: the means leave them out where a run
    // of the same path did not stall, and the runs list marks them with `*`.
    const mean = (runs: readonly FioRun[]) => {
      const clean = runs.filter((r) => r.stalls.length === 0);
      const counted = clean.length > 0 ? clean : runs;
      return counted.reduce((a, r) => a + r.iops, 0) / counted.length;
    };
    for (const rw of ['randread', 'randwrite'] as const) {
      const [strata, hand] = iops[rw];
      const runs = (values: readonly FioRun[]) => values.map((r) => `${r.iops.toFixed(0)}${r.stalls.length > 0 ? '*' : ''}`).join(' / ');
      line(`fio 4K ${rw} iodepth 16 (IOPS, mean)`, mean(strata).toFixed(0), `${ratio(mean(strata), mean(hand))} hand export of a NOCOW file on the same pool (${mean(hand).toFixed(0)}); runs S ${runs(strata)}, H ${runs(hand)} (* stalled)`);
    }
  }
} finally {
  say('stopping');
  if (storage) {
    mkdirSync(logDir, { recursive: true });
    try {
      writeFileSync(join(logDir, `bench-datapath.${process.pid}.agent.log`), readFileSync(storage.agentLogFile));
      say(`agent log: ${join(logDir, `bench-datapath.${process.pid}.agent.log`)}`);
    } catch {
      // no log yet
    }
    await storage.guest.run(['nvme', 'disconnect-all'], { timeoutMs: 30_000 }).catch(() => undefined);
    await storage.stop().catch((err: unknown) => say(`stopping the guest: ${String(err)}`));
  }
  if (plane) {
    mkdirSync(logDir, { recursive: true });
    writeFileSync(join(logDir, `bench-datapath.${process.pid}.control-plane.log`), plane.logs.map((l) => JSON.stringify(l)).join('\n'));
    await plane.stop();
    removeDir(plane.stateDir);
  }
  await etcd?.stop();
}
