// Issue 16 item 3 and issue 17 point 3, against a real control plane process (real etcd, a real
// agent over a fake sysfs): the OpenAPI document it serves is the one the build writes, every
// route in it is served and every route served is in it, real answers of every route family
// validate against it (Ajv, JSON Schema 2020-12), and every identifier in a path or body is typed
// and bounded — in the document and at the edge (400, or 404 where the spec answers 404, with the
// JSON error body, quoting a short prefix, nothing written).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Router from '@koa/router';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { packageRoot } from '../../lib/paths.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { checkAnswer, templateOf, type OpenApiDocument } from '../../test/helpers/openapi-answers.js';
import { removeDir, startControlPlaneProcess, startSysfsAgent, type ControlPlaneProcess, type DaemonProcess } from '../../test/helpers/processes.js';
import { createFakeSysfs, type FakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { definitionOf, route } from '../http/routes.js';
import { controlPlaneRouters, openApiDocumentOfControlPlane } from './openapi-build.js';
import { openApiDocument, openApiPath, OPENAPI_PATH } from './openapi.js';

const METHODS = ['get', 'post', 'put', 'delete'] as const;
const SERIAL = 'OPENAPI-DATA0';

/** A concrete URL path for a template: every parameter filled with a value of its type. */
function concrete(template: string, values: Record<string, string>): string {
  return template.replace(/\{([^}]+)\}/g, (_m, name: string) => encodeURIComponent(values[name] ?? 'x'));
}

describe('OpenAPI document of /api/v2 (issue 16 item 3) and typed identifiers (issue 17 point 3)', () => {
  let etcd: TestEtcd;
  let observer: Etcd3;
  let plane: ControlPlaneProcess;
  let agent: DaemonProcess;
  let sysfs: FakeSysfs;
  let agentState: string;
  let document: OpenApiDocument;
  let nodeUUID: string;
  let serverUUID: string;
  const validated = new Map<string, number>();

  const call = async (method: string, path: string, body?: unknown, token = plane.adminToken()) => {
    const res = await fetch(`${plane.apiUrl}${path}`, {
      method,
      headers: { Authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    let json: any;
    try {
      json = text === '' ? undefined : JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, json, text, type: res.headers.get('content-type') ?? '' };
  };

  /** Calls the API and checks the answer against the served document (test/helpers/openapi-answers.ts). */
  const checked = async (method: string, path: string, body?: unknown) => {
    const res = await call(method.toUpperCase(), path, body);
    const template = checkAnswer(method, path, { status: res.status, contentType: res.type, body: res.json }, document);
    if (template) {
      const family = template.replace(/^\/api\/v2\//, '').split('/')[0]!;
      validated.set(family, (validated.get(family) ?? 0) + 1);
    }
    return res;
  };

  before(async () => {
    etcd = await startEtcd();
    observer = createEtcdClient([etcd.endpoint]);
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    sysfs = createFakeSysfs();
    sysfs.addController({ name: 'nvme0', serial: SERIAL, pciAddress: '0000:01:00.0', namespaces: [{ name: 'nvme0n1', sectors: 2n ** 31n }] });
    agentState = mkdtempSync(join(tmpdir(), 'strata-openapi-agent-'));
    agent = await startSysfsAgent({ etcdEndpoint: etcd.endpoint, plane, stateDir: agentState, sysfs, hostname: 'openapi-host', dataDevices: SERIAL });
    nodeUUID = await waitUntil(async () => (await observer.getAll().prefix(keys.nodesPrefix()).keys())[0]?.split('/').pop(), 'the agent registered its node');
    const served = await call('GET', OPENAPI_PATH);
    assert.equal(served.status, 200, served.text);
    document = served.json as OpenApiDocument;
    serverUUID = await waitUntil(async () => (await call('GET', '/api/v2/servers')).json?.servers?.[0]?.UUID as string | undefined, 'the server is listed');
    await waitUntil(async () => (await call('GET', `/api/v2/nvmeDevices/${SERIAL}`)).status === 200, 'the device is reported');
  });
  after(async () => {
    await agent?.stop();
    await plane?.stop();
    observer?.close();
    await etcd?.stop();
    sysfs?.cleanup();
    if (agentState) removeDir(agentState);
    if (plane) removeDir(plane.stateDir);
  });

  it('is OpenAPI 3.1, served at GET /api/v2/openapi.json to any valid token (401 without one), and the build wrote the same to docs/openapi.json', async () => {
    assert.equal(document.openapi, '3.1.0');
    const anonymous = await fetch(`${plane.apiUrl}${OPENAPI_PATH}`);
    assert.equal(anonymous.status, 401);
    assert.deepEqual(document, openApiDocumentOfControlPlane(), 'the served document is generated from the routers the build reads');
    const written = JSON.parse(readFileSync(join(packageRoot, 'docs', 'openapi.json'), 'utf8'));
    assert.deepEqual(written, document, 'docs/openapi.json is current (npm run build writes it)');
  });

  it('every route served is in the document, and every route in the document is served', async () => {
    // The routing tables of the served routers (those of control-plane/resources.ts): each /api/v2
    // route with each method is an operation of the document.
    let routes = 0;
    for (const router of controlPlaneRouters()) {
      for (const layer of router.stack) {
        const path = String(layer.path);
        if (!path.startsWith('/api/v2/')) continue;
        for (const method of layer.methods.filter((m) => m !== 'HEAD')) {
          routes++;
          assert.ok(document.paths[openApiPath(path)]?.[method.toLowerCase()], `${method} ${path} is documented`);
          // The trailing-slash form a non-strict route serves as an operation of its own (by name).
          if (definitionOf(layer)?.trailingSlash !== undefined) {
            routes++;
            assert.ok(document.paths[`${openApiPath(path)}/`]?.[method.toLowerCase()], `${method} ${path}/ is documented`);
          }
        }
      }
    }
    const operations = Object.values(document.paths).reduce((n, item) => n + Object.keys(item).length, 0);
    assert.equal(operations, routes, 'as many operations as routes');
    // A route registered without its schemas cannot be documented: the generator refuses it.
    const undocumented = new Router({ prefix: '/api/v2' });
    route(undocumented, 'get', '/documented', { summary: 'x', response: (await import('zod')).z.object({}) }, async () => {});
    undocumented.get('/raw', async () => {});
    assert.throws(() => openApiDocument([undocumented], { version: 'test' }), /GET \/api\/v2\/raw has no definition/);
    // Over HTTP: each documented method of each path reaches a route (whatever it answers, it is
    // not the 404 of an unknown route), and the methods not documented for a path reach none.
    const values = { uuid: randomUUID(), projectName: 'default', project: 'default', name: 'default', serial: SERIAL, port: '9999', hostNQN: 'nqn.2014-08.org.example:h', cid: randomUUID(), workflowId: randomUUID() };
    for (const [template, item] of Object.entries(document.paths)) {
      const path = concrete(template, values);
      for (const method of METHODS) {
        if (template === OPENAPI_PATH || (template.endsWith('/logs') && method === 'get')) continue; // covered above; a bundle takes seconds
        const res = await call(method.toUpperCase(), path, method === 'get' || method === 'delete' ? undefined : {});
        const unknownRoute = res.status === 404 && /^no route for/.test(res.json?.message ?? '');
        if (item[method]) assert.equal(unknownRoute, false, `${method} ${path} is served: ${res.text.slice(0, 200)}`);
        // (A router not strict about trailing slashes serves `…/x/` as `…/x`: docs/api.md.)
        else if (!templateOf(document, path, method) && !(path.endsWith('/') && templateOf(document, path.slice(0, -1), method))) assert.equal(unknownRoute, true, `${method} ${path} is not served: ${res.status} ${res.text.slice(0, 200)}`);
      }
    }
  });

  it('real answers of every route family validate against the document', async () => {
    const project = `p-${randomUUID().slice(0, 8)}`;
    await checked('get', '/api/v2/version');
    await checked('get', OPENAPI_PATH);
    await checked('get', '/api/v2/controlPlanes');
    await checked('get', '/api/v2/cluster');
    await checked('get', '/api/v2/clusterinfo');
    await checked('post', '/api/v2/cluster/etcdCorruption/scan', {});
    await checked('get', '/api/v2/servers');
    await checked('get', `/api/v2/servers/${serverUUID}`);
    await checked('get', '/api/v2/nodes');
    await checked('get', `/api/v2/nodes/${nodeUUID.toUpperCase()}`);
    await checked('get', '/api/v2/nvmeDevices');
    await checked('get', `/api/v2/nvmeDevices/${SERIAL}`);
    await checked('get', '/api/v2/connectedHosts');
    await checked('get', '/api/v2/connectedHosts/nqn.2014-08.org.example:nobody');
    await checked('get', '/api/v2/featureFlags');
    await checked('get', '/api/v2/featureFlags/event-log');
    await checked('post', '/api/v2/featureFlags/event-log/enable', {});
    await checked('post', '/api/v2/adminEndpoints', { port: 9443, ips: ['127.0.0.1'] });
    await checked('get', '/api/v2/adminEndpoints');
    await checked('get', '/api/v2/adminEndpoints/9443');
    await checked('put', '/api/v2/adminEndpoints/9443', { ips: ['127.0.0.2'] });
    await checked('delete', '/api/v2/adminEndpoints/9443');
    await checked('post', '/api/v2/projects', { name: project, description: 'openapi' });
    await checked('get', '/api/v2/projects');
    await checked('get', `/api/v2/projects/${project}`);
    await checked('put', `/api/v2/projects/${project}`, { description: 'changed' });
    await checked('get', `/api/v2/projects/${project}/credentials`);
    const policy = await checked('post', '/api/v2/policies', { name: `qos-${project}`, qoSRateLimitPolicy: { limitIOPS: { writeIOPSLimit: 100, readIOPSLimit: 100 } } });
    await checked('get', '/api/v2/policies');
    await checked('get', `/api/v2/policies/${policy.json.UUID}`);
    await checked('put', `/api/v2/policies/${policy.json.UUID}`, { description: 'changed' });
    await checked('get', `/api/v2/policies/${policy.json.UUID}/enforcement`);
    // A policy needs ublk on every node before placement: this machine's kernel decides which answer.
    const withPolicy = await checked('post', `/api/v2/projects/${project}/volumes`, { name: 'v0', size: '1GiB', acl: { values: ['ALLOW_ANY'] }, qosPolicyUUID: policy.json.UUID.toUpperCase() });
    assert.ok(withPolicy.status === 200 || withPolicy.json?.details?.[0]?.capability === 'ublk', withPolicy.text);
    const volume = await checked('post', `/api/v2/projects/${project}/volumes`, { name: 'v1', size: '1GiB', acl: { values: ['ALLOW_ANY'] } });
    assert.equal(volume.status, 200, volume.text);
    await checked('get', `/api/v2/projects/${project}/volumes`);
    await checked('get', `/api/v2/volumes?projectName=${project}`);
    await checked('get', `/api/v2/volumes/${volume.json.UUID}`);
    await checked('get', `/api/v2/projects/${project}/volumes/?name=v1`);
    await waitUntil(async () => (await call('GET', `/api/v2/volumes/${volume.json.UUID}`)).json?.state !== 'Creating', 'the volume leaves Creating', 20_000);
    await checked('get', `/api/v2/projects/${project}/volumes/${volume.json.UUID}/connection`);
    const snapshot = await checked('post', `/api/v2/projects/${project}/snapshots`, { name: 's1', sourceVolumeUUID: volume.json.UUID });
    await checked('get', `/api/v2/projects/${project}/snapshots`);
    if (snapshot.status === 200) {
      await checked('get', `/api/v2/projects/${project}/snapshots/${snapshot.json.UUID}`);
      await checked('get', `/api/v2/projects/${project}/snapshots/?Name=s1`);
      await checked('delete', `/api/v2/projects/${project}/snapshots/${snapshot.json.UUID}`);
    }
    await checked('get', '/api/v2/events');
    await checked('get', `/api/v2/projects/${project}/events`);
    await checked('get', '/api/v2/clusters');
    await checked('post', '/api/v2/clusters', { apiEndpoint: 'peer.example:443' }); // 500: the federation service is unavailable
    await checked('get', '/api/v2/logs?NumOfDaysToCollectLogs=0'); // 400: the bundle itself is diagnostics.md's
    const families = ['version', 'openapi.json', 'controlPlanes', 'cluster', 'clusterinfo', 'servers', 'nodes', 'nvmeDevices', 'connectedHosts', 'featureFlags', 'adminEndpoints', 'projects', 'policies', 'volumes', 'events', 'clusters'];
    for (const family of families) assert.ok((validated.get(family) ?? 0) > 0, `an answer of ${family} was validated`);
  });

  it('identifiers are typed and bounded in the document: UUIDs, names of 1-253 characters, NVMe serials, host NQNs', () => {
    const param = (template: string, method: string, name: string) => document.paths[template]![method]!.parameters!.find((p) => p.name === name)!.schema;
    for (const template of ['/api/v2/nodes/{uuid}', '/api/v2/servers/{uuid}', '/api/v2/policies/{uuid}', '/api/v2/volumes/{uuid}', '/api/v2/projects/{project}/snapshots/{uuid}']) {
      assert.equal(param(template, 'get', 'uuid')['format'], 'uuid', template);
      assert.match(String(param(template, 'get', 'uuid')['pattern']), /\{12\}\$$/, template);
    }
    assert.match(String(param('/api/v2/nvmeDevices/{serial}', 'post', 'serial')['pattern']), /\{1,20\}/);
    assert.equal(param('/api/v2/nvmeDevices/{serial}', 'get', 'serial')['maxLength'], 20);
    assert.equal(param('/api/v2/connectedHosts/{hostNQN}', 'get', 'hostNQN')['maxLength'], 223);
    assert.match(String(param('/api/v2/projects/{projectName}/volumes', 'get', 'projectName')['pattern']), /\{1,253\}/);
    assert.equal(param('/api/v2/nodes', 'get', 'UUID')['format'], 'uuid');
    assert.equal(param('/api/v2/nvmeDevices', 'get', 'nodeUUID')['format'], 'uuid');
    const body = (template: string, method: string) => document.paths[template]![method]!.requestBody!.content['application/json']!.schema.properties!;
    for (const field of ['qosPolicyUUID', 'sourceSnapshotUUID']) assert.equal(body('/api/v2/volumes', 'post')[field]!['format'], 'uuid', field);
    assert.equal(body('/api/v2/projects/{project}/snapshots', 'post')['sourceVolumeUUID']!['format'], 'uuid');
    assert.equal(body('/api/v2/nvmeDevices', 'post')['serialNumber']!['maxLength'], 20);
    assert.equal(body('/api/v2/nvmeDevices', 'post')['nodeUUID']!['format'], 'uuid');
    assert.equal(body('/api/v2/nvmeDevices/{serial}', 'post')['serverUUID']!['format'], 'uuid');
    assert.match(String(body('/api/v2/projects/{project}/snapshots', 'post')['sourceVolumeName']!['pattern']), /\{1,253\}/);
    assert.equal(body('/api/v2/nodes/{uuid}/replace', 'post')['TargetNodeUUID']!['format'], 'uuid');
    const hostNQN = body('/api/v2/projects/{project}/trustedHosts', 'post')['hostNQN']!;
    assert.deepEqual([hostNQN['minLength'], hostNQN['maxLength']], [1, 223]);
    assert.match(String(hostNQN['pattern']), /^\^nqn\\\./);
  });

  it('a malformed identifier in a path, query or body is a 400 (404 where the spec answers 404), with the JSON error body and a short quote; nothing is written', async () => {
    const before = await observer.getAll().prefix('/strata/').exec();
    const long = 'n'.repeat(5000);
    const refused = async (method: string, path: string, status: number, body?: unknown) => {
      const res = await checked(method, path, body);
      assert.equal(res.status, status, `${method} ${path.slice(0, 80)}: ${res.text.slice(0, 300)}`);
      assert.equal(res.json.error, res.json.message);
      assert.equal(res.json.code, status === 404 ? 5 : 3);
      assert.ok(res.text.length < 700, `${method} ${path.slice(0, 60)}: ${res.text.length} bytes`);
    };
    // The spec answers GET nodes/{UUID}, nvmeDevices/{serial} and connectedHosts/{hostNQN} with 404 only.
    await refused('get', `/api/v2/nodes/${long}`, 404);
    await refused('get', '/api/v2/nodes/not-a-uuid', 404);
    await refused('get', `/api/v2/nvmeDevices/${'S'.repeat(21)}`, 404);
    await refused('get', `/api/v2/connectedHosts/${long}`, 404);
    await refused('get', '/api/v2/connectedHosts?volumeUUID=not-a-uuid', 404);
    for (const path of [`/api/v2/servers/${long}`, '/api/v2/servers/not-a-uuid', '/api/v2/policies/not-a-uuid', `/api/v2/volumes/${long}`, `/api/v2/projects/${long}`,
      `/api/v2/projects/${'p'.repeat(254)}/volumes`, `/api/v2/projects/default/snapshots/${long}`, `/api/v2/projects/${long}/credentials`, '/api/v2/nodes?UUID=x', '/api/v2/servers?UUID=x',
      `/api/v2/nvmeDevices?nodeUUID=${long}`, `/api/v2/events?projectName=${long}`, `/api/v2/adminEndpoints/${long}`, `/api/v2/featureFlags/${long}`, '/api/v2/workflows/not-a-uuid']) {
      await refused('get', path, 400);
    }
    await refused('post', `/api/v2/nvmeDevices/${'S'.repeat(21)}`, 400, { serverUUID: serverUUID, ledPattern: 'locate' });
    await refused('delete', '/api/v2/policies/not-a-uuid', 400);
    await refused('delete', '/api/v2/clusters/not-a-uuid', 400);
    for (const body of [
      { name: 'v2', size: '1GiB', qosPolicyUUID: 'gold' }, { name: 'v2', size: '1GiB', sourceSnapshotUUID: long }, { name: long, size: '1GiB' }, { name: 'v2', size: '1GiB', projectName: long },
    ]) {
      await refused('post', '/api/v2/volumes', 400, body);
    }
    await refused('put', `/api/v2/volumes/${randomUUID()}/rollback`, 400, { srcSnapshotUUID: 'not-a-uuid' });
    await refused('post', '/api/v2/projects/default/snapshots', 400, { name: 's', sourceVolumeUUID: long });
    await refused('post', '/api/v2/nvmeDevices', 400, { serialNumber: 'S'.repeat(21), nodeUUID });
    await refused('post', '/api/v2/servers', 400, { serverEndpoints: ['http://127.0.0.9:2380'], serverUUID: long });
    const after = await observer.getAll().prefix('/strata/').exec();
    const written = (r: typeof before) => r.kvs.filter((kv) => !kv.key.toString().startsWith('/strata/presence/')).map((kv) => `${kv.key.toString()}@${kv.mod_revision}`).sort();
    assert.deepEqual(written(after), written(before), 'nothing written by a refused request');
    // Either case of a UUID reads (the canonical form is lower case).
    assert.equal((await call('GET', `/api/v2/nodes/${nodeUUID.toUpperCase()}`)).json.UUID, nodeUUID);
  });
});
