// `npm run cluster -- --nodes 2` end to end (issue 11, item 9): the launcher itself
// (dist/tools/local-cluster.js) starts etcd, a control plane and two storage nodes in QEMU
// guests. Checked: it prints each node's name, UUID and QEMU PID; both nodes are Active in the
// API under those names; a 2-copy volume becomes Available and FullyProtected (the nodes reach
// each other's replication ports through the forwards the launcher advertises); the launcher
// prints one nvme connect line per node, on that node's host port window, and the replica set;
// Ctrl-C stops it. Kept short: one boot of two guests, one volume.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, it } from 'node:test';
import { send } from '../../lib/http-transport.js';
import { packageRoot } from '../../lib/paths.js';
import { labKernelLabel } from './lab/index.js';
import { freePort } from '../../lib/ports.js';
import { removeDir } from '../helpers/processes.js';
import { waitUntil } from '../helpers/wait.js';

const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : false;
const HOST = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;

describe(`npm run cluster -- --nodes 2 (the launcher, two storage guests, ${labKernelLabel()})`, { timeout: 900_000, skip }, () => {
  const home = mkdtempSync(join(tmpdir(), 'strata-local-cluster-e2e-'));
  let launcher: ChildProcess | undefined;
  let output = '';

  after(async () => {
    if (launcher && launcher.exitCode === null && launcher.signalCode === null) {
      const exited = new Promise((r) => launcher!.once('exit', r));
      launcher.kill('SIGTERM');
      await Promise.race([exited, sleep(60_000)]);
    }
    removeDir(home);
  }, { timeout: 90_000 });

  it('prints each node (name, UUID, QEMU pid), both Active in the API; a 2-copy volume gets one connect line per node; Ctrl-C stops it', async () => {
    const apiPort = await freePort();
    launcher = spawn(process.execPath, [join(packageRoot, 'dist', 'tools', 'local-cluster.js'), '--home', home, '--api-port', String(apiPort), '--nodes', '2'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    launcher.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    launcher.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((r) => launcher!.once('exit', (code) => r(code)));
    const gone = exited.then((code) => {
      throw new Error(`the launcher exited (${code}):\n${output}`);
    });
    gone.catch(() => undefined);
    const printed = (what: string, pattern: RegExp, timeoutMs: number) =>
      Promise.race([gone, waitUntil(() => pattern.test(output), () => `${what}; output so far:\n${output}`, timeoutMs, 500)]);

    await printed('the launcher is up', /Ctrl-C stops the cluster/, 720_000);
    const nodeLines = [...output.matchAll(/^node (\d+)\s+(\S+)\s+([0-9a-f-]{36})\s+QEMU pid (\d+)/gm)].map((m) => ({ name: m[2]!, uuid: m[3]!, pid: Number(m[4]) }));
    assert.deepEqual(nodeLines.map((n) => n.name), ['strata-local', 'strata-local-2'], output);
    assert.equal(new Set(nodeLines.map((n) => n.uuid)).size, 2, 'two distinct node UUIDs');
    for (const node of nodeLines) {
      assert.doesNotThrow(() => process.kill(node.pid, 0), `QEMU pid ${node.pid} of ${node.name} is running`);
      assert.match(readFileSync(`/proc/${node.pid}/cmdline`, 'utf8'), /qemu-system/, `pid ${node.pid} is a QEMU`);
    }

    const token = readFileSync(join(home, 'admin.jwt'), 'utf8').trim();
    // The API is HTTPS, verified against the CA whose path the launcher printed.
    const caFile = /^cluster CA\s+(\S+)/m.exec(output)?.[1];
    assert.ok(caFile, `the launcher prints the CA path:\n${output}`);
    const ca = readFileSync(caFile, 'utf8');
    const request = (method: string, path: string, body?: unknown) =>
      send(`https://127.0.0.1:${apiPort}/api/v2${path}`, {
        method,
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(30_000),
      }, { ca });
    const api = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
      const res = await request(method, path, body);
      const text = await res.text();
      assert.equal(res.status, 200, `${method} ${path}: ${text}`);
      return JSON.parse(text) as T;
    };
    const listed = (await api<{ nodes: { UUID: string; name: string; state: string }[] }>('GET', '/nodes')).nodes;
    for (const node of nodeLines) {
      const found = listed.find((n) => n.UUID === node.uuid);
      assert.ok(found, `node ${node.uuid} in the API`);
      assert.equal(found.state, 'Active');
      assert.equal(found.name, node.name);
    }

    // Known product race (reported, not this test's subject): a primary whose pass runs before
    // its replica exported its copy reports the new volume Failed ("waiting for replica(s) ... to
    // create the volume's mirror"), and the controller fails a Creating volume on that report.
    // Such a volume is deleted and replaced (up to 4 times), with the reason printed; any other
    // failure fails the test.
    let created = { UUID: '' };
    for (let attempt = 1; ; attempt++) {
      created = await api<{ UUID: string }>('POST', '/projects/default/volumes', { name: `two-${attempt}`, size: '32MiB', replicaCount: 2, acl: { values: [HOST] } });
      const state = await waitUntil(async () => {
        const v = await api<{ state: string; protectionState: string }>('GET', `/volumes/${created.UUID}`);
        return v.state === 'Failed' ? 'Failed' : v.state === 'Available' && v.protectionState === 'FullyProtected' && 'ok';
      }, () => `the 2-copy volume Available and FullyProtected; output:\n${output}`, 300_000, 1000);
      if (state === 'ok') break;
      const reason = readFileSync(join(home, 'logs', 'control-plane.log'), 'utf8').split('\n').find((l) => l.includes(created.UUID) && l.includes('"volume failed"')) ?? '(no reason logged)';
      assert.ok(attempt < 5 && /waiting for replica\(s\)/.test(reason), `volume Failed: ${reason}`);
      console.log(`# volume two-${attempt} Failed on the known creation race, deleted and replaced: ${reason}`);
      await request('DELETE', `/projects/default/volumes/${created.UUID}`);
    }
    const { volumePorts } = JSON.parse(readFileSync(join(home, 'ports.json'), 'utf8')) as { volumePorts: { min: number; max: number } };
    const stride = volumePorts.max - volumePorts.min + 1;
    await printed('a connect line per node', new RegExp(`nvme connect .* -s \\d+ -n \\S+:vol:${created.UUID} .*# strata-local-2`), 30_000);
    const connects = [...output.matchAll(new RegExp(`nvme connect -t tcp -a 127\\.0\\.0\\.1 -s (\\d+) -n \\S+:vol:${created.UUID} .*# (\\S+)`, 'g'))].map((m) => ({ port: Number(m[1]), node: m[2]! }));
    const port = connects.find((c) => c.node === 'strata-local')?.port;
    assert.ok(port && port >= volumePorts.min && port <= volumePorts.max, `node 1's path is the volume's own port: ${JSON.stringify(connects)}`);
    assert.deepEqual(connects.find((c) => c.node === 'strata-local-2')?.port, port + stride, "node 2's path is in its own window");
    await printed('the replica set', /volume\s+two-\d: primary strata-local(-2)? \(epoch 1\), in sync: strata-local(-2)?, strata-local(-2)?/, 30_000);

    launcher.kill('SIGINT');
    assert.equal(await Promise.race([exited, sleep(120_000).then(() => 'timeout')]), 0, `the launcher stops on Ctrl-C:\n${output}`);
    assert.match(output, /stopped/);
  });
});
