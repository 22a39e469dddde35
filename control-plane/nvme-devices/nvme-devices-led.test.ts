// POST /api/v2/nvmeDevices/{serialNumber} (spec 4.9, issue 15 item 4) through the real control
// plane and a real agent (its own processes, real etcd) whose sysfs is a fixture tree: one drive
// sits in a PCIe hotplug slot with an attention indicator, one in none, one has enclosure LEDs
// (NPEM / _DSM, Linux 6.12+) and a slot too. The route sends the
// command down the agent's session and answers the agent's real result; the CLI's
// `strata devices locate` goes the same way.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { packageRoot } from '../../lib/paths.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { removeDir, spawnDaemon, startControlPlaneProcess, type ControlPlaneProcess, type DaemonProcess } from '../../test/helpers/processes.js';
import { putRecord, serverRecord } from '../../test/helpers/records.js';
import { createFakeSysfs, type FakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { waitUntil } from '../../test/helpers/wait.js';

const CLI = join(packageRoot, 'dist', 'cli', 'main.js');
const SLOTTED = 'LED-SLOT-1';
const UNSLOTTED = 'LED-NOSLOT-1';
const ENCLOSED = 'LED-NPEM-1';

interface Device {
  serial: string;
  serverUUID: string;
  ETag: string;
}

describe('NVMe device LEDs through the route, the agent session and sysfs', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  let agent: DaemonProcess;
  let sysfs: FakeSysfs;
  let stateDir: string;
  let attention: string;
  let enclosure: { locate: string; rebuild: string; attention: string };
  let kv: Etcd3;
  let serverUUID: string;

  function startAgent(): DaemonProcess {
    return spawnDaemon('agent/main.js', [
      '--etcd-endpoints', etcd.endpoint,
      '--control-plane-endpoints', plane.grpcEndpoint,
      '--state-dir', stateDir,
      '--sysfs-root', sysfs.root,
      '--mounts-path', sysfs.mountsPath,
      '--swaps-path', sysfs.swapsPath,
      '--hostname', 'led-host',
      '--advertise-address', '127.0.0.1',
      '--discovery-listen-address', '127.0.0.1',
      '--discovery-port', '0',
      '--data-devices', SLOTTED,
      '--lease-ttl-seconds', '2',
    ]);
  }

  async function post(serial: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: { code?: number; message?: string } }> {
    const res = await fetch(`${plane.apiUrl}/api/v2/nvmeDevices/${encodeURIComponent(serial)}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${plane.adminToken()}`, 'Content-Type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as { code?: number; message?: string } };
  }
  async function device(serial: string): Promise<Device> {
    const res = await fetch(`${plane.apiUrl}/api/v2/nvmeDevices/${serial}`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } });
    assert.equal(res.status, 200);
    return (await res.json()) as Device;
  }
  const attentionValue = () => readFileSync(attention, 'utf8').trim();
  function strata(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'] ?? '', STRATA_ENDPOINT: plane.apiUrl, STRATA_TOKEN: plane.adminToken() }, timeout: 30_000 }, (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr });
      });
    });
  }

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    kv = createEtcdClient([etcd.endpoint]);
    sysfs = createFakeSysfs();
    sysfs.addController({ name: 'nvme0', serial: SLOTTED, pciAddress: '0000:3b:00.0', namespaces: [{ name: 'nvme0n1', sectors: 1 << 21 }] });
    sysfs.addController({ name: 'nvme1', serial: UNSLOTTED, pciAddress: '0000:3c:00.0', namespaces: [{ name: 'nvme1n1', sectors: 1 << 21 }] });
    attention = sysfs.addSlot('7', '0000:3b:00', 0);
    sysfs.addController({ name: 'nvme2', serial: ENCLOSED, pciAddress: '0000:3d:00.0', namespaces: [{ name: 'nvme2n1', sectors: 1 << 21 }] });
    enclosure = {
      locate: sysfs.addEnclosureLed('0000:3d:00.0', 'locate'),
      rebuild: sysfs.addEnclosureLed('0000:3d:00.0', 'rebuild'),
      attention: sysfs.addSlot('8', '0000:3d:00', 0),
    };
    stateDir = mkdtempSync(join(tmpdir(), 'strata-agent-led-'));
    agent = startAgent();
    const devices = await waitUntil(async () => {
      const [a, b, c] = await Promise.all([SLOTTED, UNSLOTTED, ENCLOSED].map((serial) => device(serial).catch(() => undefined)));
      return a && b && c ? a : undefined;
    }, 'the agent reported the three devices', 20_000);
    serverUUID = devices.serverUUID;
    // The agent's session with the control plane is up once its server is present (Active).
    await waitUntil(async () => ((await kv.get(keys.presence(serverUUID)).string()) ? true : undefined), 'the agent is present', 10_000);
  });
  after(async () => {
    kv?.close();
    await agent?.stop();
    await plane?.stop();
    await etcd?.stop();
    sysfs?.cleanup();
    if (stateDir) removeDir(stateDir);
    if (plane) removeDir(plane.stateDir);
  });

  it('locate, rebuild and locate-off reach the slot\'s attention indicator; each answers {} once the agent set it', async () => {
    const locate = await waitUntil(async () => {
      const r = await post(SLOTTED, { serverUUID, ledPattern: 'locate' });
      return r.status === 503 ? undefined : r; // the session may still be opening
    }, 'the agent session', 10_000);
    assert.equal(locate.status, 200, JSON.stringify(locate.body));
    assert.deepEqual(locate.body, {});
    assert.equal(attentionValue(), '1');
    assert.equal((await post(SLOTTED, { serverUUID, ledPattern: 'REBUILD' })).status, 200, 'the pattern is case-insensitive');
    assert.equal(attentionValue(), '2');
    assert.equal((await post(SLOTTED, { serverUUID, ledPattern: 'locate-off' })).status, 200);
    assert.equal(attentionValue(), '0');
  });

  it('a device with enclosure LEDs: those, not its slot; locate and rebuild exclusive, locate-off turns both off; the agent reports what it reads back', async () => {
    const value = (file: string) => readFileSync(file, 'utf8').trim();
    const reported = async () => (JSON.parse((await kv.get(keys.device(ENCLOSED)).string()) ?? '{}') as { ledState?: string }).ledState;
    for (const [pattern, locate, rebuild, state] of [['locate', '1', '0', 'locate'], ['rebuild', '0', '1', 'rebuild'], ['locate-off', '0', '0', 'off']] as const) {
      const reply = await post(ENCLOSED, { serverUUID, ledPattern: pattern });
      assert.equal(reply.status, 200, `${pattern}: ${JSON.stringify(reply.body)}`);
      assert.deepEqual([value(enclosure.locate), value(enclosure.rebuild)], [locate, rebuild], pattern);
      await waitUntil(async () => ((await reported()) === state ? true : undefined), `the device record's ledState ${state}`, 10_000);
    }
    assert.equal(value(enclosure.attention), '0', 'the slot indicator is not used when the enclosure has LEDs');
  });

  it('a device in no slot with an indicator is 400 with the agent\'s reason, never 200', async () => {
    const reply = await post(UNSLOTTED, { serverUUID, ledPattern: 'locate' });
    assert.equal(reply.status, 400, JSON.stringify(reply.body));
    assert.equal(reply.body.code, 3);
    assert.match(reply.body.message ?? '', /no PCIe hotplug slot with an attention indicator/);
  });

  it('bad input is 400, unknown serial or server 404, another server 400, a stale If-Match 412, no token 401; nothing changes', async () => {
    await post(SLOTTED, { serverUUID, ledPattern: 'locate-off' });
    const cases: Array<[string, unknown, number, RegExp]> = [
      [SLOTTED, { serverUUID, ledPattern: 'blink' }, 400, /ledPattern.*locate, rebuild, locate-off/],
      [SLOTTED, { ledPattern: 'locate' }, 400, /serverUUID is required/],
      [SLOTTED, { serverUUID }, 400, /ledPattern is required/],
      [SLOTTED, { serverUUID: 'not-a-uuid', ledPattern: 'locate' }, 400, /must be a UUID/],
      ['NO-SUCH-SERIAL', { serverUUID, ledPattern: 'locate' }, 404, /not found/],
      [SLOTTED, { serverUUID: '00000000-0000-4000-8000-000000000000', ledPattern: 'locate' }, 404, /server/],
    ];
    for (const [serial, body, status, message] of cases) {
      const reply = await post(serial, body);
      assert.equal(reply.status, status, `${serial} ${JSON.stringify(body)}: ${JSON.stringify(reply.body)}`);
      assert.match(reply.body.message ?? '', message);
    }
    const other = serverRecord();
    await putRecord(kv, keys.server(other.UUID), other);
    await waitUntil(async () => ((await post(SLOTTED, { serverUUID: other.UUID, ledPattern: 'locate' })).status === 400 ? true : undefined), 'another server is 400');
    assert.match((await post(SLOTTED, { serverUUID: other.UUID, ledPattern: 'locate' })).body.message ?? '', /is on server/);
    assert.equal((await post(SLOTTED, { serverUUID, ledPattern: 'locate' }, { 'If-Match': '"stale"' })).status, 412);
    const noToken = await fetch(`${plane.apiUrl}/api/v2/nvmeDevices/${SLOTTED}`, { method: 'POST', body: '{}', headers: { 'Content-Type': 'application/json' } });
    assert.equal(noToken.status, 401);
    assert.equal(attentionValue(), '0', 'no refused request touched the LED');
    const { ETag } = await device(SLOTTED);
    assert.equal((await post(SLOTTED, { serverUUID, ledPattern: 'locate' }, { 'If-Match': `"${ETag}"` })).status, 200, 'the current ETag passes');
    assert.equal(attentionValue(), '1');
    await post(SLOTTED, { serverUUID, ledPattern: 'locate-off' });
  });

  it('strata devices locate: --off and --rebuild; a device without an indicator exits 1 with the reason', async () => {
    const on = await strata(['devices', 'locate', SLOTTED]);
    assert.equal(on.code, 0, on.stderr);
    assert.equal(attentionValue(), '1');
    assert.match(on.stdout, /locate/);
    assert.equal((await strata(['devices', 'locate', SLOTTED, '--rebuild'])).code, 0);
    assert.equal(attentionValue(), '2');
    assert.equal((await strata(['devices', 'locate', SLOTTED, '--off'])).code, 0);
    assert.equal(attentionValue(), '0');
    const none = await strata(['devices', 'locate', UNSLOTTED]);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /no PCIe hotplug slot with an attention indicator/);
    assert.equal((await strata(['devices', 'locate', 'NO-SUCH-SERIAL'])).code, 1);
    assert.equal((await strata(['devices', 'locate', SLOTTED, '--off', '--rebuild'])).code, 2, 'one pattern at a time');
  });

  it('with its agent stopped the server\'s device answers 400 (the agent is not running), never 200', async () => {
    await agent.stop();
    const reply = await waitUntil(async () => {
      const r = await post(SLOTTED, { serverUUID, ledPattern: 'locate' });
      return r.status === 400 ? r : undefined;
    }, 'the stopped agent is seen', 10_000);
    assert.match(reply.body.message ?? '', /not running/);
    assert.equal(attentionValue(), '0');
  });
});
