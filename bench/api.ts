// bench/api: management API latency with N volumes in etcd (default 10,000), each figure printed
// beside a raw etcd put/get measured in the same run on the same etcd.
//
//   npm run bench:api [-- --volumes 10000 --concurrency 16 --samples 500]
//
// Targets (issue): p99 GET under 20 ms, a list page of 1000 under 100 ms, >= 300 creates/s.
// Latencies are measured with one client issuing requests in sequence (what a request costs);
// creates/s with `--concurrency` clients (what the control plane sustains). The raw etcd
// figures are measured the same way from this process, so each ratio compares like with like.
// A private etcd and a real control plane (its own process, over real HTTP) are started and
// stopped. One storage node is registered in etcd as an agent would register it (presence,
// node and a large data device), so creates pass the replica limit and the controller places
// every volume — but no agent serves them: this measures the API, its store and the
// controller's load on etcd, not the data path (bench/datapath does that).
// Both children (etcd, the control plane) are stopped on every way out: the end, a throw at any
// step (the control plane not starting included), Ctrl-C or a SIGTERM; a crash of this process
// takes them along (pdeathsig), so no control plane is left serving after a failed run.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { stopChild } from '../lib/child-process.js';
import { ALLOW_ANY } from '../lib/contract/acl.js';
import { createEtcdClient, unconditionalTxn } from '../lib/etcd/client.js';
import { startLocalEtcd, type LocalEtcd } from '../lib/etcd/local-etcd.js';
import { freePort } from '../lib/ports.js';
import { packageRoot } from '../lib/paths.js';
import { joinServer, reportInventory } from '../test/helpers/records.js';
import { keys } from '../lib/etcd/keys.js';
import type { VolumeRecord, VolumeStatusRecord } from '../lib/records.js';
import type { Etcd3 } from 'etcd3';

const { values } = parseArgs({
  options: {
    volumes: { type: 'string', default: '10000' },
    concurrency: { type: 'string', default: '16' },
    samples: { type: 'string', default: '500' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log('usage: npm run bench:api [-- --volumes 10000 --concurrency 16 --samples 500]\n' +
    'Starts a private etcd and a control plane, creates the volumes through the API and prints its latencies beside raw etcd\'s.');
  process.exit(0);
}
const VOLUMES = Number(values.volumes);
const CONCURRENCY = Number(values.concurrency);
const SAMPLES = Number(values.samples);

interface Stats {
  p50: number;
  p99: number;
  max: number;
  count: number;
}
function stats(ms: number[]): Stats {
  const sorted = [...ms].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  return { p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1] ?? 0, count: sorted.length };
}
async function timed<T>(work: () => Promise<T>): Promise<[number, T]> {
  const start = process.hrtime.bigint();
  const result = await work();
  return [Number(process.hrtime.bigint() - start) / 1e6, result];
}
/** Runs `count` operations with `concurrency` in flight; returns per-op latencies and wall time. */
async function load(count: number, concurrency: number, op: (i: number) => Promise<void>): Promise<{ latencies: number[]; seconds: number }> {
  const latencies: number[] = [];
  let next = 0;
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < count; i = next++) latencies.push((await timed(() => op(i)))[0]);
    }),
  );
  return { latencies, seconds: Number(process.hrtime.bigint() - start) / 1e9 };
}

const home = mkdtempSync(join(tmpdir(), 'strata-bench-api-'));
// What the run has started so far, stopped by stopAll() (once, however many ways out ask).
let etcd: LocalEtcd | undefined;
let plane: ChildProcess | undefined;
let etcdClient: Etcd3 | undefined;
let stopping: Promise<void> | undefined;
function stopAll(): Promise<void> {
  stopping ??= (async () => {
    etcdClient?.close();
    // SIGTERM: the control plane stops cleanly (and writes its CPU profile when asked).
    if (plane) await stopChild(plane, 10_000);
    await etcd?.stop();
    rmSync(home, { recursive: true, force: true });
  })();
  return stopping;
}
// A signal's default action would end this process at once, with its children still running
// (Ctrl-C reaches the control plane too, a SIGTERM or a timeout's kill only this process).
for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
  process.once(signal, () => {
    console.error(`bench/api: ${signal}, stopping the control plane and etcd`);
    void stopAll().finally(() => process.exit(code));
  });
}

try {
  etcd = await startLocalEtcd({ dataDir: join(home, 'etcd'), clientPort: await freePort(), peerPort: await freePort() });
  const apiPort = await freePort();
  const planeArgs = [
    ...(process.env['STRATA_BENCH_CPU_PROF'] ? ['--cpu-prof', `--cpu-prof-dir=${process.env['STRATA_BENCH_CPU_PROF']}`] : []), join(packageRoot, 'dist/control-plane/main.js'), '--etcd-endpoints', etcd.endpoint, '--api-port', String(apiPort), '--grpc-port', String(await freePort()),
    '--state-dir', join(home, 'cp'), '--log-level', process.env['STRATA_BENCH_LOG'] ?? 'warn',
    // Plain HTTP on loopback, as the tests' control planes: the API's TLS is not what is measured.
    '--api-insecure-http', 'true',
  ];
  // Under setpriv --pdeathsig, as local-etcd.ts runs etcd: it dies with this process even on a
  // SIGKILL or a crash, which no handler here sees. setpriv execs node: the PID is the control plane's.
  const planeOptions = { stdio: ['ignore', 'ignore', 'inherit'] as ['ignore', 'ignore', 'inherit'], env: { ...process.env, NOTIFY_SOCKET: '' } };
  plane = existsSync('/usr/bin/setpriv')
    ? spawn('/usr/bin/setpriv', ['--pdeathsig', 'SIGKILL', '--', process.execPath, ...planeArgs], planeOptions)
    : spawn(process.execPath, planeArgs, planeOptions);
  const base = `http://127.0.0.1:${apiPort}/api/v2`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`http://127.0.0.1:${apiPort}/healthz`)).ok && existsSync(join(home, 'cp', 'admin.jwt'))) break;
    } catch {
      // not up yet
    }
    if (plane.exitCode !== null || plane.signalCode !== null) throw new Error(`control plane exited during start (${plane.exitCode ?? plane.signalCode})`);
    if (i > 300) throw new Error('control plane did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
  const token = readFileSync(join(home, 'cp', 'admin.jwt'), 'utf8').trim();
  const headers = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' };
  const call = async (method: string, path: string, body?: unknown): Promise<unknown> => {
    const res = await fetch(`${base}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as unknown;
  };

  const raw = createEtcdClient([etcd.endpoint]);
  etcdClient = raw;
  const { server } = await joinServer(raw, { nodes: [{ managedDeviceSerials: ['BENCH-0'] }] });
  await reportInventory(raw, server.UUID, { devices: [{ serial: 'BENCH-0', sizeBytes: String(2n ** 60n), present: true }] });
  const sampleValue = JSON.stringify({ UUID: '00000000-0000-0000-0000-000000000000', name: 'x'.repeat(16), sizeBytes: '1073741824', acl: [ALLOW_ANY], labels: [], state: 'Creating' });
  console.log(`bench/api: ${VOLUMES} volumes; latencies from one sequential client (${SAMPLES} samples); throughput at concurrency ${CONCURRENCY}`);

  // Creates: the population itself, through the API.
  const uuids: string[] = [];
  const creates = await load(VOLUMES, CONCURRENCY, async (i) => {
    const created = (await call('POST', '/volumes', { name: `bench-${i}`, size: '1GiB', projectName: 'default' })) as { UUID: string };
    uuids.push(created.UUID);
  });
  const rawPutLoad = await load(Math.min(VOLUMES, 2000), CONCURRENCY, async (i) => {
    await raw.put(`/bench/raw/${i}`).value(sampleValue);
  });
  const rawPuts = await load(SAMPLES, 1, async (i) => {
    await raw.put(`/bench/raw/${i}`).value(sampleValue);
  });
  // Create latency alone (sequential), beside the concurrent population above.
  const createLatency = await load(Math.min(SAMPLES, 200), 1, async (i) => {
    await call('POST', '/volumes', { name: `bench-latency-${i}`, size: '1GiB', projectName: 'default' });
  });

  // No agent serves the volumes: report each placed one Served, as the control plane persists
  // an agent's report, so they reach Available and accept updates (PUT on Creating is a 503).
  const servedAt = Date.now();
  for (;;) {
    let volumes: VolumeRecord[];
    try {
      volumes = Object.values(await raw.getAll().prefix(keys.volumesPrefix()).json()) as VolumeRecord[];
    } catch {
      continue; // a slow read under load: look again
    }
    const waiting = volumes.filter((v) => v.state !== 'Available');
    if (waiting.length === 0) break;
    if (Date.now() - servedAt > 120_000) throw new Error(`${waiting.length} volumes not Available after 120 s`);
    // 100 reports per transaction, four transactions in flight: 10,000 single puts at once
    // overrun the client's deadlines on a loaded machine.
    const placed = waiting.filter((v) => v.placement);
    const batches: VolumeRecord[][] = [];
    for (let i = 0; i < placed.length; i += 100) batches.push(placed.slice(i, i + 100));
    await load(batches.length, 4, async (i) => {
      const ops = batches[i]!.map((v) => {
        const status: VolumeStatusRecord = {
          volumeUUID: v.UUID, nodeUUID: v.placement!.nodeList[0]!, generation: v.generation, state: 'Served', error: '', snapshots: [],
          connectedHosts: [], logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: new Date().toISOString(),
        };
        return raw.put(keys.volumeStatus(v.UUID, status.nodeUUID)).value(JSON.stringify(status));
      });
      await unconditionalTxn(raw).then(...ops).commit();
    });
    await new Promise((r) => setTimeout(r, 500));
  }
  const servedSeconds = (Date.now() - servedAt) / 1000;

  const pick = () => uuids[Math.floor(Math.random() * uuids.length)]!;
  const gets = await load(SAMPLES, 1, async () => {
    await call('GET', `/volumes/${pick()}`);
  });
  const rawGets = await load(SAMPLES, 1, async (i) => {
    await raw.get(`/bench/raw/${i % 2000}`).string();
  });
  const rawRanges = await load(Math.max(10, Math.floor(SAMPLES / 20)), 1, async () => {
    await raw.getAll().prefix('/strata/volumes/').limit(1000).strings();
  });
  // List: page through everything, 1000 per page, one client (as real clients page), until at
  // least 50 pages are timed (a p99 of a dozen samples would be just the slowest one).
  const pages: number[] = [];
  while (pages.length < 50) {
    let offset = '';
    for (;;) {
      const [ms, body] = await timed(() => call('GET', `/volumes?projectName=default&limit=1000${offset ? `&offsetUUID=${offset}` : ''}`));
      const list = (body as { volumes: { UUID: string }[] }).volumes;
      if (list.length === 0) break;
      pages.push(ms);
      offset = list[list.length - 1]!.UUID;
    }
  }
  const updates = await load(SAMPLES, 1, async (i) => {
    await call('PUT', `/volumes/${pick()}`, { labels: [{ key: 'bench', value: String(i) }] });
  });

  const row = (name: string, s: Stats, baseline?: Stats) =>
    console.log(
      `${name.padEnd(28)} p50 ${s.p50.toFixed(2).padStart(8)} ms   p99 ${s.p99.toFixed(2).padStart(8)} ms   n=${String(s.count).padStart(5)}` +
        (baseline ? `   ×${(s.p99 / Math.max(baseline.p99, 0.001)).toFixed(1)} raw etcd p99 (${baseline.p99.toFixed(2)} ms)` : ''),
    );
  console.log('');
  row('etcd put (raw)', stats(rawPuts.latencies));
  row('etcd get (raw)', stats(rawGets.latencies));
  row('etcd range 1000 (raw)', stats(rawRanges.latencies));
  row('POST /volumes', stats(createLatency.latencies), stats(rawPuts.latencies));
  row('POST /volumes (concurrent)', stats(creates.latencies));
  row('GET /volumes/{UUID}', stats(gets.latencies), stats(rawGets.latencies));
  row('GET /volumes (1000/page)', stats(pages), stats(rawRanges.latencies));
  row('PUT /volumes/{UUID}', stats(updates.latencies), stats(rawPuts.latencies));
  console.log(`all ${VOLUMES} volumes placed and Available ${servedSeconds.toFixed(1)} s after the last create (reports written in bulk)`);
  const createRate = VOLUMES / creates.seconds;
  const rawRate = rawPutLoad.latencies.length / rawPutLoad.seconds;
  console.log('');
  console.log(`creates/s                    ${createRate.toFixed(0)}   (raw etcd puts/s ${rawRate.toFixed(0)}, ratio ${(createRate / rawRate).toFixed(2)})`);
  console.log('');
  const verdict = (ok: boolean) => (ok ? 'met' : 'MISSED');
  console.log(`target p99 GET < 20 ms: ${verdict(stats(gets.latencies).p99 < 20)}; list page p99 < 100 ms: ${verdict(stats(pages).p99 < 100)}; creates >= 300/s: ${verdict(createRate >= 300)}`);
} finally {
  await stopAll();
}
