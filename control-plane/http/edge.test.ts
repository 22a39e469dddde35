// The HTTP edge against a real control plane (issue 17; issue 13 items 1 and 11): authentication
// before the body, server timeouts and the connection cap, Node's own errors with the JSON body,
// Expect, strict If-Match, Content-Type, bounded identifiers, no existence oracle, and creates
// that can never be placed.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../../test/helpers/processes.js';
import { joinServer, nodePoolRecord, putRecord, reportInventory } from '../../test/helpers/records.js';
import { importPrivateKey, signToken } from '../auth/tokens.js';
import { putVolume } from '../../test/kits/api-test-kit.js';
import { assertJsonError, rawHttp } from '../../test/helpers/raw-http.js';

const HEADERS_TIMEOUT_S = 2;
const REQUEST_TIMEOUT_S = 3;
const MAX_CONNECTIONS = 40;
const TiB = 1024 ** 4;

describe('HTTP edge (issue 17)', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  let kv: Etcd3;
  let port: number;
  let admin: string;
  let alphaAdmin: string;
  let defaultViewer: string;

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({
      etcdEndpoint: etcd.endpoint,
      extraArgs: [
        '--api-headers-timeout-seconds', String(HEADERS_TIMEOUT_S),
        '--api-request-timeout-seconds', String(REQUEST_TIMEOUT_S),
        '--api-max-connections', String(MAX_CONNECTIONS),
      ],
    });
    port = Number(new URL(plane.apiUrl).port);
    admin = plane.adminToken();
    const rootKey = await importPrivateKey(readFileSync(join(plane.stateDir, 'root-key.pem'), 'utf8'));
    alphaAdmin = await signToken(rootKey, { kid: 'system:root', subject: 'alpha', roles: ['alpha:admin'], ttlSeconds: 600 });
    defaultViewer = await signToken(rootKey, { kid: 'system:root', subject: 'viewer', roles: ['default:viewer'], ttlSeconds: 600 });
    kv = createEtcdClient([etcd.endpoint]);
    assert.equal((await api('POST', '/api/v2/projects', { token: admin, body: { name: 'alpha' } })).status, 200);
  });
  after(async () => {
    kv?.close();
    await plane?.stop();
    if (plane) removeDir(plane.stateDir);
    await etcd?.stop();
  });

  async function api(method: string, path: string, options: { token?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {}) {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    if (options.token) headers['Authorization'] = `Bearer ${options.token}`;
    const body = options.raw ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
    if (body !== undefined && options.raw === undefined) headers['Content-Type'] ??= 'application/json';
    const res = await fetch(plane.apiUrl + path, { method, headers, ...(body === undefined ? {} : { body }) });
    const text = await res.text();
    return { status: res.status, body: text, headers: res.headers, json: () => JSON.parse(text) };
  }

  /**
   * Every key under /strata/ with its mod_revision, but the leader's own background writes (the
   * membership events it records as nodes and devices appear), which no request causes.
   */
  async function strataKeys(): Promise<Map<string, string>> {
    const res = await kv.getAll().prefix('/strata/').exec();
    const background = (key: string) => key.startsWith('/strata/membership-events/') || key.startsWith('/strata/events/');
    return new Map(res.kvs.map((k) => [k.key.toString(), k.mod_revision] as [string, string]).filter(([key]) => !background(key)));
  }

  it('1. a slow body without a token: 401 within a second, connection closed', async () => {
    const reply = await rawHttp(port, 'POST /api/v2/projects/default/volumes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"na', { waitMs: 5000 });
    assertJsonError(reply, 401, 16);
    assert.match(reply.headers, /^connection: close$/im);
    assert.ok(reply.closedAfterMs < 1000, `closed after ${reply.closedAfterMs} ms`);
  });

  it('1. a slow body with a token: 408 with the JSON body once the request timeout passes', async () => {
    const reply = await rawHttp(port, `POST /api/v2/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${admin}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"na`, { waitMs: 10_000 });
    assertJsonError(reply, 408, 4);
    assert.ok(reply.closedAfterMs < (REQUEST_TIMEOUT_S + 2) * 1000, `closed after ${reply.closedAfterMs} ms`);
  });

  it('1. headers that never finish: 408 with the JSON body after the headers timeout', async () => {
    const reply = await rawHttp(port, 'GET /api/v2/version HTTP/1.1\r\nHost: x\r\n', { waitMs: 10_000 });
    assertJsonError(reply, 408, 4);
    assert.ok(reply.closedAfterMs < (HEADERS_TIMEOUT_S + 2) * 1000, `closed after ${reply.closedAfterMs} ms`);
  });

  it('1. connections beyond apiMaxConnections are closed as they arrive; the rest are served', async () => {
    const held: Socket[] = [];
    try {
      for (let i = 0; i < MAX_CONNECTIONS; i++) {
        held.push(await new Promise<Socket>((resolve) => { const s = connect(port, '127.0.0.1', () => resolve(s)); s.on('error', () => {}); }));
      }
      await new Promise((r) => setTimeout(r, 200));
      const refused = await rawHttp(port, `GET /api/v2/version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${admin}\r\n\r\n`, { waitMs: 3000 });
      assert.equal(refused.status, 0, 'closed without an answer');
    } finally {
      for (const s of held) s.destroy();
    }
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await api('GET', '/api/v2/version', { token: admin })).status, 200);
  });

  it('issue 13 item 1: an empty or unknown Expect is answered as usual (no 417)', async () => {
    for (const expect of ['', 'something-else']) {
      const status = await new Promise<number>((resolve, reject) => {
        const req = httpRequest({ host: '127.0.0.1', port, path: '/api/v2/version', headers: { Authorization: `Bearer ${admin}`, Expect: expect } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
        req.end();
      });
      assert.equal(status, 200, `Expect: "${expect}"`);
    }
    const reply = await rawHttp(port, `POST /api/v2/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${admin}\r\nExpect:\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{"name":"expe"}`);
    assert.equal(reply.status, 200, reply.body);
  });

  it('issue 13 item 11: Node\'s own 431, 400 and 413 carry the JSON error body', async () => {
    const big = await rawHttp(port, `GET /api/v2/version HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    assertJsonError(big, 431, 3);
    assertJsonError(await rawHttp(port, 'NOT A REQUEST\r\n\r\n'), 400, 3);
    assertJsonError(await rawHttp(port, 'GET /api/v2/version HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n'), 400, 3);
    assertJsonError(await rawHttp(port, `POST /api/v2/projects HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;${'e'.repeat(20_000)}\r\n`), 413, 3);
    // Node answers an HTTP/1.1 request without Host with its own 400 and an empty body; the API
    // does not depend on Host, so such a request is answered as usual, errors with the JSON body.
    const noHost = await rawHttp(port, `GET /api/v2/version HTTP/1.1\r\nAuthorization: Bearer ${admin}\r\nConnection: close\r\n\r\n`);
    assert.equal(noHost.status, 200, noHost.headers);
    assert.deepEqual(JSON.parse(noHost.body), { apiVersion: 'v2.0' });
    assertJsonError(await rawHttp(port, 'GET /api/v2/version HTTP/1.1\r\nConnection: close\r\n\r\n'), 401, 16);
  });

  it('2. order: authentication, then parameters, then permission', async () => {
    const bad = { size: 'lots' };
    const noToken = await api('POST', '/api/v2/projects/default/volumes', { body: bad });
    assertJsonError(noToken, 401, 16);
    assert.doesNotMatch(noToken.body, /size|name/, 'nothing about the request shape');
    assertJsonError(await api('POST', '/api/v2/projects/default/volumes', { body: bad, token: defaultViewer }), 400, 3);
    assertJsonError(await api('POST', '/api/v2/projects/default/volumes', { body: { name: 'v', size: '1GiB' }, token: defaultViewer }), 403, 7);
    assertJsonError(await api('GET', '/api/v2/nothing-here'), 401, 16);
  });

  it('3. identifiers are typed and bounded; messages quote at most a short prefix', async () => {
    const huge = 'x'.repeat(1024 * 1024 - 100);
    const before = await strataKeys();
    for (const body of [{ name: 's1', sourceVolumeName: huge }, { name: 's1', sourceVolumeUUID: huge }, { name: 's1', sourceVolumeUUID: 'not-a-uuid' }]) {
      const res = await api('POST', '/api/v2/projects/default/snapshots', { token: admin, body });
      assertJsonError(res, 400, 3);
      assert.ok(res.body.length < 2000, `answer of ${res.body.length} bytes`);
    }
    for (const body of [{ serialNumber: huge, nodeUUID: randomUUID() }, { serialNumber: 'SN1', nodeUUID: 'n'.repeat(5000) }]) {
      const res = await api('POST', '/api/v2/nvmeDevices', { token: admin, body });
      assertJsonError(res, 400, 3);
      assert.ok(res.body.length < 2000, `answer of ${res.body.length} bytes`);
    }
    const long = 'n'.repeat(8000);
    const missing = await api('GET', `/api/v2/nodes/${long}`, { token: admin });
    assertJsonError(missing, 404, 5);
    assert.ok(missing.body.length < 600, `404 of ${missing.body.length} bytes`);
    assertJsonError(await api('GET', `/api/v2/projects/default/snapshots/${long}`, { token: admin }), 400, 3);
    assert.deepEqual(await strataKeys(), before, 'nothing written');
  });

  it('4. If-Match: weak or empty tags are 412, a malformed one is 400, the exact one passes', async () => {
    const project = (await api('GET', '/api/v2/projects/alpha', { token: admin })).json() as { ETag: string };
    const before = await strataKeys();
    const put = (ifMatch: string) => api('PUT', '/api/v2/projects/alpha', { token: admin, body: { description: 'changed' }, headers: { 'If-Match': ifMatch } });
    assertJsonError(await put(`W/"${project.ETag}"`), 412, 9);
    assertJsonError(await put('""'), 412, 9);
    assertJsonError(await put('"1'), 400, 3);
    assertJsonError(await put(`"${project.ETag}" junk`), 400, 3);
    assertJsonError(await put(`"${project.ETag}", "1"`), 400, 3);
    assert.deepEqual(await strataKeys(), before, 'nothing written');
    assert.equal((await put(`"${project.ETag}"`)).status, 200);
  });

  it('5. a body that is not JSON is 415; JSON without a Content-Type still works', async () => {
    const before = await strataKeys();
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      assertJsonError(await api('POST', '/api/v2/projects', { token: admin, raw: '{"name":"typed"}', headers: { 'Content-Type': type } }), 415, 3);
    }
    assert.deepEqual(await strataKeys(), before, 'nothing written');
    const untyped = await new Promise<number>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: '/api/v2/projects', headers: { Authorization: `Bearer ${admin}` } }, (res) => { res.resume(); resolve(res.statusCode ?? 0); });
      req.on('error', reject);
      req.end('{"name":"untyped"}');
    });
    assert.equal(untyped, 200);
    assert.equal((await api('POST', '/api/v2/projects', { token: admin, raw: '{"name":"charset"}', headers: { 'Content-Type': 'application/json; charset=utf-8' } })).status, 200);
    assert.equal((await api('POST', '/api/v2/projects', { token: admin, raw: '{"name":"merge"}', headers: { 'Content-Type': 'application/merge-patch+json' } })).status, 200);
  });

  it('7. a project token gets the same 404 for another project\'s volume and an absent one', async () => {
    const foreign = await putVolume(kv, { projectName: 'default' });
    await new Promise((r) => setTimeout(r, 100));
    for (const [method, path] of [['GET', `/api/v2/volumes/${foreign.UUID}`], ['DELETE', `/api/v2/volumes/${foreign.UUID}`], ['GET', `/api/v2/volumes/${foreign.UUID}/connection`]] as const) {
      const other = assertJsonError(await api(method, path, { token: alphaAdmin }), 404, 5);
      const absentUUID = randomUUID();
      const absent = assertJsonError(await api(method, path.replace(foreign.UUID, absentUUID), { token: alphaAdmin }), 404, 5);
      assert.equal(other.message.replace(foreign.UUID, 'X'), absent.message.replace(absentUUID, 'X'), `${method} ${path}`);
    }
    assert.equal((await api('GET', `/api/v2/volumes/${foreign.UUID}`, { token: admin })).status, 200);
  });

  it('6. a volume larger than the cluster could ever hold is refused at create with how much there is', async () => {
    const joined = await joinServer(kv, { server: { endpoints: ['10.0.0.9'] }, nodes: [{ nvmeEndpoint: '10.0.0.9:4420', discoveryEndpoint: '10.0.0.9:8009', managedDeviceSerials: ['EDGE-SN0'] }] });
    const node = joined.nodes[0]!;
    await reportInventory(kv, joined.server.UUID, { devices: [{ serial: 'EDGE-SN0', sizeBytes: String(TiB) }] });
    await putRecord(kv, keys.nodePool(node.UUID), nodePoolRecord(node, { rawBytes: String(TiB), arrayBytes: String(TiB), capacityBytes: String(TiB), freeBytes: String(TiB) }));
    const before = await strataKeys();
    for (const size of ['8191 pib', '2TiB']) {
      const refused = assertJsonError(await api('POST', '/api/v2/projects/default/volumes', { token: admin, body: { name: `big-${size.replace(/\W/g, '')}`, size } }), 400, 3);
      assert.match(refused.message, new RegExp(`can never be placed.*${TiB} bytes`));
    }
    assert.deepEqual(await strataKeys(), before, 'nothing written');
    const fits = await api('POST', '/api/v2/projects/default/volumes', { token: admin, body: { name: 'fits', size: '1TiB' } });
    assert.equal(fits.status, 200, fits.body);
  });
});
