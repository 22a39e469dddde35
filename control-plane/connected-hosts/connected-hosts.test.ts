// GET /api/v2/connectedHosts[/{hostNQN}]: volumes as the API writes them, status records as the
// control plane persists agents' reports, presence as agents hold it. Run twice: against a real
// etcd and real HTTP (the integration layer), and as the connected hosts service on the in-memory
// fake (test/fakes/memory-etcd.ts), an error answered as the HTTP app answers it. The routes'
// parameter parsing and authentication are HTTP's, so their checks run on the first alone.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { toStrataError } from '../../lib/errors.js';
import type { VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { fieldsOf, joinServer, markAbsent, putRecord, startApiHarness, volumeRecord, type ApiHarness, type JoinedServer } from '../../test/helpers/records.js';
import { projectToken } from '../../test/kits/test-tokens.js';
import { createConnectedHostsRoutes } from './connected-hosts-routes.js';
import { ConnectedHostsService, ipOf } from './connected-hosts-service.js';
import { ConnectedHostsStore } from './connected-hosts-store.js';

// The 6 fields of spec 2.11 and the extension hostNQNSource (how the NQN is known).
const HOST_FIELDS = ['hostNQN', 'iPAddress', 'hostname', 'volumeUUIDs', 'connectedNodesUUID', 'unconnectedNodesUUID', 'hostNQNSource'].sort();
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:host-1';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:host-2';
const H3 = 'nqn.2014-08.org.nvmexpress:uuid:host-3';

function statusRecord(volumeUUID: string, nodeUUID: string, connectedHosts: VolumeStatusRecord['connectedHosts'], state: VolumeStatusRecord['state'] = 'Served'): VolumeStatusRecord {
  return { volumeUUID, nodeUUID, generation: 1, state, error: '', snapshots: [], connectedHosts, logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: new Date().toISOString() };
}

/** What the cases ask: GET a path (with a token, where tokens are checked), on a store they seed. */
interface HostsApi {
  readonly etcd: KvClient;
  readonly adminToken: string;
  get(path: string, token?: string): Promise<{ status: number; body: any }>;
  /** The HTTP harness, where the cases run over HTTP (its tokens of other roles). */
  readonly harness?: ApiHarness;
  close(): Promise<void>;
}

function connectedHostsCases(name: string, start: () => Promise<HostsApi>, options: { readonly http: boolean }): void {
  describe(`connected hosts API on ${name}`, () => {
    let api: HostsApi;
    let s1: JoinedServer;
    let s2: JoinedServer;
    let dead: JoinedServer;
    let v1: VolumeRecord;
    let v2: VolumeRecord;
    let v3: VolumeRecord;
    const node = (s: JoinedServer, i = 0) => s.nodes[i]!.UUID;

    before(async () => {
      api = await start();
      s1 = await joinServer(api.etcd, { nodes: [{}, {}] });
      s2 = await joinServer(api.etcd);
      dead = await joinServer(api.etcd, { present: false });
      const [a, b, c, d] = [node(s1, 0), node(s1, 1), node(s2), node(dead)];
      v1 = volumeRecord([a, b, c]);
      v2 = volumeRecord([a, c]);
      v3 = volumeRecord([b, d]);
      const orphanVolume = randomUUID(); // a status left behind by a deleted volume
      for (const v of [v1, v2, v3]) await putRecord(api.etcd, keys.volume(v.UUID), v);
      const statuses = [
        // H1: v1 on a and b (not c), v2 on a and c: connected to a, b, c; none missing.
        statusRecord(v1.UUID, a, [{ hostNQN: H1, address: '10.1.0.1', hostNQNSource: 'discovery' }, { hostNQN: H2, address: '10.2.0.1:40001', hostNQNSource: 'discovery' }]),
        statusRecord(v1.UUID, b, [{ hostNQN: H1, address: '10.1.0.1', hostNQNSource: 'acl' }]),
        statusRecord(v1.UUID, c, []),
        statusRecord(v2.UUID, a, [{ hostNQN: H1, address: '10.1.0.9' }]),
        statusRecord(v2.UUID, c, [{ hostNQN: H1, address: '10.1.0.1:4420' }]),
        // H3 on v3: b live; d's agent is gone, so its report does not count.
        // Connections whose host NQN the agent could not know: listed by address.
        statusRecord(v3.UUID, b, [{ hostNQN: H3, address: '[fd00::3]:50000' }, { hostNQN: '', address: '10.5.0.5', hostNQNSource: '' }]),
        statusRecord(v3.UUID, d, [{ hostNQN: H3, address: 'fd00::3' }, { hostNQN: 'nqn.only-on-dead-node', address: '10.9.9.9' }]),
        statusRecord(orphanVolume, a, [{ hostNQN: 'nqn.orphan', address: '10.8.8.8' }]),
        statusRecord(v2.UUID, b, [{ hostNQN: 'nqn.absent', address: '10.7.7.7' }], 'Absent'),
      ];
      for (const s of statuses) await putRecord(api.etcd, keys.volumeStatus(s.volumeUUID, s.nodeUUID), s);
    });
    after(async () => {
      await api?.close();
    });

    const list = async (query = '') => {
      const res = await api.get(`/api/v2/connectedHosts${query}`, api.adminToken);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.deepEqual(Object.keys(res.body), ['connectedHosts']);
      return res.body.connectedHosts as any[];
    };

    test('lists every connected host with the 6 fields and hostNQNSource, built from live status reports', async () => {
      const hosts = (await list()).filter((h) => h.hostNQN !== '');
      assert.deepEqual(hosts.map((h) => h.hostNQN), [H1, H2, H3]);
      for (const h of hosts) assert.deepEqual(fieldsOf(h), HOST_FIELDS);
      const [h1, h2, h3] = hosts;
      assert.deepEqual(h1, {
        hostNQN: H1, iPAddress: '10.1.0.1', hostname: '',
        volumeUUIDs: [v1.UUID, v2.UUID].sort(),
        connectedNodesUUID: [node(s1, 0), node(s1, 1), node(s2)].sort(),
        unconnectedNodesUUID: [],
        hostNQNSource: 'acl',
      });
      assert.deepEqual(h2, {
        hostNQN: H2, iPAddress: '10.2.0.1', hostname: '',
        volumeUUIDs: [v1.UUID],
        connectedNodesUUID: [node(s1, 0)],
        unconnectedNodesUUID: [node(s1, 1), node(s2)].sort(),
        hostNQNSource: 'discovery',
      });
      assert.deepEqual(h3, {
        hostNQN: H3, iPAddress: 'fd00::3', hostname: '',
        volumeUUIDs: [v3.UUID],
        connectedNodesUUID: [node(s1, 1)],
        unconnectedNodesUUID: [node(dead)],
        hostNQNSource: 'unknown',
      });
    });

    test('a live connection whose host NQN is not known is listed by its address, after the named hosts', async () => {
      const hosts = await list();
      assert.deepEqual(hosts.map((h) => h.hostNQN), [H1, H2, H3, '']);
      assert.deepEqual(hosts[3], {
        hostNQN: '', iPAddress: '10.5.0.5', hostname: '',
        volumeUUIDs: [v3.UUID],
        connectedNodesUUID: [node(s1, 1)],
        unconnectedNodesUUID: [node(dead)],
        hostNQNSource: 'unknown',
      });
    });

    test('the hostNQN query is ignored; volumeUUID filters; an unknown volume is 404', async () => {
      assert.equal((await list(`?hostNQN=${encodeURIComponent(H2)}`)).length, 4);
      assert.deepEqual((await list(`?volumeUUID=${v1.UUID}`)).map((h) => h.hostNQN), [H1, H2]);
      assert.deepEqual((await list(`?volumeUUID=${v3.UUID}`)).map((h) => h.hostNQN), [H3, '']);
      const unknown = await api.get(`/api/v2/connectedHosts?volumeUUID=${randomUUID()}`, api.adminToken);
      assert.equal(unknown.status, 404);
      assert.equal(unknown.body.code, 5);
      assert.equal((await api.get('/api/v2/connectedHosts?volumeUUID=..%2Fcluster', api.adminToken)).status, 404);
      // Koa's query parse: a repeated parameter is an array, refused by the routes' schema.
      if (options.http) assert.equal((await api.get(`/api/v2/connectedHosts?volumeUUID=${v1.UUID}&volumeUUID=${v2.UUID}`, api.adminToken)).status, 400);
    });

    test('GET one host by NQN; not connected is 404', async () => {
      const res = await api.get(`/api/v2/connectedHosts/${encodeURIComponent(H3)}`, api.adminToken);
      assert.equal(res.status, 200);
      assert.equal(res.body.hostNQN, H3);
      assert.deepEqual(fieldsOf(res.body), HOST_FIELDS);
      assert.equal((await api.get(`/api/v2/connectedHosts/${H1}`, api.adminToken)).body.hostNQN, H1, 'unencoded colons work too');
      for (const nqn of ['nqn.only-on-dead-node', 'nqn.orphan', 'nqn.absent', 'nqn.never-seen']) {
        const missing = await api.get(`/api/v2/connectedHosts/${encodeURIComponent(nqn)}`, api.adminToken);
        assert.equal(missing.status, 404, nqn);
        assert.equal(missing.body.code, 5);
      }
    });

    test('a node whose agent goes away drops out of its hosts\' connections', async () => {
      await markAbsent(api.etcd, s2.server.UUID);
      const h1 = (await list()).find((h) => h.hostNQN === H1);
      assert.deepEqual(h1.connectedNodesUUID, [node(s1, 0), node(s1, 1)].sort());
      assert.deepEqual(h1.unconnectedNodesUUID, [node(s2)]);
    });

    if (options.http) {
      test('permissions: cluster roles only', async () => {
        const http = api.harness!;
        assert.equal((await http.get('/api/v2/connectedHosts')).status, 401);
        assert.equal((await http.get('/api/v2/connectedHosts', http.clusterViewerToken)).status, 200);
        assert.equal((await http.get('/api/v2/connectedHosts', http.projectViewerToken)).status, 403);
        const projectAdmin = await projectToken(http.etcd, 'default', ['default:admin']);
        assert.equal((await http.get('/api/v2/connectedHosts', projectAdmin)).status, 403);
        assert.equal((await http.get(`/api/v2/connectedHosts/${encodeURIComponent(H1)}`, projectAdmin)).status, 403);
      });
    }
  });
}

connectedHostsCases('etcd and HTTP', async () => {
  const harness = await startApiHarness((etcd, auth) => [createConnectedHostsRoutes({ auth, connectedHosts: new ConnectedHostsService(new ConnectedHostsStore(etcd)) })]);
  return { etcd: harness.etcd, adminToken: harness.adminToken, get: (path, token) => harness.get(path, token), harness, close: () => harness.close() };
}, { http: true });

connectedHostsCases('the in-memory fake', async () => {
  const kv = new MemoryEtcd();
  const service = new ConnectedHostsService(new ConnectedHostsStore(kv));
  return {
    etcd: kv,
    adminToken: '',
    async get(path) {
      // As the routes do (connected-hosts-routes.ts): the volumeUUID query or the path's host
      // NQN, the service; a thrown error answered as the HTTP app answers it.
      const url = new URL(path, 'http://fake');
      const one = /^\/api\/v2\/connectedHosts\/(.+)$/.exec(url.pathname);
      assert.ok(one || url.pathname === '/api/v2/connectedHosts', path);
      try {
        if (one) return { status: 200, body: await service.get(decodeURIComponent(one[1]!)) };
        const volumeUUID = url.searchParams.get('volumeUUID');
        return { status: 200, body: { connectedHosts: await service.list(volumeUUID === null ? {} : { volumeUUID }) } };
      } catch (err) {
        const error = toStrataError(err);
        return { status: error.httpStatus, body: error.toWire() };
      }
    },
    close: async () => {},
  };
}, { http: false });

test('address forms', () => {
  assert.equal(ipOf('10.0.0.1'), '10.0.0.1');
  assert.equal(ipOf('10.0.0.1:4420'), '10.0.0.1');
  assert.equal(ipOf('[fe80::1]:4420'), 'fe80::1');
  assert.equal(ipOf('[fe80::1]'), 'fe80::1');
  assert.equal(ipOf('fe80::1'), 'fe80::1');
  assert.equal(ipOf(''), '');
});
