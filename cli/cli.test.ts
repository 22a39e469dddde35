// The built CLI (dist/cli/main.js) as a user runs it, against a real etcd and a real control plane
// (its own process). No agent runs: the test writes what an agent's presence, pool and volume
// reports would put in etcd (test/helpers/records.ts), so volumes are placed and, when the test
// says so, reported served; the control plane's own cluster manager does the rest.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { randomDhchapSecret } from '../lib/contract/dhchap.js';
import { randomTlsPsk } from '../lib/contract/nvme-tls-psk.js';
import { createEtcdClient } from '../lib/etcd/client.js';
import { keys } from '../lib/etcd/keys.js';
import { packageRoot } from '../lib/paths.js';
import { freePort } from '../lib/ports.js';
import type { NodeRecord, VolumeStatusRecord } from '../lib/records.js';
import { startEtcd, type TestEtcd } from '../test/helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../test/helpers/processes.js';
import { joinServer, nodePoolRecord, putRecord, reportInventory } from '../test/helpers/records.js';
import { waitUntil } from '../test/helpers/wait.js';

const CLI = join(packageRoot, 'dist', 'cli', 'main.js');
const TiB = 1024n ** 4n;
const HOST_A = 'nqn.2014-08.org.nvmexpress:uuid:6d8a4c57-1a2b-4c3d-8e9f-0a1b2c3d4e5f';
const HOST_B = 'nqn.2016-06.io.example:host-b';
const SERVER_ADDRESS = '10.9.8.7';
/** A report at this generation counts for every generation the test's volumes reach. */
const ANY_GENERATION = 1_000_000;

interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

interface ApiVolume {
  UUID: string;
  name: string;
  state: string;
  size: string;
  acl: { values: string[] };
}

describe('strata CLI against a real control plane', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  let kv: Etcd3;
  let home: string;
  let token: string;
  let node: NodeRecord;
  const outputs: string[] = [];

  /** Runs the CLI; the token comes from HOME/.config/strata/token unless env or args say otherwise. */
  function strata(args: readonly string[], env: Record<string, string> = {}): Promise<CliRun> {
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [CLI, ...args],
        { cwd: home, env: { PATH: process.env['PATH'] ?? '', HOME: home, STRATA_ENDPOINT: plane.apiUrl, ...env }, timeout: 30_000 },
        (error, stdout, stderr) => {
          outputs.push(stdout, stderr);
          const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
          resolve({ code, stdout, stderr });
        },
      );
    });
  }
  const ok = async (args: readonly string[], env?: Record<string, string>): Promise<string> => {
    const run = await strata(args, env);
    assert.equal(run.code, 0, `strata ${args.join(' ')}: exit ${run.code}\n${run.stderr}`);
    return run.stdout;
  };

  async function api<T>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
    const res = await fetch(`${plane.apiUrl}/api/v2${path}`, {
      method,
      headers: { Authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as T };
  }
  const volumeOf = async (uuid: string) => (await api<ApiVolume>('GET', `/volumes/${uuid}`)).body;
  const inState = (uuid: string, state: string) =>
    waitUntil(async () => ((await volumeOf(uuid)).state === state ? true : undefined), `volume ${uuid} ${state}`, 15_000);

  /** What the node's agent would report: the volume served (or torn down), at any generation. */
  async function report(uuid: string, state: VolumeStatusRecord['state'], snapshots: VolumeStatusRecord['snapshots'] = [], connectedHosts: VolumeStatusRecord['connectedHosts'] = []): Promise<void> {
    const status: VolumeStatusRecord = {
      volumeUUID: uuid, nodeUUID: node.UUID, generation: ANY_GENERATION, state, error: '', snapshots, connectedHosts,
      logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: new Date().toISOString(),
    };
    await putRecord(kv, keys.volumeStatus(uuid, node.UUID), status);
  }
  async function createAvailable(name: string): Promise<string> {
    const created = JSON.parse(await ok(['volumes', 'create', '--project', 'default', '--name', name, '--size', '1GiB', '-o', 'json'])) as ApiVolume;
    await report(created.UUID, 'Served');
    await inState(created.UUID, 'Available');
    return created.UUID;
  }

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    token = plane.adminToken();
    home = mkdtempSync(join(tmpdir(), 'strata-cli-'));
    mkdirSync(join(home, '.config', 'strata'), { recursive: true });
    writeFileSync(join(home, '.config', 'strata', 'token'), `${token}\n`, { mode: 0o600 });
    // One server with one Active node whose pool has room, as its agent would have reported.
    kv = createEtcdClient([etcd.endpoint]);
    const joined = await joinServer(kv, {
      server: { endpoints: [SERVER_ADDRESS] },
      nodes: [{ nvmeEndpoint: `${SERVER_ADDRESS}:4420`, discoveryEndpoint: `${SERVER_ADDRESS}:8009`, managedDeviceSerials: ['CLI-SN0'] }],
    });
    node = joined.nodes[0]!;
    await reportInventory(kv, joined.server.UUID, { devices: [{ serial: 'CLI-SN0', sizeBytes: String(TiB) }] });
    await putRecord(kv, keys.nodePool(node.UUID), nodePoolRecord(node, { rawBytes: String(TiB), arrayBytes: String(TiB), capacityBytes: String(TiB), freeBytes: String(TiB) }));
  });
  after(async () => {
    kv?.close();
    await plane?.stop();
    if (plane) removeDir(plane.stateDir);
    await etcd?.stop();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('cluster info prints the cluster; --output json is the API\'s JSON', async () => {
    const cluster = (await api<{ UUID: string; subsystemNQN: string; clusterName: string }>('GET', '/cluster')).body;
    const table = await ok(['cluster', 'info']);
    assert.match(table, new RegExp(`^UUID:\\s+${cluster.UUID}$`, 'm'));
    assert.match(table, new RegExp(`^Name:\\s+${cluster.clusterName}$`, 'm'));
    assert.match(table, /^Health:\s+\S+/m);
    const json = JSON.parse(await ok(['cluster', 'info', '--output', 'json'])) as typeof cluster;
    assert.equal(json.UUID, cluster.UUID);
    assert.equal(json.subsystemNQN, cluster.subsystemNQN);
  });

  let vol1: string;
  it('volumes create answers Creating; list shows the volume in the table and in JSON; get finds it by project/name', async () => {
    const created = await strata(['volumes', 'create', '--project', 'default', '--name', 'cli-vol1', '--size', '1GiB', '--acl', HOST_A]);
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stdout, /^State:\s+Creating$/m);
    assert.match(created.stdout, /^Size:\s+1 GiB \(1073741824 bytes\)$/m);
    assert.match(created.stdout, new RegExp(`^ACL:\\s+${HOST_A}$`, 'm'));
    vol1 = /^UUID:\s+(\S+)$/m.exec(created.stdout)![1]!;
    assert.equal((await volumeOf(vol1)).name, 'cli-vol1');

    const second = JSON.parse(await ok(['volumes', 'create', '--project', 'default', '--name', 'cli-vol2', '--size', '2147483648', '-o', 'json'])) as ApiVolume;
    assert.equal(second.state, 'Creating');
    assert.equal(second.size, '2147483648');

    const table = await ok(['volumes', 'list']);
    const [header, ...rows] = table.trimEnd().split('\n');
    assert.match(header!, /^UUID\s+PROJECT\s+NAME\s+SIZE\s+STATE\s+PROTECTION\s+REPLICAS\s+ACL$/);
    const row = rows.find((r) => r.startsWith(vol1));
    assert.ok(row, table);
    assert.match(row, /\bdefault\s+cli-vol1\s+1 GiB\s+Creating\s+Unknown\s+1\s+1 host$/);
    assert.ok(rows.some((r) => r.includes(second.UUID) && r.includes('2 GiB') && r.endsWith('ALLOW_NONE')), table);

    const listed = JSON.parse(await ok(['volumes', 'list', '-o', 'json'])) as { volumes: ApiVolume[] };
    assert.deepEqual(listed.volumes.map((v) => v.name).sort(), ['cli-vol1', 'cli-vol2']);
    // Pages of one volume each, followed to the end.
    const paged = JSON.parse(await ok(['volumes', 'list', '--project', 'default', '--all-pages', '--limit', '1', '-o', 'json'])) as { volumes: ApiVolume[] };
    assert.deepEqual(paged.volumes.map((v) => v.name).sort(), ['cli-vol1', 'cli-vol2']);
    const onePage = await strata(['volumes', 'list', '--limit', '1']);
    assert.match(onePage.stderr, /more volumes may follow: add --all-pages/);

    assert.match(await ok(['volumes', 'get', 'default/cli-vol1']), new RegExp(`^UUID:\\s+${vol1}$`, 'm'));
    const byUuid = JSON.parse(await ok(['volumes', 'get', vol1, '-o', 'json'])) as ApiVolume;
    assert.deepEqual(byUuid, await volumeOf(vol1));
  });

  it('volumes acl add then remove changes the volume\'s ACL (If-Match read-modify-write)', async () => {
    await report(vol1, 'Served');
    await inState(vol1, 'Available');
    const added = await strata(['volumes', 'acl', 'add', 'default/cli-vol1', HOST_B]);
    assert.equal(added.code, 0, added.stderr);
    assert.match(added.stdout, new RegExp(`ACL of default/cli-vol1 \\(${vol1}\\): ${HOST_A}, ${HOST_B}`));
    assert.deepEqual((await volumeOf(vol1)).acl.values, [HOST_A, HOST_B]);

    await inState(vol1, 'Available');
    await ok(['volumes', 'acl', 'remove', vol1, HOST_A]);
    assert.deepEqual((await volumeOf(vol1)).acl.values, [HOST_B]);

    // Removing the last host leaves no host allowed (an empty list would mean "unchanged" to the API).
    await inState(vol1, 'Available');
    await ok(['volumes', 'acl', 'remove', vol1, HOST_B]);
    assert.deepEqual((await volumeOf(vol1)).acl.values, ['ALLOW_NONE']);
    await inState(vol1, 'Available');
    const again = await strata(['volumes', 'acl', 'remove', vol1, HOST_B]);
    assert.equal(again.code, 0);
    assert.match(again.stderr, /not in the ACL .* nothing to change/);
    await ok(['volumes', 'acl', 'add', vol1, HOST_A]);
    assert.deepEqual((await volumeOf(vol1)).acl.values, [HOST_A]);
  });

  it('volumes connect-info prints an nvme connect line per path', async () => {
    await inState(vol1, 'Available');
    const volume = (await api<{ nodeList: string[] }>('GET', `/volumes/${vol1}`)).body;
    assert.deepEqual(volume.nodeList, [node.UUID]);
    const out = await ok(['volumes', 'connect-info', 'default/cli-vol1', '--host-nqn', HOST_A]);
    assert.match(out, new RegExp(`^nvme connect -t tcp -a ${SERVER_ADDRESS} -s \\d+ -n nqn\\.\\S+:vol:${vol1} -q ${HOST_A}$`, 'm'));
    assert.match(out, new RegExp(`^# on the host the volume appears as /dev/disk/by-id/nvme-uuid\\.${vol1}$`, 'm'));
    assert.match(out, new RegExp(`^# or every volume this host may reach, through discovery: nvme connect-all -t tcp -a ${SERVER_ADDRESS} -s 8009 -q ${HOST_A} --persistent$`, 'm'));
    assert.match(out, /^# connecting to the cluster subsystem nqn\.\S+ for I\/O is refused: .*no per-host namespace masking/m);
  });

  it('volumes resize --wait waits until the volume is Available at the new size', async () => {
    const out = await ok(['volumes', 'resize', 'default/cli-vol1', '2GiB', '--wait']);
    assert.match(out, /^State:\s+Available$/m);
    assert.match(out, /^Size:\s+2 GiB \(2147483648 bytes\)$/m);
  });

  it('volumes create --wait gives up after --wait-timeout with progress on stderr (no agent serves it)', async () => {
    const run = await strata(['volumes', 'create', '--project', 'default', '--name', 'cli-vol3', '--size', '1GiB', '--wait', '--wait-timeout', '2s']);
    assert.equal(run.code, 1, run.stderr);
    assert.equal(run.stdout, '');
    assert.match(run.stderr, /waiting for volume default\/cli-vol3 \(\S+\) to become Available: Creating/);
    assert.match(run.stderr, /timed out after 2 s waiting for volume default\/cli-vol3 .*; it is still Creating/);
  });

  it('snapshots create, list and delete', async () => {
    const created = await ok(['snapshots', 'create', '--volume', 'cli-vol1', '--name', 'cli-snap1', '--retention', '7d']);
    assert.match(created, /^snapshot default\/cli-snap1 \(\S+\) of volume cli-vol1: Creating$/m);
    const table = await ok(['snapshots', 'list', '--project', 'default']);
    assert.match(table, /cli-snap1\s+cli-vol1\s+2 GiB\s+Creating\s+\S+ \S+\s+1w$/m);
    const { snapshots } = JSON.parse(await ok(['snapshots', 'list', '--volume', vol1, '-o', 'json'])) as { snapshots: { UUID: string; name: string }[] };
    assert.deepEqual(snapshots.map((s) => s.name), ['cli-snap1']);
    // The node reports the snapshot taken, so it becomes Available and may be deleted.
    await report(vol1, 'Served', [{ snapshotUUID: snapshots[0]!.UUID, state: 'Available', error: '' }]);
    await waitUntil(async () => (await api<{ state: string }>('GET', `/projects/default/snapshots/${snapshots[0]!.UUID}`)).body.state === 'Available' || undefined, 'snapshot Available', 15_000);
    assert.match(await ok(['snapshots', 'delete', 'default/cli-snap1']), /deleting snapshot default\/cli-snap1/);
    const after = await api<{ state?: string }>('GET', `/projects/default/snapshots/${snapshots[0]!.UUID}`);
    assert.ok(after.status === 404 || after.body.state === 'Deleting', JSON.stringify(after));
  });

  it('volumes delete: Deleting at once; --wait until it is gone', async () => {
    const vol4 = await createAvailable('cli-vol4');
    assert.match(await ok(['volumes', 'delete', 'default/cli-vol4']), /^deleting volume default\/cli-vol4 \(\S+\): state Deleting/m);
    const deleting = await api<{ state?: string }>('GET', `/volumes/${vol4}`);
    assert.ok(deleting.status === 404 || deleting.body.state === 'Deleting', JSON.stringify(deleting));

    // The node has torn it down (reports Absent), so the cluster manager removes it.
    const vol5 = await createAvailable('cli-vol5');
    await report(vol5, 'Absent');
    const gone = await strata(['volumes', 'delete', vol5, '--wait', '--wait-timeout', '20s']);
    assert.equal(gone.code, 0, gone.stderr);
    assert.match(gone.stdout, new RegExp(`^deleted volume default/cli-vol5 \\(${vol5}\\)$`, 'm'));
    assert.equal((await api('GET', `/volumes/${vol5}`)).status, 404);
  });

  it('nodes, servers, devices, events and projects list', async () => {
    const nodes = await ok(['nodes', 'list']);
    assert.match(nodes, new RegExp(`^${node.UUID}\\s+${node.name}\\s+Active\\b`, 'm'));
    assert.match(await ok(['servers', 'list']), new RegExp(`^${node.serverUUID}\\s`, 'm'));
    assert.match(await ok(['devices', 'list']), /^CLI-SN0\s+Test NVMe SSD\s+1 TiB\s+Data\b/m);
    assert.match(await ok(['devices', 'list', '--bytes']), /^CLI-SN0\s+Test NVMe SSD\s+1099511627776\s/m);
    const events = await ok(['events', 'list', '--project', 'default', '--since', '1h']);
    assert.match(events, /\bVolumeCreated\s+volume default\/cli-vol1\b/);
    assert.match(await ok(['projects', 'list']), /^default\s/m);
    const projects = JSON.parse(await ok(['projects', 'list', '-o', 'json'])) as unknown;
    assert.deepEqual(projects, (await api('GET', '/projects')).body);
  });

  it('feature flags, admin endpoints, connected hosts and policies: list, get, and the flag and policy actions', async () => {
    const flags = await ok(['feature-flags', 'list']);
    assert.match(flags, /^NAME\s+ENABLED$/m);
    const flagList = JSON.parse(await ok(['feature-flags', 'list', '-o', 'json'])) as unknown;
    assert.deepEqual(flagList, (await api('GET', '/featureFlags')).body);
    const [name] = Object.keys((flagList as { featureFlags: Record<string, unknown> }).featureFlags).filter((n) => n !== 'in-band-authentication');
    assert.ok(name, 'a flag that can be enabled');
    assert.match(await ok(['feature-flags', 'enable', name]), new RegExp(`^${name}\\s+true$`, 'm'));
    assert.deepEqual((await api('GET', `/featureFlags/${name}`)).body, { name, enabled: true });
    assert.match(await ok(['feature-flags', 'disable', name]), new RegExp(`^${name}\\s+false$`, 'm'));
    assert.deepEqual(JSON.parse(await ok(['feature-flags', 'get', name, '-o', 'json'])), { name, enabled: false });

    await api('POST', '/adminEndpoints', { port: 9443, ips: ['10.1.2.3'] });
    assert.match(await ok(['admin-endpoints', 'list']), /^9443\s+10\.1\.2\.3$/m);
    assert.deepEqual(JSON.parse(await ok(['admin-endpoints', 'get', '9443', '-o', 'json'])), (await api('GET', '/adminEndpoints/9443')).body);

    assert.deepEqual(JSON.parse(await ok(['connected-hosts', 'list', '-o', 'json'])), (await api('GET', '/connectedHosts')).body);
    const missingHost = await strata(['connected-hosts', 'get', 'nqn.2014-08.org.example:nobody']);
    assert.equal(missingHost.code, 1);

    const policy = (await api('POST', '/policies', { name: 'cli-gold', description: 'cli test', qoSRateLimitPolicy: { limitIOPS: { writeIOPSLimit: 1000, readIOPSLimit: 2000 } } })).body as { UUID: string };
    assert.match(await ok(['policies', 'list']), new RegExp(`^${policy.UUID}\\s+cli-gold\\s+Active\\s+Global\\s+-\\s+limitIOPS`, 'm'));
    assert.equal((JSON.parse(await ok(['policies', 'get', policy.UUID, '-o', 'json'])) as { name: string }).name, 'cli-gold');
    assert.deepEqual(JSON.parse(await ok(['policies', 'enforcement', policy.UUID, '-o', 'json'])), { volumes: [] });
    assert.match(await ok(['policies', 'delete', policy.UUID]), /^deleted policy /);
    assert.equal((await strata(['policies', 'get', policy.UUID])).code, 1);
  });

  it('volumes clone and rollback from a snapshot; snapshots get; volumes wait --protected', async () => {
    // The feature-flag test above leaves the first flag, event-log, disabled: events are checked here.
    await ok(['feature-flags', 'enable', 'event-log']);
    const vol6 = await createAvailable('cli-vol6');
    const snap = JSON.parse(await ok(['snapshots', 'create', '--volume', 'cli-vol6', '--name', 'cli-snap6', '-o', 'json'])) as { UUID: string };
    await report(vol6, 'Served', [{ snapshotUUID: snap.UUID, state: 'Available', error: '' }]);
    await waitUntil(async () => (await api<{ state: string }>('GET', `/projects/default/snapshots/${snap.UUID}`)).body.state === 'Available' || undefined, 'snapshot Available', 15_000);
    assert.deepEqual(JSON.parse(await ok(['snapshots', 'get', 'default/cli-snap6', '-o', 'json'])), (await api('GET', `/projects/default/snapshots/${snap.UUID}`)).body);
    assert.match(await ok(['snapshots', 'get', snap.UUID]), /^State:\s+Available$/m);

    const clone = JSON.parse(await ok(['volumes', 'clone', 'cli-snap6', '--name', 'cli-clone6', '-o', 'json'])) as ApiVolume & { sourceSnapshotName: string };
    assert.equal(clone.state, 'Creating');
    const cloned = (await api<{ sourceSnapshotName: string; size: string; name: string }>('GET', `/volumes/${clone.UUID}`)).body;
    assert.deepEqual([cloned.name, cloned.sourceSnapshotName, cloned.size], ['cli-clone6', 'cli-snap6', '1073741824']);

    // Grown after the snapshot, then rolled back: the size is the snapshot's again.
    await ok(['volumes', 'resize', 'cli-vol6', '2GiB', '--wait']);
    const rolled = await strata(['volumes', 'rollback', 'default/cli-vol6', 'cli-snap6', '--wait', '--wait-timeout', '20s']);
    assert.equal(rolled.code, 0, rolled.stderr);
    assert.match(rolled.stderr, /rolling back to snapshot cli-snap6/);
    assert.match(rolled.stdout, /^State:\s+Available$/m);
    assert.match(rolled.stdout, /^Size:\s+1 GiB \(1073741824 bytes\)$/m);
    const events = (await api<{ events: { EventName: string }[] }>('GET', '/projects/default/events?limit=1000')).body.events;
    assert.ok(events.some((e) => e.EventName === 'VolumeRollbackRequested'), `the rollback went through the API: ${events.map((e) => e.EventName).join(', ')}`);

    const waited = JSON.parse(await ok(['volumes', 'wait', vol6, '--protected', '--wait-timeout', '20s', '-o', 'json'])) as { state: string; protectionState: string };
    assert.deepEqual([waited.state, waited.protectionState], ['Available', 'FullyProtected']);
  });

  it('devices add gives a device to the node; --wait follows it (here: stays Adding, no agent) and get shows it', async () => {
    await reportInventory(kv, node.serverUUID, { devices: [{ serial: 'CLI-SN0', sizeBytes: String(TiB) }, { serial: 'CLI-SN1', sizeBytes: String(TiB) }] });
    const added = await strata(['devices', 'add', 'CLI-SN1', '--node', node.UUID]);
    assert.equal(added.code, 0, added.stderr);
    assert.match(added.stdout, /NVMe device CLI-SN1 given to node/);
    const nodeAfter = (await api<{ UUID: string }>('GET', `/nodes/${node.UUID}`)).body;
    const device = JSON.parse(await ok(['devices', 'get', 'CLI-SN1', '-o', 'json'])) as { nodeUUID: string; state: string; deviceUsage: string };
    assert.deepEqual([device.nodeUUID, device.deviceUsage, device.state], [nodeAfter.UUID, 'Data', 'Adding']);
    const waiting = await strata(['devices', 'add', 'CLI-SN1', '--node', node.UUID, '--wait', '--wait-timeout', '2s']);
    assert.equal(waiting.code, 1);
    assert.match(waiting.stderr, /waiting for NVMe device CLI-SN1 to be Healthy in node \S+'s pool: Adding/);
    assert.match(waiting.stderr, /timed out after 2 s/);
  });

  it('events list --follow prints new events as they come, once each (JSON Lines)', async () => {
    await ok(['feature-flags', 'enable', 'event-log']);
    const child = spawn(process.execPath, [CLI, 'events', 'list', '--follow', '--since', '1s', '--interval', '300ms', '-o', 'json'], {
      cwd: home, env: { PATH: process.env['PATH'] ?? '', HOME: home, STRATA_ENDPOINT: plane.apiUrl },
    });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    try {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const created = await api<{ UUID: string }>('POST', '/projects/default/volumes', { name: 'cli-follow', size: '1GiB' });
      assert.equal(created.status, 200, JSON.stringify(created.body));
      await waitUntil(() => (stdout.includes(created.body.UUID) && stdout.includes('VolumeCreated') ? true : undefined), 'the VolumeCreated event on stdout', 15_000);
      await new Promise((resolve) => setTimeout(resolve, 1000)); // more polls: nothing printed twice
    } finally {
      child.kill('SIGTERM');
    }
    outputs.push(stdout);
    const printed = stdout.trim().split('\n').map((line) => JSON.parse(line) as { ID: string; EventName: string });
    assert.equal(new Set(printed.map((e) => e.ID)).size, printed.length, 'each event once');
    assert.ok(printed.some((e) => e.EventName === 'VolumeCreated'));
  });

  it('policies create and update; admin-endpoints create, update and delete', async () => {
    const created = JSON.parse(await ok(['policies', 'create', '--name', 'cli-silver', '--description', 'cli', '--write-iops', '100', '--read-iops', '200', '-o', 'json'])) as { UUID: string };
    const stored = (await api<{ name: string; QoSRateLimitPolicy: Record<string, unknown> }>('GET', `/policies/${created.UUID}`)).body;
    assert.equal(stored.name, 'cli-silver');
    assert.deepEqual(stored.QoSRateLimitPolicy['limitIOPS'], { writeIOPSLimit: 100, readIOPSLimit: 200 });
    const updated = await ok(['policies', 'update', created.UUID, '--description', 'now bandwidth', '--write-bw', '10']);
    assert.match(updated, new RegExp(`^${created.UUID}\\s+cli-silver\\s+Active\\s+Global\\s+-\\s+limitBw writeBWLimit=10 readBWLimit=0$`, 'm'));
    const after = (await api<{ description: string; QoSRateLimitPolicy: Record<string, unknown> }>('GET', `/policies/${created.UUID}`)).body;
    assert.equal(after.description, 'now bandwidth');
    assert.deepEqual(after.QoSRateLimitPolicy['limitBw'], { writeBWLimit: 10, readBWLimit: 0 });
    const twoKinds = await strata(['policies', 'create', '--name', 'x', '--write-iops', '1', '--write-bw', '1']);
    assert.equal(twoKinds.code, 2);
    await ok(['policies', 'delete', created.UUID]);

    assert.match(await ok(['admin-endpoints', 'create', '9444', '--ip', '10.1.2.4']), /^9444\s+10\.1\.2\.4$/m);
    assert.deepEqual((await api('GET', '/adminEndpoints/9444')).body, { port: 9444, ips: ['10.1.2.4'], ETag: (await api<{ ETag: string }>('GET', '/adminEndpoints/9444')).body.ETag });
    assert.match(await ok(['admin-endpoints', 'update', '9444', '--ip', '10.1.2.5', 'fd00::1']), /^9444\s+10\.1\.2\.5, fd00::1$/m);
    assert.deepEqual((await api<{ ips: string[] }>('GET', '/adminEndpoints/9444')).body.ips, ['10.1.2.5', 'fd00::1']);
    assert.deepEqual(JSON.parse(await ok(['admin-endpoints', 'delete', '9444', '-o', 'json'])), {});
    assert.equal((await api('GET', '/adminEndpoints/9444')).status, 404);
  });

  it('projects create, update, get, delete; credentials create, list, get, delete', async () => {
    assert.match(await ok(['projects', 'create', 'cli-proj', '--description', 'made by the CLI']), /^cli-proj\s+\S+\s+-\s+made by the CLI$/m);
    await ok(['projects', 'update', 'cli-proj', '--description', 'changed']);
    assert.equal((await api<{ description: string }>('GET', '/projects/cli-proj')).body.description, 'changed');
    assert.deepEqual(JSON.parse(await ok(['projects', 'get', 'cli-proj', '-o', 'json'])), (await api('GET', '/projects/cli-proj')).body);

    const keyFile = join(home, 'key.pem');
    writeFileSync(keyFile, generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey.export({ type: 'spki', format: 'pem' }));
    assert.match(await ok(['credentials', 'create', 'cli-key', '--project', 'cli-proj', '--public-key-file', keyFile]), /^cli-proj\s+cli-key\s+RS256PubKey$/m);
    assert.deepEqual(JSON.parse(await ok(['credentials', 'list', '--project', 'cli-proj', '-o', 'json'])), (await api('GET', '/projects/cli-proj/credentials')).body);
    assert.match(await ok(['credentials', 'get', 'cli-key', '--project', 'cli-proj']), /BEGIN PUBLIC KEY/);
    await ok(['credentials', 'delete', 'cli-key', '--project', 'cli-proj']);
    assert.equal((await api('GET', '/projects/cli-proj/credentials/cli-key')).status, 404);
    assert.match(await ok(['projects', 'delete', 'cli-proj']), /^deleted project cli-proj$/m);
    assert.equal((await api('GET', '/projects/cli-proj')).status, 404);
  });

  it('trusted-hosts create, list, get, secrets, rotate, delete; hosts list; kernel-capabilities; in-band-auth enable refused naming the node', async () => {
    const HOST_NQN = 'nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1111-4222-8333-444455556666';
    const [first, second] = [randomDhchapSecret(), randomDhchapSecret()];
    const secretFile = join(home, 'host.secret');
    writeFileSync(secretFile, `${first}\n`, { mode: 0o600 });
    assert.match(await ok(['trusted-hosts', 'create', 'cli-host', HOST_NQN, '--secret-file', secretFile]), new RegExp(`^cli-host\\s+default\\s+${HOST_NQN.replace(/\./g, '\\.')}\\s+no\\s`, 'm'));
    assert.deepEqual(JSON.parse(await ok(['trusted-hosts', 'list', '-o', 'json'])), (await api('GET', '/projects/default/trustedHosts')).body);
    assert.ok(!(await ok(['trusted-hosts', 'list'])).includes(first), 'no secret in the list');
    assert.match(await ok(['trusted-hosts', 'get', 'cli-host']), /cli-host/);
    assert.equal((await ok(['trusted-hosts', 'secrets', 'cli-host'])).trim(), first);
    // The secret from the environment, never the command line.
    await ok(['trusted-hosts', 'rotate', 'cli-host', '--secret-env', 'CLI_HOST_SECRET'], { CLI_HOST_SECRET: second });
    assert.equal((await api<{ secret: string }>('GET', '/projects/default/trustedHostSecrets/cli-host')).body.secret, second);
    assert.deepEqual(JSON.parse(await ok(['hosts', 'list', '-o', 'json'])), (await api('GET', '/hosts')).body);
    // The joined server's agent never reported its kernel: its capabilities are not measured.
    assert.match(await ok(['kernel-capabilities']), /not reported/);
    const refused = await strata(['in-band-auth', 'enable']);
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /in-band|nvmet/i);
    await ok(['trusted-hosts', 'delete', 'cli-host']);
    assert.equal((await api('GET', '/projects/default/trustedHosts/cli-host')).status, 404);
  });

  it('tls-hosts create, list, get, psk, rotate, delete; nvme-tcp-tls status, enable refused naming the node, disable', async () => {
    const HOST_NQN = 'nqn.2014-08.org.nvmexpress:uuid:0d0d0d0d-1111-4222-8333-444455556666';
    const [first, second] = [randomTlsPsk(), randomTlsPsk()];
    const pskFile = join(home, 'host.psk');
    writeFileSync(pskFile, `${first}\n`, { mode: 0o600 });
    assert.match(await ok(['tls-hosts', 'create', 'cli-tls', HOST_NQN, '--psk-file', pskFile]), new RegExp(`^cli-tls\\s+${HOST_NQN.replace(/\./g, '\\.')}\\s`, 'm'));
    assert.deepEqual(JSON.parse(await ok(['tls-hosts', 'list', '-o', 'json'])), (await api('GET', '/tlsHosts')).body);
    assert.ok(!(await ok(['tls-hosts', 'list'])).includes(first), 'no PSK in the list');
    assert.match(await ok(['tls-hosts', 'get', 'cli-tls']), /cli-tls/);
    assert.equal((await ok(['tls-hosts', 'psk', 'cli-tls'])).trim(), first);
    await ok(['tls-hosts', 'rotate', 'cli-tls', '--psk-env', 'CLI_TLS_PSK'], { CLI_TLS_PSK: second });
    assert.equal((await api<{ psk: string }>('GET', '/tlsHostPSKs/cli-tls')).body.psk, second);
    assert.equal((await ok(['nvme-tcp-tls', 'status'])).trim(), 'Disabled');
    // The joined server's agent never reported its kernel: refused, naming it.
    const refused = await strata(['nvme-tcp-tls', 'enable']);
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /TLS/);
    assert.match(await ok(['nvme-tcp-tls', 'disable']), /TLS on NVMe\/TCP disabled/);
    await ok(['tls-hosts', 'delete', 'cli-tls']);
    assert.equal((await api('GET', '/tlsHosts/cli-tls')).status, 404);
  });

  it('--output json prints the API\'s answer for every read command; --output table a table', async () => {
    const reads: [string[], string][] = [
      [['cluster', 'tenant-info'], '/clusterinfo'],
      [['cluster', 'version'], '/version'],
      [['cluster', 'control-planes'], '/controlPlanes'],
      [['nodes', 'get', node.UUID], `/nodes/${node.UUID}`],
      [['servers', 'get', node.serverUUID], `/servers/${node.serverUUID}`],
      [['devices', 'get', 'CLI-SN0'], '/nvmeDevices/CLI-SN0'],
      [['connected-hosts', 'list'], '/connectedHosts'],
      [['federation', 'clusters', 'list'], '/clusters'],
      [['policies', 'list'], '/policies'],
      [['admin-endpoints', 'list'], '/adminEndpoints'],
    ];
    for (const [args, path] of reads) {
      const json = JSON.parse(await ok([...args, '--output', 'json'])) as unknown;
      const answer = (await api('GET', path)).body as Record<string, unknown>;
      if (path === '/clusterinfo') delete answer['ETag'], delete (json as Record<string, unknown>)['ETag'];
      assert.deepEqual(json, answer, `strata ${args.join(' ')} -o json`);
      const table = await strata([...args, '--output', 'table']);
      assert.equal(table.code, 0, table.stderr);
      assert.throws(() => JSON.parse(table.stdout || '{'), `strata ${args.join(' ')} -o table is not JSON`);
    }
    assert.match(await ok(['cluster', 'etcd-scan']), /etcd corruption scan started/);
    assert.deepEqual(JSON.parse(await ok(['cluster', 'etcd-scan', '-o', 'json'])), {});
    // Federation is not offered: every command but clusters list gets the API's answer that says so.
    for (const args of [
      ['federation', 'clusters', 'attach', '10.0.0.1:443'],
      ['federation', 'clusters', 'detach', '00000000-0000-4000-8000-00000000c1d0'],
      ['federation', 'workflows', 'list'],
      ['federation', 'workflows', 'get', '00000000-0000-4000-8000-0000000000f1'],
      ['federation', 'credentials'],
      ['federation', 'login'],
    ]) {
      const refused = await strata(args);
      assert.equal(refused.code, 1, `strata ${args.join(' ')}: ${refused.stderr}`);
      assert.match(refused.stderr, /federation service is unavailable.*\(HTTP 500, Internal\)/, `strata ${args.join(' ')}`);
    }
  });

  it('connected-hosts list shows a connection whose host NQN is not known by its address, and how NQNs are known', async () => {
    const vol7 = await createAvailable('cli-vol7');
    await report(vol7, 'Served', [], [{ hostNQN: HOST_A, address: '10.3.3.1', hostNQNSource: 'acl' }, { hostNQN: '', address: '10.3.3.3', hostNQNSource: '' }]);
    const table = await ok(['connected-hosts', 'list', '--volume', vol7]);
    assert.match(table, new RegExp(`^${HOST_A.replace(/\./g, '\\.')}\\s+acl\\s+10\\.3\\.3\\.1\\s+${vol7}\\b`, 'm'));
    assert.match(table, new RegExp(`^\\(not known\\)\\s+unknown\\s+10\\.3\\.3\\.3\\s+${vol7}\\b`, 'm'));
    await report(vol7, 'Served');
  });

  it('usage errors exit 2: a bad size, a bad volume reference, no token', async () => {
    const badSize = await strata(['volumes', 'create', '--project', 'default', '--name', 'x', '--size', '10XB']);
    assert.equal(badSize.code, 2);
    assert.match(badSize.stderr, /^strata: invalid size "10XB"/m);
    const partByte = await strata(['volumes', 'resize', vol1, '10.5B']);
    assert.equal(partByte.code, 2);
    assert.match(partByte.stderr, /^strata: invalid size "10.5B": is not a whole number of bytes/m);
    const missing = await strata(['volumes', 'create', '--name', 'x', '--size', '1GiB']);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /required option '--project <name>' not specified/);
    assert.equal((await strata(['volumes', 'get', 'a/b/c'])).code, 2);
    const noToken = await strata(['cluster', 'info'], { HOME: join(home, 'nowhere') });
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /no API token/);
  });

  it('API errors exit 1 with the API\'s message: 404, wrong token', async () => {
    const unknown = '00000000-0000-4000-8000-000000000000';
    const apiAnswer = await api<{ message: string }>('GET', `/volumes/${unknown}`);
    assert.equal(apiAnswer.status, 404);
    const notFound = await strata(['volumes', 'get', unknown]);
    assert.equal(notFound.code, 1);
    assert.equal(notFound.stderr, `strata: ${apiAnswer.body.message} (HTTP 404, NotFound)\n`);

    const wrongToken = await strata(['cluster', 'info', '--token', 'not-a-jwt']);
    assert.equal(wrongToken.code, 1);
    assert.match(wrongToken.stderr, /^strata: authentication failed: .*\(HTTP 401, Unauthenticated\)/);
    const viaEnv = await strata(['volumes', 'list'], { STRATA_TOKEN: 'also-not-a-jwt' });
    assert.equal(viaEnv.code, 1);
    assert.match(viaEnv.stderr, /authentication failed/);
    assert.ok(!viaEnv.stderr.includes('also-not-a-jwt'));
  });

  it('an unreachable endpoint exits 3', async () => {
    const run = await strata(['volumes', 'list'], { STRATA_ENDPOINT: `http://127.0.0.1:${await freePort()}` });
    assert.equal(run.code, 3);
    assert.match(run.stderr, /^strata: cannot connect to http:\/\/127\.0\.0\.1:\d+: connection refused/);
  });

  it('nodes replace and restart, devices locate: the API\'s refusals; restart --force recorded; in-band-auth disable; cluster openapi', async () => {
    // A spare server whose node is Unattached (extendCluster false), as a replace's target.
    const spare = await joinServer(kv, { nodes: [{ managedDeviceSerials: ['CLI-SPARE'], unattached: true }] });
    const target = spare.nodes[0]!.UUID;
    await waitUntil(async () => (await api<{ state: string }>('GET', `/nodes/${target}`)).body.state === 'Unattached' || undefined, 'the spare node Unattached', 15_000);
    const replace = await strata(['nodes', 'replace', node.UUID, '--target', target]);
    assert.equal(replace.code, 1, replace.stderr);
    assert.match(replace.stderr, new RegExp(`source node Inactive and the target node Unattached: node ${node.UUID} is Active`));
    const commandOf = async (uuid: string) => (await kv.get(keys.nodeCommand(uuid)).json()) as { kind: string; force: boolean } | null;
    assert.equal(await commandOf(node.UUID), null, 'a refused replace records nothing');

    // The node serves the only copy of the test's volumes: a restart needs --force.
    const restart = await strata(['nodes', 'restart', node.UUID]);
    assert.equal(restart.code, 1, restart.stderr);
    assert.match(restart.stderr, /restarting node .* would make volume\(s\) .* unavailable/);
    assert.equal(await commandOf(node.UUID), null, 'a refused restart records nothing');
    assert.match(await ok(['nodes', 'restart', node.UUID, '--force']), /restart recorded/);
    assert.deepEqual(await commandOf(node.UUID).then((c) => c && [c.kind, c.force]), ['restart', true]);

    // The LED is set by the server's agent, which is not connected here; a wrong server is a 400.
    const locate = await strata(['devices', 'locate', 'CLI-SN0']);
    assert.equal(locate.code, 1, locate.stderr);
    assert.match(locate.stderr, new RegExp(`agent of server ${node.serverUUID} is not connected`));
    const elsewhere = await strata(['devices', 'locate', 'CLI-SN0', '--off', '--server', spare.server.UUID]);
    assert.equal(elsewhere.code, 1, elsewhere.stderr);
    assert.match(elsewhere.stderr, new RegExp(`NVMe device CLI-SN0 is on server ${node.serverUUID}, not on server ${spare.server.UUID}`));

    // Disabling turns the flag off (here enabled as if the cluster's kernels allowed it).
    await putRecord(kv, keys.featureFlag('in-band-authentication'), { name: 'in-band-authentication', enabled: true, updatedAt: new Date().toISOString(), updatedBy: 'test' });
    await waitUntil(async () => (await api<{ enabled: boolean }>('GET', '/featureFlags/in-band-authentication')).body.enabled || undefined, 'the flag on', 15_000);
    assert.match(await ok(['in-band-auth', 'disable']), /in-band authentication disabled/);
    assert.deepEqual((await api('GET', '/featureFlags/in-band-authentication')).body, { name: 'in-band-authentication', enabled: false });

    assert.deepEqual(JSON.parse(await ok(['cluster', 'openapi'])), (await api('GET', '/openapi.json')).body);
  });

  it('never prints the token', () => {
    assert.ok(outputs.length > 20);
    for (const output of outputs) assert.ok(!output.includes(token), 'the admin token appeared in the CLI\'s output');
  });
});
