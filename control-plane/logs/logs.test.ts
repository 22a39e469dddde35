// Issue 15 item 5 acceptance: GET /api/v2/logs against a real control plane (its own process),
// real etcd, one real agent process (this host's server: the default) and one agent whose data
// path drives an nvmet tree in a temp directory. The archive lists the expected files, holds no
// secret, honours every query parameter, and a client that goes away stops the agent's work.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { Etcd3 } from 'etcd3';
import { agentSettings, resolveAgentConfig } from '../../agent/config.js';
import { startAgent, type RunningAgent } from '../../agent/agent.js';
import { which } from '../../lib/executables.js';
import { keys } from '../../lib/etcd/keys.js';
import { loadConfig } from '../../lib/config.js';
import { packageRoot } from '../../lib/paths.js';
import type { AgentSecretRecord, CredentialRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { removeDir, spawnDaemon, startControlPlaneProcess, type ControlPlaneProcess, type DaemonProcess } from '../../test/helpers/processes.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { createFakeSysfs, type FakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { readTar, type TarFile } from '../../test/helpers/tar.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { projectToken } from '../../test/kits/test-tokens.js';
import { emulatedDataPath } from '../../test/kits/datapath/emulated-datapath.js';

const GiB = 1024n ** 3n;

describe('diagnostic bundle (GET /api/v2/logs)', () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let plane: ControlPlaneProcess;
  let hostAgent: DaemonProcess;
  let guestAgent: RunningAgent;
  const sysfs: FakeSysfs[] = [];
  const dirs: string[] = [];
  let nvmetRoot: string;
  let hostServerUUID: string;
  let otherServerUUID: string;

  const temp = (name: string) => {
    const dir = mkdtempSync(join(tmpdir(), `strata-bundle-test-${name}-`));
    dirs.push(dir);
    return dir;
  };
  const get = (query: string, token = plane.adminToken(), signal?: AbortSignal) =>
    fetch(`${plane.apiUrl}/api/v2/logs${query}`, { headers: { Authorization: `Bearer ${token}` }, ...(signal ? { signal } : {}) });
  async function bundle(query: string): Promise<{ res: Response; raw: Buffer; files: TarFile[]; ms: number }> {
    const started = Date.now();
    const res = await get(query);
    const raw = Buffer.from(await res.arrayBuffer());
    assert.equal(res.status, 200, raw.toString().slice(0, 500));
    const type = res.headers.get('content-type') ?? '';
    const tar = type.startsWith('application/gzip') ? gunzipSync(raw) : type.startsWith('application/x-xz') ? execFileSync('xz', ['-dc'], { input: raw, maxBuffer: 1 << 30 }) : raw;
    return { res, raw: tar, files: readTar(tar), ms: Date.now() - started };
  }
  const named = (files: TarFile[], suffix: string) => files.find((f) => f.path.endsWith(suffix));
  const paths = (files: TarFile[]) => files.map((f) => f.path.replace(/^[^/]+\//, ''));

  before(async () => {
    etcd = await startEtcd();
    client = new Etcd3({ hosts: etcd.endpoint });
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    // This host's server: a real agent process named as this host, so it is the default server.
    const hostSysfs = createFakeSysfs();
    hostSysfs.addController({ name: 'nvme0', serial: 'BUNDLE-HOST-0', namespaces: [{ name: 'nvme0n1', sectors: (100n * GiB) / 512n }] });
    sysfs.push(hostSysfs);
    hostAgent = spawnDaemon('agent/main.js', [
      '--etcd-endpoints', etcd.endpoint,
      '--control-plane-endpoints', plane.grpcEndpoint,
      '--state-dir', temp('host-state'),
      '--pool-dir', temp('host-pool'),
      '--sysfs-root', hostSysfs.root,
      '--mounts-path', hostSysfs.mountsPath,
      '--swaps-path', hostSysfs.swapsPath,
      '--hostname', hostname(),
      '--discovery-listen-address', '127.0.0.1',
      '--discovery-port', '0',
      '--lease-ttl-seconds', '2',
      '--log-level', 'debug',
    ]);
    await hostAgent.waitForLog((r) => r['msg'] === 'control-plane session established');
    // Another server, whose data path drives an nvmet tree in a temp directory.
    const otherSysfs = createFakeSysfs();
    otherSysfs.addController({ name: 'nvme0', serial: 'BUNDLE-OTHER-0', namespaces: [{ name: 'nvme0n1', sectors: (100n * GiB) / 512n }] });
    sysfs.push(otherSysfs);
    nvmetRoot = temp('nvmet');
    const config = resolveAgentConfig(loadConfig(agentSettings, {
      program: 'strata-agent',
      summary: 'test',
      env: {},
      argv: [
        '--etcd-endpoints', etcd.endpoint,
        '--control-plane-endpoints', plane.grpcEndpoint,
        '--state-dir', temp('other-state'),
        '--pool-dir', temp('other-pool'),
        '--sysfs-root', otherSysfs.root,
        '--mounts-path', otherSysfs.mountsPath,
        '--swaps-path', otherSysfs.swapsPath,
        '--hostname', 'storage-other',
        '--discovery-listen-address', '127.0.0.1',
        '--discovery-port', '0',
        '--lease-ttl-seconds', '2',
      ],
    }));
    guestAgent = await startAgent(config, silentLogger('storage-other'), { dataPath: emulatedDataPath({ nvmetRoot }) });
    await guestAgent.ready;
    await waitUntil(() => guestAgent.session.state().connected, 'the other agent connected', 15_000);
    const servers = (await (await fetch(`${plane.apiUrl}/api/v2/servers`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } })).json()) as { servers: { UUID: string; name: string }[] };
    otherServerUUID = guestAgent.identity.serverUUID;
    hostServerUUID = servers.servers.find((s) => s.UUID !== otherServerUUID)!.UUID;
  });

  after(async () => {
    await guestAgent?.stop();
    await hostAgent?.stop();
    await plane?.stop();
    client?.close();
    await etcd?.stop();
    for (const s of sysfs) s.cleanup();
    for (const dir of [...dirs, plane?.stateDir]) if (dir) removeDir(dir);
  });

  it('streams a gzip tar of the answering server: the expected files, and no secret', async () => {
    const { res, raw, files, ms } = await bundle('');
    assert.equal(res.headers.get('content-type'), 'application/gzip');
    const disposition = res.headers.get('content-disposition') ?? '';
    assert.match(disposition, new RegExp(`^attachment; filename="strata-bundle-${hostname()}-\\d{8}-\\d{6}\\.tgz"$`));
    const top = new Set(files.map((f) => f.path.split('/')[0]));
    assert.equal(top.size, 1, 'one top directory');
    const listed = paths(files);
    for (const expected of [
      'cluster/etcd-dump.jsonl',
      'cluster/cli/cluster-info.txt', 'cluster/cli/nodes.txt', 'cluster/cli/servers.txt', 'cluster/cli/devices.txt',
      'cluster/cli/volumes.txt', 'cluster/cli/projects.txt', 'cluster/cli/events.txt',
      'server/bundle-options.json', 'server/system/uname.txt', 'server/system/os-release', 'server/system/cpuinfo',
      'server/system/meminfo', 'server/system/mounts', 'server/system/lsblk.json', 'server/system/ip-addr.txt',
      'server/agent/state.json', 'server/agent/nft-ruleset.txt', 'server/statistics/cycle-1.txt', 'server/NOT-COLLECTED.txt',
    ]) assert.ok(listed.includes(expected), `${expected} in ${listed.join(', ')}`);
    assert.ok(ms < 60_000, `bundle in ${ms} ms`);
    // CLI outputs are the CLI's own tables, run with the caller's token against this control plane.
    const nodes = named(files, 'cluster/cli/nodes.txt')!.data.toString();
    assert.match(nodes, /^\$ strata nodes list\n/);
    assert.match(nodes, new RegExp(hostname()));
    assert.match(nodes, /# exit status 0/);
    // The agent's view: its own state; the nvmet tree is absent on this host, and it says why.
    const state = JSON.parse(named(files, 'server/agent/state.json')!.data.toString()) as { identity: { serverUUID: string } };
    assert.equal(state.identity.serverUUID, hostServerUUID);
    const notCollected = named(files, 'server/NOT-COLLECTED.txt')!.data.toString();
    if (!listed.includes('server/agent/nvmet-configfs.txt')) assert.match(notCollected, /agent\/nvmet-configfs\.txt: .*nvmet/i);
    if (!listed.includes('server/agent/mdstat')) assert.match(notCollected, /agent\/mdstat: \/proc\/mdstat: ENOENT/);
    if (!(await which('lspci'))) assert.match(notCollected, /system\/lspci\.txt: lspci is not installed/);
    // Days of logs: /var/log files are there (default: collected).
    assert.ok(listed.some((p) => p.startsWith('server/var-log/')), 'var-log collected by default');

    // No secret anywhere in the archive: agent secret keys, credentials' key material, tokens.
    const text = raw.toString('latin1');
    const secret = JSON.parse((await client.get(keys.agentSecret()).string())!) as AgentSecretRecord;
    assert.ok(!text.includes(secret.current.key), 'the agent secret key is not in the bundle');
    assert.ok(!text.includes(plane.adminToken()), 'the admin token is not in the bundle');
    const root = JSON.parse((await client.get(keys.credential('system', 'root')).string())!) as CredentialRecord;
    const pemBody = root.payload.split('\n').find((line) => line.length > 40)!;
    assert.ok(!text.includes(pemBody), 'credential key material is not in the bundle');
    assert.doesNotMatch(text, /eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}/, 'no JWT');
    assert.doesNotMatch(text, /-----BEGIN [A-Z ]*KEY-----/, 'no PEM key');
    // ...while the dump still has every key, its structure and non-secret values.
    const dump = named(files, 'cluster/etcd-dump.jsonl')!.data.toString().trim().split('\n').map((l) => JSON.parse(l) as { key?: string; value?: unknown });
    const agentSecret = dump.find((l) => l.key === keys.agentSecret())!.value as AgentSecretRecord;
    assert.equal(agentSecret.current.key, '<redacted>');
    assert.equal(agentSecret.current.id, secret.current.id);
    assert.ok(dump.some((l) => l.key === keys.server(hostServerUUID)), 'servers are in the dump');
  });

  it('collects another server by serverUUID: its nvmet tree (a trusted host\'s keys redacted), xz with UseHighCompression, N statistics cycles, no /var/log', async () => {
    // A host with in-band authentication keys, as in-band-auth writes them.
    const hostDir = join(nvmetRoot, 'hosts', 'nqn.2014-08.org.nvmexpress:uuid:bundle-trusted-host');
    mkdirSync(hostDir, { recursive: true });
    const hostKey = 'DHHC-1:00:bundleHostSecretKeyMaterial0123456789abcdefABCDEF0123456=:';
    const ctrlKey = 'DHHC-1:00:bundleCtrlSecretKeyMaterial0123456789abcdefABCDEF0123456=:';
    writeFileSync(join(hostDir, 'dhchap_key'), `${hostKey}\n`);
    writeFileSync(join(hostDir, 'dhchap_ctrl_key'), `${ctrlKey}\n`);
    writeFileSync(join(hostDir, 'dhchap_hash'), 'hmac(sha256)\n');
    const { res, raw, files } = await bundle(`?serverUUID=${otherServerUUID}&UseHighCompression=true&NumOfstatisticsToCapture=2&IntervalBetweenBEReadCycles=1&DontCollectlogs=true&LogFilename=case-42&NumOfDaysToCollectLogs=1`);
    assert.equal(res.headers.get('content-type'), 'application/x-xz');
    assert.match(res.headers.get('content-disposition') ?? '', /filename="case-42-storage-other-\d{8}-\d{6}\.txz"/);
    const listed = paths(files);
    assert.ok(listed.includes('server/statistics/cycle-1.txt') && listed.includes('server/statistics/cycle-2.txt'), listed.join(', '));
    assert.ok(!listed.some((p) => p.startsWith('server/var-log/')), 'DontCollectlogs');
    const tree = named(files, 'server/agent/nvmet-configfs.txt')!.data.toString();
    assert.ok(tree.startsWith(`# ${nvmetRoot}`), tree.slice(0, 200));
    assert.match(tree, /^subsystems\/$/m);
    assert.match(tree, /^hosts\/nqn\.2014-08\.org\.nvmexpress:uuid:bundle-trusted-host\/dhchap_key = <redacted>$/m);
    assert.match(tree, /^hosts\/nqn\.2014-08\.org\.nvmexpress:uuid:bundle-trusted-host\/dhchap_ctrl_key = <redacted>$/m);
    assert.match(tree, /^hosts\/nqn\.2014-08\.org\.nvmexpress:uuid:bundle-trusted-host\/dhchap_hash = "hmac\(sha256\)"$/m, 'non-secret attributes stay');
    const text = raw.toString('latin1');
    for (const key of [hostKey, ctrlKey]) assert.ok(!text.includes(key.slice(10, 40)), 'no in-band authentication key in the bundle');
    const options = JSON.parse(named(files, 'server/bundle-options.json')!.data.toString()) as Record<string, unknown>;
    assert.equal(options['days_of_logs'], 1);
    assert.equal(options['statistics_cycles'], 2);
    const state = JSON.parse(named(files, 'server/agent/state.json')!.data.toString()) as { identity: { serverUUID: string } };
    assert.equal(state.identity.serverUUID, otherServerUUID);
  });

  it('leaves the tar uncompressed with DontCompressOutput; CollectServicesLbcliEtcd keeps only services, CLI and etcd', async () => {
    const { res, files } = await bundle('?DontCompressOutput=true&CollectServicesLbcliEtcd=true&IoNice=true');
    assert.equal(res.headers.get('content-type'), 'application/x-tar');
    assert.match(res.headers.get('content-disposition') ?? '', /\.tar"$/);
    const listed = paths(files);
    assert.ok(listed.includes('cluster/etcd-dump.jsonl') && listed.includes('cluster/cli/volumes.txt'));
    assert.deepEqual(listed.filter((p) => p.startsWith('server/') && !p.startsWith('server/services/')).sort(), ['server/NOT-COLLECTED.txt', 'server/bundle-options.json']);
    assert.equal((JSON.parse(named(files, 'server/bundle-options.json')!.data.toString()) as { io_nice: boolean }).io_nice, true);
  });

  it('captures five seconds of CPU and packets with CaptureCpuAndTcpDump (or says tcpdump is absent)', async () => {
    const { files, ms } = await bundle('?CaptureCpuAndTcpDump=true&DontCollectlogs=true&SkipStatistics=true');
    const listed = paths(files);
    assert.ok(ms >= 5000, `the capture took ${ms} ms`);
    assert.ok(!listed.some((p) => p.startsWith('server/statistics/')), 'SkipStatistics');
    assert.ok(listed.includes('server/capture/top.txt'), listed.join(', '));
    if (await which('tcpdump')) assert.ok(listed.includes('server/capture/packets.pcap'));
    else assert.match(named(files, 'server/NOT-COLLECTED.txt')!.data.toString(), /capture\/packets\.pcap: tcpdump is not installed/);
  });

  it('stops the agent’s collection when the client goes away', async () => {
    const abort = new AbortController();
    const res = await get('?NumOfstatisticsToCapture=60&IntervalBetweenBEReadCycles=5&DontCollectlogs=true&DontCompressOutput=true', plane.adminToken(), abort.signal);
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    // The cluster part and the first entries of the server arrive, then the client leaves.
    let bytes = 0;
    while (bytes < 1024) bytes += (await reader.read()).value?.length ?? 0;
    const before = Date.now();
    abort.abort();
    await hostAgent.waitForLog((r) => r['msg'] === 'diagnostic bundle: collection cancelled', 10_000);
    assert.ok(Date.now() - before < 10_000);
  });

  it('strata bundle writes the archive with plain progress lines where stderr is no terminal; --output json reports it; an API refusal exits 1', async () => {
    const dir = temp('cli');
    const cli = (args: string[]) => new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [join(packageRoot, 'dist/cli/main.js'), ...args], {
        cwd: dir, env: { PATH: process.env['PATH'] ?? '', HOME: dir, STRATA_ENDPOINT: plane.apiUrl, STRATA_TOKEN: plane.adminToken() }, timeout: 60_000,
      }, (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
    });
    const out = join(dir, 'b.tgz');
    const run = await cli(['bundle', '--server', otherServerUUID, '--no-logs', '--cycles', '2', '--interval', '1', '--out', out]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, new RegExp(`^wrote ${out}: `));
    // stderr is a pipe here: plain progress lines (the first at once), no bar, no control characters.
    assert.match(run.stderr, /^strata: receiving strata-bundle-storage-other-\d{8}-\d{6}\.tgz: [\d.]+ [KMG]?i?B in [\d.]+ s \([\d.]+ [KMG]?i?B\/s\)$/m);
    assert.doesNotMatch(run.stderr, /[\r\u001b]/);
    const files = readTar(gunzipSync(readFileSync(out)));
    assert.ok(paths(files).includes('server/statistics/cycle-2.txt'));
    assert.ok(!paths(files).some((p) => p.startsWith('server/var-log/')));
    const json = await cli(['bundle', '--services-only', '--compression', 'none', '--no-progress', '--output', 'json']);
    assert.equal(json.code, 0, json.stderr);
    const result = JSON.parse(json.stdout) as { file: string; bytes: number };
    assert.match(result.file, /^strata-bundle-.*\.tar$/);
    assert.equal(statSync(join(dir, result.file)).size, result.bytes);
    const refused = await cli(['bundle', '--server', '3f1c0c7e-1111-4222-8333-944455556666']);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /not found \(HTTP 404/);
  });

  it('refuses bad input with 400, an unknown server with 404, a viewer with 403', async () => {
    for (const query of [
      '?NumOfDaysToCollectLogs=two', '?NumOfDaysToCollectLogs=0', '?IntervalBetweenBEReadCycles=-1', '?NumOfstatisticsToCapture=1000',
      '?SkipStatistics=maybe', '?LogFilename=with%20space', '?serverUUID=not-a-uuid', '?DontCompressOutput=true&UseHighCompression=true',
      '?NumOfstatisticsToCapture=100&IntervalBetweenBEReadCycles=3600',
    ]) {
      const res = await get(query);
      const body = (await res.json()) as { code: number; error: string };
      assert.equal(res.status, 400, `${query}: ${JSON.stringify(body)}`);
      assert.equal(typeof body.error, 'string');
    }
    const unknown = await get('?serverUUID=3f1c0c7e-1111-4222-8333-944455556666');
    assert.equal(unknown.status, 404);
    const viewer = await projectToken(client, 'system', ['system:cluster-viewer']);
    assert.equal((await get('', viewer)).status, 403);
    assert.equal((await fetch(`${plane.apiUrl}/api/v2/logs`)).status, 401);
  });
});
