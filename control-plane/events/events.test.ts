// GET /api/v2/events and /api/v2/projects/{p}/events, run twice: against a real etcd and real
// HTTP (the integration layer), and as the events service on the in-memory fake
// (test/fakes/memory-etcd.ts), the query parsed as the routes parse it and errors answered as the
// HTTP app answers them. Authentication is the HTTP layer's, so the permissions case runs on the
// first alone.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { toStrataError } from '../../lib/errors.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { putRecord, startApiHarness } from '../../test/helpers/records.js';
import { catalogued } from './event-catalogue.js';
import { EtcdEventLog } from './etcd-event-log.js';
import { EventLogStore } from './event-log-store.js';
import type { EventInput } from './event-recorder.js';
import { EVENT_FIELDS } from './event-wire.js';
import { createEventsRoutes } from './events-routes.js';
import { parseEventsQuery } from './events-schema.js';
import { EventStore } from './event-store.js';
import { EventsService } from './events-service.js';
import { WatchedProjectDirectory } from '../projects/project-directory.js';
import { WatchCache } from '../watch-cache/watch-cache.js';
import { projectToken } from '../../test/kits/test-tokens.js';

const BASE_NS = 1_700_000_000_000_000_000n; // 2023-11-14T22:13:20Z
const SECOND = 1_000_000_000n;
const iso = (ns: bigint) => new Date(Number(ns / 1_000_000n)).toISOString();

interface Seeded {
  readonly ns: bigint;
  readonly input: EventInput;
}

/** 40 events, one per second: a mix of types, severities and projects. */
function seedEvents(): Seeded[] {
  const out: Seeded[] = [];
  for (let i = 0; i < 40; i++) {
    const ns = BASE_NS + BigInt(i) * SECOND;
    let input: EventInput;
    if (i % 4 === 0) input = catalogued('VolumeCreated', { component: { kind: 'volume', projectName: i % 8 === 0 ? 'proj-a' : 'default', volumes: [{ ID: `vol-${i}`, Name: `v${i}` }] }, description: `volume ${i}` });
    else if (i % 4 === 1) input = catalogued('NodeEnteredInactiveState', { component: { kind: 'node', ID: `node-${i}`, Name: `n${i}` }, description: `node ${i}` });
    else if (i % 4 === 2) input = catalogued('NVMeSSDFailed', { component: { kind: 'nvmeSsd', ID: `S${i}`, Name: 'nvme0' }, description: `ssd ${i}` });
    else input = catalogued('ServerJoined', { component: { kind: 'server', ID: `srv-${i}`, Name: `s${i}` }, description: `server ${i}`, severity: i === 39 ? 'Critical' : 'Info' });
    out.push({ ns, input });
  }
  return out;
}

/** What the cases ask: GET a path (with a token, where tokens are checked), on a store they seed. */
interface EventsApi {
  readonly etcd: KvClient;
  readonly cluster: { readonly UUID: string; readonly clusterName: string };
  readonly adminToken: string;
  readonly clusterViewerToken: string;
  readonly projectViewerToken: string;
  get(path: string, token?: string): Promise<{ status: number; body: any }>;
  /** A token of a project role; undefined where tokens are not checked. */
  projectToken(project: string, roles: string[]): Promise<string | undefined>;
  close(): Promise<void>;
}

function eventsCases(name: string, start: () => Promise<EventsApi>, options: { readonly checksTokens: boolean }): void {
  describe(`events API on ${name}`, () => {
    let api: EventsApi;
    let projAToken: string | undefined;
    let otherProjectToken: string | undefined;
    const seeded = seedEvents();
    // Newest first: the expected order of descriptions.
    const allNewestFirst = [...seeded].reverse().map((s) => s.input.description);

    before(async () => {
      api = await start();
      await putRecord(api.etcd, keys.project('proj-a'), { UUID: 'p-a', name: 'proj-a', description: '', defaultPolicies: [], builtIn: false, createdAt: new Date().toISOString() });
      await putRecord(api.etcd, keys.project('proj-b'), { UUID: 'p-b', name: 'proj-b', description: '', defaultPolicies: [], builtIn: false, createdAt: new Date().toISOString() });
      let now = 0n;
      const log = new EtcdEventLog(new EventLogStore(api.etcd), silentLogger(), { clock: () => now });
      for (const s of seeded) {
        now = s.ns;
        await log.record(s.input);
      }
      projAToken = await api.projectToken('proj-a', ['proj-a:viewer']);
      otherProjectToken = await api.projectToken('proj-b', ['proj-b:viewer']);
    });
    after(async () => {
      await api?.close();
    });

    const list = async (path: string, token = api.adminToken) => {
      const res = await api.get(path, token);
      assert.equal(res.status, 200, `${path}: ${JSON.stringify(res.body)}`);
      assert.deepEqual(Object.keys(res.body).sort(), ['events', 'nextToken']);
      return res.body as { events: any[]; nextToken: string };
    };
    const descriptions = (page: { events: any[] }) => page.events.map((e) => e.Description);

    /** Every page of a query, following nextToken. */
    const pages = async (path: string, token?: string) => {
      const out: { events: any[]; nextToken: string }[] = [];
      let next = '';
      for (let i = 0; i < 100; i++) {
        const sep = path.includes('?') ? '&' : '?';
        const page = await list(next ? `${path}${sep}nextToken=${encodeURIComponent(next)}` : path, token);
        out.push(page);
        if (page.nextToken === '') return out;
        assert.equal(page.nextToken, page.events.at(-1).ID, 'nextToken is the last returned ID');
        next = page.nextToken;
      }
      throw new Error('paging did not end');
    };

    test('lists newest first with the 17 wire fields', async () => {
      const page = await list('/api/v2/events');
      assert.deepEqual(descriptions(page), allNewestFirst);
      assert.equal(page.nextToken, '', 'everything fits the default limit of 100');
      const newest = page.events[0];
      assert.deepEqual(Object.keys(newest).sort(), [...EVENT_FIELDS].sort());
      assert.equal(newest.Time, '2023-11-14T22:13:59.000000000Z');
      assert.match(newest.ID, /^\d{20}-[0-9a-f]{12}$/);
      assert.equal(newest.Type, 'Server');
      assert.equal(newest.EventName, 'ServerJoined');
      assert.equal(newest.EventCode, 5001);
      assert.equal(newest.ReportingService, 'CM');
      assert.deepEqual(newest.ComponentServerInfo, { ID: 'srv-39', Name: 's39' });
      for (const f of ['ComponentVolumesInfo', 'ComponentNVMeSSDInfo', 'ComponentNodeInfo', 'ComponentClusterInfo', 'ComponentDataIntegrityInfo']) assert.equal(newest[f], null, f);
      const volume = page.events.find((e) => e.Description === 'volume 8');
      assert.deepEqual(volume.ComponentVolumesInfo, { ProjectVolumesMap: { 'proj-a': { VolumeComponentInfoList: [{ ID: 'vol-8', Name: 'v8' }] } } });
    });

    test('pages with limit and nextToken: every event once, in order', async () => {
      const all = await pages('/api/v2/events?limit=7');
      assert.deepEqual(all.map((p) => p.events.length), [7, 7, 7, 7, 7, 5]);
      assert.deepEqual(all.flatMap(descriptions), allNewestFirst);
      const exact = await pages('/api/v2/events?limit=20');
      assert.deepEqual(exact.map((p) => p.events.length), [20, 20], 'a full last page ends with an empty nextToken');
      assert.deepEqual(exact.flatMap(descriptions), allNewestFirst);
    });

    test('limit: string, 0 = default, capped at 1000; invalid is 400', async () => {
      assert.equal((await list('/api/v2/events?limit=0')).events.length, 40);
      assert.equal((await list('/api/v2/events?limit=5000')).events.length, 40);
      assert.equal((await list('/api/v2/events?limit=%2B3')).events.length, 3);
      for (const bad of ['-1', '1.5', 'ten', '1e3']) {
        const res = await api.get(`/api/v2/events?limit=${encodeURIComponent(bad)}`, api.adminToken);
        assert.equal(res.status, 400, bad);
        assert.equal(res.body.code, 3);
      }
      assert.equal((await api.get('/api/v2/events?limit=1&limit=2', api.adminToken)).status, 400, 'repeated limit');
    });

    test('since (inclusive) and until (exclusive), with paging inside the window', async () => {
      const since = BASE_NS + 10n * SECOND;
      const until = BASE_NS + 20n * SECOND;
      const window = await list(`/api/v2/events?since=${iso(since)}&until=${iso(until)}`);
      assert.deepEqual(descriptions(window), allNewestFirst.slice(20, 30));
      const paged = await pages(`/api/v2/events?since=${iso(since)}&until=${iso(until)}&limit=4`);
      assert.deepEqual(paged.flatMap(descriptions), allNewestFirst.slice(20, 30));
      assert.deepEqual(descriptions(await list(`/api/v2/events?since=${iso(BASE_NS + 35n * SECOND)}`)), allNewestFirst.slice(0, 5));
      assert.deepEqual(descriptions(await list(`/api/v2/events?until=${iso(BASE_NS + 2n * SECOND)}`)), allNewestFirst.slice(38));
      // Nanosecond precision and offsets.
      assert.deepEqual(descriptions(await list('/api/v2/events?since=2023-11-14T22:13:58.000000001Z')), allNewestFirst.slice(0, 1));
      assert.deepEqual(descriptions(await list('/api/v2/events?since=2023-11-15T00:13:58%2B02:00')), allNewestFirst.slice(0, 2));
      assert.equal((await list(`/api/v2/events?since=${iso(BASE_NS + 100n * SECOND)}`)).events.length, 0);
      assert.equal((await list(`/api/v2/events?since=${iso(since)}&until=${iso(since)}`)).events.length, 0);
    });

    test('invalid times and tokens are 400', async () => {
      for (const q of ['since=yesterday', 'until=2023-02-30T00:00:00Z', 'since=1700000000', `since=${iso(BASE_NS + SECOND)}&until=${iso(BASE_NS)}`, 'nextToken=abc', 'nextToken=..%2F..%2Fcluster', 'since=a&since=b']) {
        const res = await api.get(`/api/v2/events?${q}`, api.adminToken);
        assert.equal(res.status, 400, q);
        assert.equal(res.body.code, 3, q);
        assert.equal(typeof res.body.message, 'string');
      }
    });

    test('severity filter: repeated or comma-separated, names any case or numbers', async () => {
      const high = descriptions(await list('/api/v2/events?severity=High'));
      assert.deepEqual(high, allNewestFirst.filter((d) => d.startsWith('ssd')));
      const both = descriptions(await list('/api/v2/events?severity=critical&severity=Medium'));
      assert.deepEqual(both, allNewestFirst.filter((d) => d === 'server 39' || d.startsWith('node')));
      assert.deepEqual(descriptions(await list('/api/v2/events?severity=Critical,2')), both);
      const paged = await pages('/api/v2/events?severity=Info&limit=3');
      assert.deepEqual(paged.flatMap(descriptions), allNewestFirst.filter((d) => d.startsWith('volume') || (d.startsWith('server') && d !== 'server 39')));
      assert.equal((await api.get('/api/v2/events?severity=Severe', api.adminToken)).status, 400);
    });

    test('componentType filter', async () => {
      assert.deepEqual(descriptions(await list('/api/v2/events?componentType=Node')), allNewestFirst.filter((d) => d.startsWith('node')));
      assert.deepEqual(descriptions(await list('/api/v2/events?componentType=nvmessd')), allNewestFirst.filter((d) => d.startsWith('ssd')));
      assert.equal((await list('/api/v2/events?componentType=DataIntegrity')).events.length, 0);
      const paged = await pages('/api/v2/events?componentType=Volume&limit=4&since=' + iso(BASE_NS + 8n * SECOND));
      assert.deepEqual(paged.flatMap(descriptions), ['volume 36', 'volume 32', 'volume 28', 'volume 24', 'volume 20', 'volume 16', 'volume 12', 'volume 8']);
      assert.equal((await api.get('/api/v2/events?componentType=Disk', api.adminToken)).status, 400);
    });

    test('project filter on both routes; unknown project is 404', async () => {
      const projA = allNewestFirst.filter((d) => d.startsWith('volume') && Number(d.split(' ')[1]) % 8 === 0);
      assert.deepEqual(descriptions(await list('/api/v2/events?projectName=proj-a')), projA);
      assert.deepEqual(descriptions(await list('/api/v2/projects/proj-a/events')), projA);
      assert.deepEqual((await pages('/api/v2/projects/proj-a/events?limit=2')).flatMap(descriptions), projA);
      assert.deepEqual(descriptions(await list('/api/v2/projects/default/events')), allNewestFirst.filter((d) => d.startsWith('volume') && Number(d.split(' ')[1]) % 8 === 4));
      assert.equal((await list('/api/v2/projects/proj-b/events')).events.length, 0);
      for (const path of ['/api/v2/projects/nope/events', '/api/v2/events?projectName=nope']) {
        const res = await api.get(path, api.adminToken);
        assert.equal(res.status, 404, path);
        assert.equal(res.body.code, 5);
      }
    });

    test('more than one of componentType, projectName, severity is 501', async () => {
      for (const path of [
        '/api/v2/events?componentType=Node&severity=Info',
        '/api/v2/events?componentType=Node&projectName=proj-a',
        '/api/v2/events?projectName=proj-a&severity=Info',
        '/api/v2/projects/proj-a/events?severity=Info',
        '/api/v2/projects/proj-a/events?componentType=Volume',
      ]) {
        const res = await api.get(path, api.adminToken);
        assert.equal(res.status, 501, path);
        assert.equal(res.body.code, 12, path);
      }
      // The scoped route ignores a projectName query (its path wins).
      assert.equal((await list('/api/v2/projects/proj-a/events?projectName=proj-b')).events.length, 5);
    });

    if (options.checksTokens) test('permissions: cluster role for the log, project role for a project', async () => {
      assert.equal((await api.get('/api/v2/events')).status, 401);
      assert.equal((await api.get('/api/v2/events', 'not-a-token')).status, 401);
      assert.equal((await api.get('/api/v2/events', api.clusterViewerToken)).status, 200);
      assert.equal((await api.get('/api/v2/events', api.projectViewerToken)).status, 403);
      assert.equal((await api.get('/api/v2/events', projAToken)).status, 403);
      assert.equal((await api.get('/api/v2/projects/proj-a/events', projAToken)).status, 200);
      assert.equal((await api.get('/api/v2/events?projectName=proj-a', projAToken)).status, 200);
      assert.equal((await api.get('/api/v2/projects/proj-a/events', otherProjectToken)).status, 403);
      assert.equal((await api.get('/api/v2/projects/proj-a/events', api.clusterViewerToken)).status, 200);
      // A project token cannot probe which projects exist.
      assert.equal((await api.get('/api/v2/projects/nope/events', projAToken)).status, 403);
      // The token is checked before parameters (issue 17: authentication, parameters, permission).
      assert.equal((await api.get('/api/v2/events?limit=x')).status, 401);
      assert.equal((await api.get('/api/v2/events?limit=x', projAToken)).status, 400);
    });

    test('query fuzz: random names and values never give a 5xx', async () => {
      const names = ['since', 'until', 'limit', 'severity', 'componentType', 'projectName', 'nextToken', 'ProjectName', 'x'];
      const values = ['', ' ', '0', '-1', '1e309', '99999999999999999999999', 'null', 'true', '[]', '{}', '%00', '%FF', '..%2F..', 'Info,,High', '2023-11-14T22:13:20Z', 'a'.repeat(5000), '😀', 'proj-a', 'Node', '00000000000000000000-000000000000'];
      let seed = 7;
      const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
      for (let i = 0; i < 150; i++) {
        const parts = Array.from({ length: 1 + rnd(4) }, () => `${names[rnd(names.length)]}=${values[rnd(values.length)]}`);
        const base = rnd(2) === 0 ? '/api/v2/events' : '/api/v2/projects/proj-a/events';
        const res = await api.get(`${base}?${parts.join('&')}`, api.adminToken);
        assert.ok([200, 400, 404, 501].includes(res.status), `${base}?${parts.join('&')}: ${res.status} ${JSON.stringify(res.body)}`);
        if (res.status !== 200) assert.equal(typeof res.body.message, 'string');
      }
    });

    // Last: it adds an event.
    test('events recorded while paging do not shift the pages', async () => {
      const first = await list('/api/v2/events?limit=10');
      const log = new EtcdEventLog(new EventLogStore(api.etcd), silentLogger());
      await log.record(catalogued('ClusterManagerChanged', { component: { kind: 'cluster', ID: api.cluster.UUID, Name: api.cluster.clusterName }, description: 'new leader' }));
      const second = await list(`/api/v2/events?limit=10&nextToken=${first.nextToken}`);
      assert.deepEqual(descriptions(second), allNewestFirst.slice(10, 20));
      assert.equal((await list('/api/v2/events?limit=1')).events[0].Description, 'new leader');
    });
  });
}

eventsCases('etcd and HTTP', async () => {
  const harness = await startApiHarness((etcd, auth, cache) => [createEventsRoutes({ auth, events: new EventsService(new EventStore(etcd), new WatchedProjectDirectory(cache)) })]);
  return {
    etcd: harness.etcd,
    cluster: harness.cluster,
    adminToken: harness.adminToken,
    clusterViewerToken: harness.clusterViewerToken,
    projectViewerToken: harness.projectViewerToken,
    get: (path, token) => harness.get(path, token),
    projectToken: (project, roles) => projectToken(harness.etcd, project, roles),
    close: () => harness.close(),
  };
}, { checksTokens: true });

eventsCases('the in-memory fake', async () => {
  const kv = new MemoryEtcd();
  // What the cluster's bootstrap makes on etcd: the built-in default project.
  await putRecord(kv, keys.project('default'), { UUID: randomUUID(), name: 'default', description: '', defaultPolicies: [], builtIn: true, createdAt: new Date().toISOString() });
  const cache = new WatchCache(kv, silentLogger());
  await cache.start();
  const service = new EventsService(new EventStore(kv), new WatchedProjectDirectory(cache));
  return {
    etcd: kv,
    cluster: { UUID: randomUUID(), clusterName: 'test-cluster' },
    adminToken: '',
    clusterViewerToken: '',
    projectViewerToken: '',
    async get(path) {
      // As the routes do (events-routes.ts): the query as Koa parses it, the path's project, the
      // service; a thrown error answered as the HTTP app answers it (its status and wire body).
      const url = new URL(path, 'http://fake');
      const query: Record<string, string | string[]> = {};
      const params = new URLSearchParams(url.search);
      for (const key of new Set(params.keys())) {
        const values = params.getAll(key);
        query[key] = values.length <= 1 ? values[0]! : values;
      }
      const scoped = /^\/api\/v2\/projects\/([^/]+)\/events$/.exec(url.pathname);
      assert.ok(scoped || url.pathname === '/api/v2/events', path);
      try {
        await cache.sync();
        const page = await service.list(parseEventsQuery(query, scoped ? decodeURIComponent(scoped[1]!) : undefined));
        return { status: 200, body: JSON.parse(JSON.stringify(page)) };
      } catch (err) {
        const error = toStrataError(err);
        return { status: error.httpStatus, body: error.toWire() };
      }
    },
    projectToken: async () => undefined,
    close: () => cache.stop(),
  };
}, { checksTokens: false });
