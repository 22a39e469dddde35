// Runs the real compiled daemon (dist/agent/main.js) as a child process against a private etcd,
// a fixture sysfs, and a control-plane endpoint where nothing listens.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient, parseRecord } from '../lib/etcd/client.js';
import { keys } from '../lib/etcd/keys.js';
import type { NodeRecord, PresenceRecord, ServerRecord } from '../lib/records.js';
import { startEtcd, type TestEtcd } from '../test/helpers/etcd.js';
import { freePort } from '../test/helpers/ports.js';
import { createFakeSysfs, type FakeSysfs } from '../test/helpers/sysfs-fixture.js';
import { waitUntil } from '../test/helpers/wait.js';

const mainJs = fileURLToPath(new URL('./main.js', import.meta.url));
const TTL = 2;

interface AgentProcess {
  readonly child: ChildProcess;
  readonly lines: () => Record<string, unknown>[];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

describe('strata-agent daemon (dist/agent/main.js)', () => {
  let etcd: TestEtcd;
  let observer: Etcd3;
  let sysfs: FakeSysfs;
  let stateDir: string;
  let deadControlPlane: string;
  const children: ChildProcess[] = [];

  before(async () => {
    etcd = await startEtcd();
    observer = createEtcdClient([etcd.endpoint]);
    sysfs = createFakeSysfs();
    sysfs.addController({ name: 'nvme1', serial: 'DATA-1', pciAddress: '0000:01:00.0', namespaces: [{ name: 'nvme1n1', sectors: 2000 }] });
    sysfs.addController({ name: 'nvme0', serial: 'JOURNAL-1', pciAddress: '0000:02:00.0', namespaces: [{ name: 'nvme0n1', sectors: 1000 }] });
    stateDir = mkdtempSync(join(tmpdir(), 'strata-agent-state-'));
    deadControlPlane = `127.0.0.1:${await freePort()}`;
  });
  after(async () => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    observer.close();
    await etcd.stop();
    sysfs.cleanup();
    rmSync(stateDir, { recursive: true, force: true });
  });

  function spawnAgent(extraArgs: string[] = []): AgentProcess {
    const args = [
      mainJs,
      '--etcd-endpoints', etcd.endpoint,
      '--control-plane-endpoints', deadControlPlane,
      '--state-dir', stateDir,
      '--sysfs-root', sysfs.root,
      '--mounts-path', sysfs.mountsPath,
      '--swaps-path', sysfs.swapsPath,
      '--advertise-address', '192.0.2.10',
      '--discovery-listen-address', '127.0.0.1',
      '--discovery-port', '0',
      '--lease-ttl-seconds', String(TTL),
      '--hostname', 'fixture-host',
      '--data-devices', 'DATA-1',
      '--journal-device', 'JOURNAL-1',
      '--log-level', 'info',
      ...extraArgs,
    ];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NOTIFY_SOCKET: '' } });
    children.push(child);
    const lines: Record<string, unknown>[] = [];
    let buffer = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let newline: number;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        try {
          lines.push(JSON.parse(line) as Record<string, unknown>);
        } catch {
          lines.push({ raw: line });
        }
      }
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => {
        if (stderr) lines.push({ stderr });
        resolve({ code, signal });
      }),
    );
    return { child, lines: () => lines, exited };
  }

  const presenceOf = async (serverUUID: string) =>
    parseRecord<PresenceRecord>('presence', await observer.get(keys.presence(serverUUID)).string());

  let serverUUID = '';
  let nodeUUIDs: string[] = [];

  it('registers, then on SIGTERM revokes its presence and exits 0', async () => {
    const agent = spawnAgent();
    const started = await waitUntil(
      () => agent.lines().find((l) => l['event'] === 'agent.started'),
      'the agent.started log record',
      15_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${JSON.stringify(agent.lines(), null, 1)}`);
    });
    serverUUID = started['serverUUID'] as string;
    nodeUUIDs = started['nodeUUIDs'] as string[];
    assert.ok(serverUUID && nodeUUIDs.length === 1);
    assert.deepEqual(started['devices'], ['DATA-1', 'JOURNAL-1']);

    const presence = await presenceOf(serverUUID);
    assert.deepEqual(presence?.nodeUUIDs, nodeUUIDs);
    assert.equal(presence?.hostname, 'fixture-host');
    const server = parseRecord<ServerRecord>('s', await observer.get(keys.server(serverUUID)).string());
    assert.deepEqual(server?.endpoints, ['192.0.2.10']);
    const node = parseRecord<NodeRecord>('n', await observer.get(keys.node(nodeUUIDs[0] as string)).string());
    // The discovery controller listens (on a free port here), so its endpoint is advertised at
    // the advertise address, as the discovery endpoint and as the node's NVMe/TCP endpoint (the
    // one port a host reaches every volume through; each volume has its own port).
    assert.match(node?.discoveryEndpoint ?? '', /^192\.0\.2\.10:\d+$/);
    assert.equal(node?.nvmeEndpoint, node?.discoveryEndpoint);
    assert.deepEqual(node?.failureDomains, ['fixture-host']);
    assert.deepEqual(node?.managedDeviceSerials, ['DATA-1']);
    assert.equal(node?.journalDeviceSerial, 'JOURNAL-1');
    const identity = JSON.parse(readFileSync(join(stateDir, 'identity.json'), 'utf8')) as { serverUUID: string };
    assert.equal(identity.serverUUID, serverUUID);

    const signalledAt = Date.now();
    agent.child.kill('SIGTERM');
    const { code } = await agent.exited;
    assert.equal(code, 0);
    assert.ok(Date.now() - signalledAt < 5000, 'exits within a few seconds');
    assert.equal(await presenceOf(serverUUID), null, 'presence revoked, not left to expire');
  });

  it('keeps its identity across restarts; a SIGKILLed agent loses presence within TTL + 1 s', async () => {
    assert.ok(serverUUID, 'runs after the first test');
    const agent = spawnAgent();
    const started = await waitUntil(() => agent.lines().find((l) => l['event'] === 'agent.started'), 'agent.started', 15_000);
    assert.equal(started['serverUUID'], serverUUID);
    assert.deepEqual(started['nodeUUIDs'], nodeUUIDs);
    assert.ok(await presenceOf(serverUUID));

    agent.child.kill('SIGKILL');
    const killedAt = Date.now();
    await agent.exited;
    await waitUntil(async () => (await presenceOf(serverUUID)) === null, 'presence to expire', (TTL + 1) * 1000);
    assert.ok(Date.now() - killedAt <= (TTL + 1) * 1000);
  });

  it('prints --help and exits 0; rejects an invalid configuration with exit code 2', () => {
    const help = spawnSync(process.execPath, [mainJs, '--help'], { encoding: 'utf8' });
    assert.equal(help.status, 0);
    assert.match(help.stdout, /--lease-ttl-seconds/);
    assert.match(help.stdout, /STRATA_ETCD_ENDPOINTS/);
    const bad = spawnSync(process.execPath, [mainJs, '--lease-ttl-seconds', '1', '--state-dir', stateDir], { encoding: 'utf8' });
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /leaseTtlSeconds/);
    const clash = spawnSync(process.execPath, [mainJs, '--data-devices', 'A,B', '--journal-device', 'B', '--state-dir', stateDir], {
      encoding: 'utf8',
    });
    assert.equal(clash.status, 2);
    assert.match(clash.stderr, /journalDevice B is also listed in dataDevices/);
  });
});
