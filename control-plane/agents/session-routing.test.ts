// Issue 15: the LED command and the diagnostic bundle from any control plane. Real etcd, two real
// control planes (A, B) serving HTTPS with the cluster CA as in production, and one real agent
// process over a sysfs fixture, connected to A only. Sent to B, the requests are forwarded to A
// (over HTTPS, the caller's token) and answered exactly as A answers them; a request forwarded
// once is never forwarded again (503 with the JSON error body where it lands); bad input is
// refused by B before any forward; a client leaving a bundle through B stops the agent's work.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { send } from '../../lib/http-transport.js';
import type { AgentSessionRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { removeDir, startControlPlaneProcess, startSysfsAgent, type ControlPlaneProcess, type DaemonProcess } from '../../test/helpers/processes.js';
import { putRecord, serverRecord } from '../../test/helpers/records.js';
import { createFakeSysfs, type FakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { readTar } from '../../test/helpers/tar.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { FORWARDED_BY_HEADER } from './session-routing.js';

const SERIAL = 'FWD-SLOT-1';
const LIGHT = '?SkipStatistics=true&DontCollectlogs=true&DontCompressOutput=true';

describe('LED and bundle requests from a control plane without the agent session', () => {
  let etcd: TestEtcd;
  let kv: Etcd3;
  let a: ControlPlaneProcess;
  let b: ControlPlaneProcess;
  let agent: DaemonProcess;
  let sysfs: FakeSysfs;
  let stateDir: string;
  let attention: string;
  let serverUUID: string;
  let ca: string;

  const token = () => a.adminToken();
  function request(plane: ControlPlaneProcess, path: string, init: { method?: string; body?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<Response> {
    return send(`${plane.apiUrl}${path}`, {
      method: init.method ?? 'GET',
      headers: { Authorization: `Bearer ${token()}`, ...(init.body === undefined ? {} : { 'Content-Type': 'application/json' }), ...init.headers },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
      signal: init.signal ?? AbortSignal.timeout(30_000),
    }, { ca });
  }
  const led = (plane: ControlPlaneProcess, ledPattern: string, headers: Record<string, string> = {}) =>
    request(plane, `/api/v2/nvmeDevices/${SERIAL}`, { method: 'POST', body: { serverUUID, ledPattern }, headers });
  async function json(res: Response): Promise<{ status: number; body: Record<string, unknown> }> {
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  }
  const reportedLed = async () => (JSON.parse((await kv.get(keys.device(SERIAL)).string()) ?? '{}') as { ledState?: string }).ledState;

  before(async () => {
    etcd = await startEtcd();
    kv = createEtcdClient([etcd.endpoint]);
    a = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, https: true });
    b = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, https: true });
    ca = readFileSync(a.caPath, 'utf8');
    sysfs = createFakeSysfs();
    sysfs.addController({ name: 'nvme0', serial: SERIAL, pciAddress: '0000:3b:00.0', namespaces: [{ name: 'nvme0n1', sectors: 1 << 21 }] });
    attention = sysfs.addSlot('7', '0000:3b:00', 0);
    stateDir = mkdtempSync(join(tmpdir(), 'strata-agent-fwd-'));
    agent = await startSysfsAgent({ etcdEndpoint: etcd.endpoint, plane: a, stateDir, sysfs, hostname: 'fwd-host', dataDevices: SERIAL });
    // The session is on A, and the cluster knows it (the record B forwards by).
    const record = await waitUntil(async () => {
      const found = await kv.getAll().prefix(keys.agentSessionsPrefix()).strings();
      const value = Object.values(found)[0];
      return value ? (JSON.parse(value) as AgentSessionRecord) : undefined;
    }, 'the agent session record', 20_000);
    assert.equal(record.instanceId, a.instanceId);
    serverUUID = record.serverUUID;
    await waitUntil(async () => ((await request(b, `/api/v2/nvmeDevices/${SERIAL}`)).status === 200 ? true : undefined), 'B lists the device', 20_000);
  });
  after(async () => {
    kv?.close();
    await agent?.stop();
    await b?.stop();
    await a?.stop();
    await etcd?.stop();
    sysfs?.cleanup();
    for (const dir of [stateDir, a?.stateDir, b?.stateDir]) if (dir) removeDir(dir);
  });

  it('sets the LED through B exactly as through A: {} once the agent set it, and the agent reads it back', async () => {
    for (const [plane, pattern, value, state] of [[b, 'locate', '1', 'locate'], [a, 'locate-off', '0', 'off'], [b, 'rebuild', '2', 'rebuild'], [b, 'locate-off', '0', 'off']] as const) {
      const reply = await json(await led(plane, pattern));
      assert.deepEqual(reply, { status: 200, body: {} }, `${pattern} through ${plane === a ? 'A' : 'B'}`);
      assert.equal(readFileSync(attention, 'utf8').trim(), value, pattern);
      await waitUntil(async () => ((await reportedLed()) === state ? true : undefined), `the agent reports ${state}`, 10_000);
    }
    assert.ok(b.logs.some((r) => r['msg'] === 'forwarded request answered' && r['forwardTo'] === a.instanceId), 'B forwarded to A');
  });

  it('streams the bundle through B as A makes it: headers and the expected files', async () => {
    const res = await request(b, `/api/v2/logs${LIGHT}&serverUUID=${serverUUID}`);
    const raw = Buffer.from(await res.arrayBuffer());
    assert.equal(res.status, 200, raw.toString().slice(0, 300));
    assert.equal(res.headers.get('content-type'), 'application/x-tar');
    assert.match(res.headers.get('content-disposition') ?? '', /^attachment; filename="strata-bundle-fwd-host-\d{8}-\d{6}\.tar"$/);
    assert.equal(res.headers.get('cache-control'), 'no-store');
    const listed = readTar(raw).map((f) => f.path.replace(/^[^/]+\//, ''));
    for (const expected of ['cluster/etcd-dump.jsonl', 'cluster/cli/servers.txt', 'cluster/cli/devices.txt', 'server/bundle-options.json', 'server/system/uname.txt', 'server/agent/state.json']) {
      assert.ok(listed.includes(expected), `${expected} in ${listed.join(', ')}`);
    }
  });

  it('a client leaving the bundle through B stops the agent\'s collection', async () => {
    const abort = new AbortController();
    const res = await request(b, `/api/v2/logs?NumOfstatisticsToCapture=60&IntervalBetweenBEReadCycles=5&DontCollectlogs=true&DontCompressOutput=true&serverUUID=${serverUUID}`, { signal: abort.signal });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    let bytes = 0;
    while (bytes < 1024) bytes += (await reader.read()).value?.length ?? 0;
    const left = Date.now();
    abort.abort();
    await agent.waitForLog((r) => r['msg'] === 'diagnostic bundle: collection cancelled', 10_000);
    await a.waitForLog((r) => r['msg'] === 'diagnostic bundle: ended early', 10_000);
    assert.ok(Date.now() - left < 10_000);
  });

  it('a request already forwarded is not forwarded again: 503 with the JSON error body where it lands', async () => {
    const marked = await json(await led(b, 'locate', { [FORWARDED_BY_HEADER]: 'cp-elsewhere' }));
    assert.equal(marked.status, 503);
    assert.equal(marked.body['code'], 14);
    assert.equal(marked.body['error'], marked.body['message']);
    assert.match(String(marked.body['message']), /not connected to this control plane \(control plane cp-elsewhere forwarded the request here\)/);
    // A stale record: it names A, which has no session of that server. B forwards once, A refuses.
    const ghost = serverRecord({ UUID: randomUUID(), hostname: 'ghost' });
    await putRecord(kv, keys.server(ghost.UUID), ghost);
    await putRecord(kv, keys.agentSession(ghost.UUID), { serverUUID: ghost.UUID, instanceId: a.instanceId, agentInstance: 'gone', since: new Date().toISOString() } satisfies AgentSessionRecord);
    const stale = await waitUntil(async () => {
      const res = await request(b, `/api/v2/logs${LIGHT}&serverUUID=${ghost.UUID}`);
      return res.status === 404 ? undefined : json(res); // B's cache may not have the server yet
    }, 'B knows the ghost server', 10_000);
    assert.equal(stale.status, 503, JSON.stringify(stale.body));
    assert.equal(stale.body['code'], 14);
    assert.match(String(stale.body['message']), new RegExp(`control plane ${b.instanceId} forwarded the request here`));
    // Named as its own holder, or held by none: 503 at once.
    await kv.delete().key(keys.agentSession(ghost.UUID)).exec();
    const none = await json(await request(b, `/api/v2/logs${LIGHT}&serverUUID=${ghost.UUID}`));
    assert.equal(none.status, 503);
    assert.match(String(none.body['message']), /not connected to any control plane/);
  });

  it('bad input is refused by B itself, before any forward', async () => {
    const forwards = () => b.logs.filter((r) => r['msg'] === 'forwarded request answered').map((r) => `${String(r['url'])} ${String(r['status'])}`);
    await new Promise((resolve) => setTimeout(resolve, 300)); // B's log lines of the earlier tests
    const before = forwards();
    assert.equal((await led(b, 'blink')).status, 400);
    assert.equal((await request(b, `/api/v2/nvmeDevices/NO-SUCH-SERIAL`, { method: 'POST', body: { serverUUID, ledPattern: 'locate' } })).status, 404);
    assert.equal((await led(b, 'locate', { 'If-Match': '"1"' })).status, 412);
    assert.equal((await led(b, 'locate', { Authorization: 'Bearer nope' })).status, 401);
    assert.equal((await request(b, `/api/v2/logs?serverUUID=${serverUUID}&NumOfstatisticsToCapture=0`)).status, 400);
    assert.equal((await request(b, `/api/v2/logs?serverUUID=${randomUUID()}`)).status, 404);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(forwards(), before);
  });
});
