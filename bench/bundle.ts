// bench/bundle: the diagnostic bundle (GET /api/v2/logs) of a real control plane and a real agent
// process, with the etcd dump grown by filler events, printed beside a baseline from the same
// run: gzip -6 / xz -6 of the very same uncompressed tar on this machine (what compressing the
// bytes costs without collecting or streaming them). Also prints each daemon's peak resident
// memory (VmHWM), to show that the bundle is streamed, not held.
//
//   npm run bench:bundle [-- --records 20000 --record-bytes 1024 --statistics 1]
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, mkdtempSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Etcd3 } from 'etcd3';
import { keys } from '../lib/etcd/keys.js';
import { startEtcd } from '../test/helpers/etcd.js';
import { removeDir, spawnDaemon, startControlPlaneProcess } from '../test/helpers/processes.js';
import { createFakeSysfs } from '../test/helpers/sysfs-fixture.js';

const { values } = parseArgs({
  options: {
    records: { type: 'string', default: '20000' },
    'record-bytes': { type: 'string', default: '1024' },
    statistics: { type: 'string', default: '1' },
  },
});
const RECORDS = Number(values.records);
const RECORD_BYTES = Number(values['record-bytes']);

const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
const peakRss = (pid: number) => Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

const etcd = await startEtcd();
const client = new Etcd3({ hosts: etcd.endpoint });
const plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
const sysfs = createFakeSysfs();
sysfs.addController({ name: 'nvme0', serial: 'BENCH-0', namespaces: [{ name: 'nvme0n1', sectors: 1n << 28n }] });
const stateDir = mkdtempSync(join(tmpdir(), 'strata-bench-bundle-'));
const agent = spawnDaemon('agent/main.js', [
  '--etcd-endpoints', etcd.endpoint, '--control-plane-endpoints', plane.grpcEndpoint,
  '--state-dir', join(stateDir, 'state'), '--pool-dir', join(stateDir, 'pool'),
  '--sysfs-root', sysfs.root, '--mounts-path', sysfs.mountsPath, '--swaps-path', sysfs.swapsPath,
  '--hostname', hostname(), '--discovery-listen-address', '127.0.0.1', '--discovery-port', '0',
]);
try {
  await agent.waitForLog((r) => r['msg'] === 'control-plane session established');
  // Filler records (each about RECORD_BYTES of JSON) make the etcd dump the bundle's large entry.
  // Random text: log-like data compresses, random base64 hardly does; this is the hard case.
  const filler = () => randomBytes(Math.max(0, Math.floor(((RECORD_BYTES - 40) * 3) / 4))).toString('base64');
  for (let i = 0; i < RECORDS; i += 100) {
    const puts = [];
    for (let j = i; j < Math.min(RECORDS, i + 100); j++) {
      puts.push(client.put(`/strata/bench-filler/${String(j).padStart(8, '0')}`).value(JSON.stringify({ id: j, description: filler() })));
    }
    await client.if(keys.cluster(), 'Version', '>', 0).then(...puts).commit();
  }
  console.log(`bench/bundle: ${RECORDS} filler records of ${RECORD_BYTES} bytes in etcd; host ${hostname()}`);

  const before = { plane: peakRss(plane.child.pid!), agent: peakRss(agent.child.pid!) };
  const run = async (label: string, query: string) => {
    const started = process.hrtime.bigint();
    const res = await fetch(`${plane.apiUrl}/api/v2/logs${query}`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } });
    if (res.status !== 200) throw new Error(`${label}: ${res.status} ${await res.text()}`);
    const body = Buffer.from(await res.arrayBuffer());
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    console.log(`  ${label.padEnd(28)} ${mib(body.length).padStart(10)} in ${(ms / 1000).toFixed(2).padStart(6)} s`);
    return body;
  };
  const stats = `NumOfstatisticsToCapture=${values.statistics}&IntervalBetweenBEReadCycles=1`;
  const plain = await run('plain (DontCompressOutput)', `?DontCompressOutput=true&${stats}`);
  await run('gzip (default)', `?${stats}`);
  await run('xz (UseHighCompression)', `?UseHighCompression=true&${stats}`);
  const baseline = (label: string, program: string) => {
    const started = process.hrtime.bigint();
    const out = execFileSync(program, ['-6', '-c'], { input: plain, maxBuffer: 2 ** 31 });
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    console.log(`  ${label.padEnd(28)} ${mib(out.length).padStart(10)} in ${(ms / 1000).toFixed(2).padStart(6)} s   (baseline: the plain tar above, compressed here)`);
  };
  baseline(`gzip -6 of the same tar`, 'gzip');
  baseline(`xz -6 of the same tar`, 'xz');
  console.log(`  peak RSS before the bundles: control plane ${mib(before.plane)}, agent ${mib(before.agent)}`);
  console.log(`  peak RSS after the bundles:  control plane ${mib(peakRss(plane.child.pid!))}, agent ${mib(peakRss(agent.child.pid!))} (uncompressed bundle ${mib(plain.length)})`);
} finally {
  await agent.stop();
  await plane.stop();
  client.close();
  await etcd.stop();
  sysfs.cleanup();
  removeDir(stateDir);
  removeDir(plane.stateDir);
}
