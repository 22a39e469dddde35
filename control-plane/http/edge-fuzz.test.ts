// Seeded, bounded fuzz of the REST API over every route family, against a real control plane
// (issue 17, "How it is proven"). The route families are the routes the control plane serves, read
// from its own routers (test/helpers/served-routes.ts), so a new route is fuzzed without a change
// here. Random methods, paths, identifiers, query strings, tokens,
// headers (Content-Type, If-Match) and bodies. Every answer is a documented status: no
// 5xx but the documented ones (503 UNAVAILABLE/TRANSIENT_STATE, 501 UNIMPLEMENTED, 500
// FEDERATION_UNAVAILABLE), the JSON error body on every error, and no change in etcd from any
// refused request. The seed is printed; STRATA_FUZZ_SEED=<n> replays a run.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { randomDhchapSecret } from '../../lib/contract/dhchap.js';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../../test/helpers/processes.js';
import { joinServer, reportInventory } from '../../test/helpers/records.js';
import { servedRoutes } from '../../test/helpers/served-routes.js';
import { importPrivateKey, signToken } from '../auth/tokens.js';
import { prng, putSnapshot, putVolume, randomJsonValue } from '../../test/kits/api-test-kit.js';

const REQUESTS = 2500;
const SEED = Number(process.env['STRATA_FUZZ_SEED'] ?? Date.now() % 2 ** 31);

/**
 * Keys the control plane writes on its own (leader tasks, registry), whatever the requests: also
 * the result of an etcd corruption scan an accepted request asked for, written once it ran.
 */
const background = (key: string) => /^\/strata\/(events|membership-events|control-planes|leader|etcd-corruption\/status)\b/.test(key);

describe('HTTP edge fuzz (issue 17)', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  let kv: Etcd3;
  const tokens: string[] = [];
  const ids = { volumes: [] as string[], snapshots: [] as string[], nodes: [] as string[], servers: [] as string[], serials: [] as string[] };
  /** Names that exist (trusted hosts, credentials, flags, admin endpoint ports), so routes get past their 404s. */
  const names = ['fuzz-host', 'evict-data', 'event-log', 'in-band-authentication', '9443'];

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    kv = createEtcdClient([etcd.endpoint]);
    const rootKey = await importPrivateKey(readFileSync(join(plane.stateDir, 'root-key.pem'), 'utf8'));
    const mint = (roles: string[], ttlSeconds = 600) => signToken(rootKey, { kid: 'system:root', subject: 'fuzz', roles, ttlSeconds });
    tokens.push(
      '', 'not-a-jwt', plane.adminToken(), await mint(['system:cluster-viewer']), await mint(['default:viewer']),
      await mint(['default:admin']), await mint(['alpha:admin']), await mint(['system:cluster-admin'], -120),
    );
    const created = await fetch(`${plane.apiUrl}/api/v2/projects`, { method: 'POST', headers: { Authorization: `Bearer ${plane.adminToken()}`, 'Content-Type': 'application/json' }, body: '{"name":"alpha"}' });
    assert.equal(created.status, 200);
    // A server whose agent is not running (its node Inactive: nothing is placed, so the leader
    // writes nothing on its own after a request), with its node and device, for the node and
    // device routes to get past their 404s.
    const { server, nodes } = await joinServer(kv, { nodes: [{ managedDeviceSerials: ['FUZZ-SN-DATA'] }], present: false });
    await reportInventory(kv, server.UUID, { devices: [{ serial: 'FUZZ-SN-DATA', sizeBytes: String(2n ** 40n) }] });
    ids.nodes.push(nodes[0]!.UUID);
    ids.servers.push(server.UUID);
    ids.serials.push('FUZZ-SN-DATA');
    const trusted = await fetch(`${plane.apiUrl}/api/v2/projects/default/trustedHosts`, {
      method: 'POST', headers: { Authorization: `Bearer ${plane.adminToken()}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'fuzz-host', hostNQN: `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`, secret: randomDhchapSecret() }),
    });
    assert.equal(trusted.status, 200, await trusted.text());
    for (const projectName of ['default', 'alpha']) {
      const volume = await putVolume(kv, { projectName });
      ids.volumes.push(volume.UUID);
      ids.snapshots.push((await putSnapshot(kv, { projectName, sourceVolumeUUID: volume.UUID })).UUID);
    }
  });
  after(async () => {
    kv?.close();
    await plane?.stop();
    if (plane) removeDir(plane.stateDir);
    await etcd?.stop();
  });

  async function state(): Promise<{ revision: string; keys: Map<string, string> }> {
    const res = await kv.getAll().prefix('/strata/').exec();
    return { revision: res.header.revision, keys: new Map(res.kvs.map((k) => [k.key.toString(), k.mod_revision] as [string, string]).filter(([k]) => !background(k))) };
  }

  it(`${REQUESTS} seeded requests over every route family: documented statuses, JSON errors, refusals change nothing`, { timeout: 240_000 }, async () => {
    console.log(`fuzz seed ${SEED} (replay: STRATA_FUZZ_SEED=${SEED})`);
    const rng = prng(SEED);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;
    const text = (): string => { const v = randomJsonValue(rng); return typeof v === 'string' ? v : JSON.stringify(v) ?? ''; };
    const identifier = (): string => pick([
      () => randomUUID(), () => pick(ids.volumes), () => pick(ids.snapshots), () => pick(ids.nodes), () => pick(ids.servers), () => pick(ids.serials),
      () => pick(['default', 'alpha', 'system', 'nope']), () => pick(names),
      () => encodeURIComponent(text()), () => 'x'.repeat(Math.floor(rng() * 3000)), () => '%E0%A4%A', () => '%00',
      () => '..', () => String(Math.floor(rng() * 70000)), () => 'nqn.2014-08.org.nvmexpress:uuid:' + randomUUID(), () => '',
    ])();
    // Each served route, its parameters filled with identifiers (known ones half the time);
    // a few paths nothing serves; a trailing slash now and then.
    const served = servedRoutes();
    const templates = [...new Set(served.map((r) => r.path))];
    const methodsOf = (template: string) => served.filter((r) => r.path === template).map((r) => r.method);
    const known: Record<string, () => string> = {
      project: () => pick(['default', 'alpha']), projectName: () => pick(['default', 'alpha']),
      uuid: () => pick([...ids.volumes, ...ids.snapshots, ...ids.nodes, ...ids.servers]), name: () => pick(['default', 'alpha', ...names]),
      serial: () => pick(ids.serials), port: () => '9443',
    };
    const fill = (template: string) => template.replace(/:([A-Za-z]+)/g, (_m, param: string) => (known[param] && rng() < 0.5 ? known[param]() : identifier()));
    assert.ok(templates.length > 50, `routes read from the routers: ${templates.length}`);
    const fuzzed = new Set<string>();
    const route = (): { path: string; methods: string[] } => {
      if (rng() < 0.03) return { path: pick(['/api/v2/nothing', '/api/v1/avs', '/api/v2', '/']), methods: [] };
      const template = pick(templates);
      fuzzed.add(template);
      return { path: fill(template) + (rng() < 0.05 ? '/' : ''), methods: methodsOf(template) };
    };
    const QUERY_NAMES = ['name', 'Name', 'UUID', 'projectName', 'limit', 'offsetUUID', 'showAll', 'severity', 'componentType', 'since', 'nodeUUID', 'sourceVolumeUUID', 'volumeUUID', 'deviceUsages'];
    const query = () => rng() < 0.5 ? '' : '?' + Array.from({ length: 1 + Math.floor(rng() * 3) }, () => `${pick(QUERY_NAMES)}=${encodeURIComponent(text())}`).join('&');
    const KEYS = [
      'name', 'size', 'projectName', 'acl', 'replicaCount', 'sourceVolumeUUID', 'sourceVolumeName', 'serialNumber', 'nodeUUID', 'description', 'ips', 'type', 'payload',
      'qoSRateLimitPolicy', 'labels', 'Force', 'compression', 'srcSnapshotUUID', 'force', 'considerBackend', 'TargetNodeUUID', 'ReplaceWhileActive', 'hostNQN', 'secret',
      'ctrlSecret', 'serverUUID', 'ledPattern', 'port', 'apiEndpoint', 'usage',
    ];
    const body = (): string | undefined => pick([
      () => undefined,
      () => JSON.stringify(Object.fromEntries(KEYS.filter(() => rng() < 0.3).map((k) => [k, randomJsonValue(rng)]))),
      () => JSON.stringify(randomJsonValue(rng)),
      () => pick(['{', '[1,2', '"x"', 'null', '{}', '\u0000', `{"name":"${'n'.repeat(300_000)}"}`]),
      () => JSON.stringify({ name: `f${Math.floor(rng() * 1e6)}`, size: pick(['1GiB', '8191 pib', '0', 'x']), sourceVolumeUUID: pick(ids.volumes), description: 'fuzz' }),
      // Nearly right for the node, device and trusted-host routes.
      () => JSON.stringify({ TargetNodeUUID: pick([...ids.nodes, identifier()]), force: pick([true, false, 'yes']), ReplaceWhileActive: pick([true, false]) }),
      () => JSON.stringify({ serverUUID: pick([...ids.servers, identifier()]), ledPattern: pick(['locate', 'locate-off', 'rebuild', 'blink']), serialNumber: pick(ids.serials), nodeUUID: pick(ids.nodes), usage: pick(['Data', 'Journal']) }),
      () => JSON.stringify({ name: pick(['fuzz-host', `h${Math.floor(rng() * 1e6)}`]), hostNQN: pick(['nqn.2014-08.org.nvmexpress:uuid:' + randomUUID(), identifier()]), secret: pick([randomDhchapSecret(), 'DHHC-1:00:x:', identifier()]) }),
    ])();

    let current = await state();
    const counts = new Map<number, number>();
    for (let i = 0; i < REQUESTS; i++) {
      const target = route();
      const method = target.methods.length > 0 && rng() < 0.6 ? pick(target.methods) : pick(['GET', 'GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS']);
      const path = target.path + query();
      const headers: Record<string, string> = {};
      const token = pick(tokens);
      if (token !== '') headers[pick(['Authorization', 'Authorization', 'api_key'])] = token === 'not-a-jwt' ? pick(['Bearer x', 'Basic Og==', 'Token abc']) : `Bearer ${token}`;
      if (rng() < 0.3) headers['If-Match'] = pick(['*', '""', 'W/"1"', '"1"', '1', '"unterminated', 'a b', '"1", "2"', String(current.revision)]);
      // (Expect is covered by edge.test.ts: fetch refuses to send it.)
      const payload = method === 'GET' || method === 'HEAD' ? undefined : body();
      if (payload !== undefined && rng() < 0.9) headers['Content-Type'] = pick(['application/json', 'application/json; charset=utf-8', 'text/plain', 'application/x-www-form-urlencoded', 'application/merge-patch+json']);
      let res: Response;
      try {
        res = await fetch(plane.apiUrl + path, { method, headers, ...(payload === undefined ? {} : { body: payload }) });
      } catch (err) {
        assert.fail(`seed ${SEED} #${i}: ${method} ${path.slice(0, 200)} → no answer: ${(err as Error).message} ${String((err as Error).cause)}`);
      }
      const text = await res.text();
      const context = `seed ${SEED} #${i}: ${method} ${path.slice(0, 200)} ${JSON.stringify(headers).slice(0, 300)} ${String(payload).slice(0, 200)} → ${res.status} ${text.slice(0, 300)}`;
      counts.set(res.status, (counts.get(res.status) ?? 0) + 1);
      if (res.status >= 400) {
        if (method !== 'HEAD') {
          assert.match(res.headers.get('content-type') ?? '', /application\/json/, context);
          const error = JSON.parse(text) as { error: unknown; code: unknown; message: unknown };
          assert.equal(typeof error.code, 'number', context);
          assert.equal(typeof error.message, 'string', context);
          assert.equal(error.error, error.message, context);
          if (res.status >= 500) {
            const documented = (res.status === 503 && error.code === 14) || (res.status === 501 && error.code === 12) || (res.status === 500 && error.code === 13 && /federation/.test(String(error.message)));
            assert.ok(documented, `undocumented ${res.status}: ${context}`);
          }
        } else {
          // No body to read the code from: the status alone must be a documented one.
          const federation = /^\/api\/v2\/(cf-service-credentials|cflogin|clusters|workflows)\b/.test(path);
          assert.ok(res.status < 500 || res.status === 501 || res.status === 503 || (res.status === 500 && federation), context);
        }
      }
      const now = await state();
      if (now.revision !== current.revision && res.status >= 400) {
        assert.deepEqual(now.keys, current.keys, `a refused request changed etcd: ${context}`);
      }
      current = now;
    }
    assert.deepEqual(templates.filter((t) => !fuzzed.has(t)), [], 'served routes never requested');
    console.log(`statuses: ${[...counts].sort((a, b) => a[0] - b[0]).map(([s, n]) => `${s}×${n}`).join(' ')}`);
  });
});
