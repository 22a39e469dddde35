// Malformed input to every volume POST/PUT (and hostile paths and queries): never a 5xx, always
// the JSON error body, and a refused request never changes a record or creates one.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import { describeForEveryBackend } from '../../test/helpers/kv-backends.js';
import { keysUnder, readKey } from '../../test/helpers/records.js';
import { startVolumesHarness, type HttpResult, type VolumesHarness } from '../../test/kits/volume-test-support.js';

/** Deterministic PRNG (mulberry32): a failure names its seed and replays. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIELDS = [
  'name', 'size', 'acl', 'IPAcl', 'compression', 'replicaCount', 'minReplicas', 'sectorSize', 'projectName', 'sourceSnapshotUUID', 'sourceSnapshotName',
  'placementRestrictions', 'qosPolicyUUID', 'qosPolicyName', 'labels', 'unencrypted', 'Force', 'newName', 'UUID', 'srcSnapshotUUID', 'srcSnapshotName', 'values',
];

function randomValue(rand: () => number, depth = 0): unknown {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;
  const kind = Math.floor(rand() * (depth > 3 ? 9 : 13));
  switch (kind) {
    case 0: return null;
    case 1: return rand() < 0.5;
    case 2: return pick([0, -1, 1, 2, 3, 4, 512, 4096, 1.5, -0.5, 1e308, Number.MAX_SAFE_INTEGER, 2 ** 63]);
    case 3: return pick(['', ' ', 'true', 'false', 'enabled', '1GiB', '0', '-5', '1.5GiB', 'ALLOW_ANY', 'ALLOW_NONE', 'nqn.2014-08.org.x:y', '10.0.0.1', 'In', 'FD', 'sectorSize_4K', '\u0000', '💥', '../..', '%00', '{"a":1}']);
    case 4: return 'x'.repeat(Math.floor(rand() * 5000));
    case 5: return String.fromCharCode(...Array.from({ length: 20 }, () => Math.floor(rand() * 0xd7ff)));
    case 6: return pick(['default', 'p2', 'volume-a', 'renamed', 'a'.repeat(253), 'a'.repeat(254)]);
    case 7: return pick([[], {}, [[]], [{}], { values: [] }, { values: null }]);
    case 8: return Math.floor(rand() * 2 ** 31) * (rand() < 0.5 ? -1 : 1);
    case 9: return Array.from({ length: Math.floor(rand() * 4) }, () => randomValue(rand, depth + 1));
    case 10: return { values: Array.from({ length: Math.floor(rand() * 4) }, () => randomValue(rand, depth + 1)) };
    case 11: return [{ key: randomValue(rand, depth + 1), value: randomValue(rand, depth + 1) }];
    default: {
      const obj: Record<string, unknown> = {};
      for (let i = Math.floor(rand() * 4); i > 0; i--) obj[pick(FIELDS)] = randomValue(rand, depth + 1);
      return obj;
    }
  }
}

/** Random keys with random values; half of the time a valid `base` with a few fields spoiled. */
function randomBody(rand: () => number, base: Record<string, unknown> = {}): unknown {
  if (rand() < 0.1) return randomValue(rand);
  const body: Record<string, unknown> = rand() < 0.5 ? { ...base } : {};
  for (let i = 1 + Math.floor(rand() * (Object.keys(body).length > 0 ? 2 : 6)); i > 0; i--) body[FIELDS[Math.floor(rand() * FIELDS.length)]!] = randomValue(rand);
  return body;
}

function deepNesting(depth: number): string {
  return `{"labels": ${'['.repeat(depth)}${']'.repeat(depth)}, "acl": ${'{"values":'.repeat(depth)}1${'}'.repeat(depth)}}`;
}

const RAW_BODIES = [
  '', 'null', '[]', '[1,2]', '"string"', '42', 'true', '{', '{"name":', '}{', '{"name": "a",}', 'not json', '\u0000\u0001', '{"a":1}{"b":2}',
  deepNesting(5000), `{"name": "${'x'.repeat(1024 * 1024)}"}`, `{"labels": [${Array(50_000).fill('{"key":"k","value":"v"}').join(',')}]}`,
  `{"acl": {"values": [${Array(5000).fill('"nqn.2014-08.org.x:y"').join(',')}]}}`, '{"__proto__": {"polluted": true}, "constructor": {"prototype": {"x": 1}}}',
];

function assertRefusedCleanly(res: HttpResult, what: string): void {
  assert.ok(res.status < 500, `${what}: ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`);
  if (res.status >= 400) {
    assert.match(res.contentType ?? '', /application\/json/, what);
    assert.equal(typeof res.body.error, 'string', what);
    assert.equal(typeof res.body.code, 'number', what);
  }
}

describeForEveryBackend('volume routes fuzzed', (backend) => {
  let h: VolumesHarness;
  let volume: { UUID: string; name: string };
  let snapshotUUID: string;

  const volumeKeys = async () => (await keysUnder(h.etcd, keys.volumesPrefix())).sort();
  const revisionOf = async (uuid: string) => (await readKey(h.etcd, keys.volume(uuid)))?.modRevision;
  const indexKeys = async () => (await keysUnder(h.etcd, keys.volumeNamesPrefix())).sort();

  before(async () => {
    h = await startVolumesHarness({ backend });
    const res = await h.create({ name: 'volume-a', size: '1GiB' });
    assert.equal(res.status, 200);
    volume = res.body;
    await h.setState(volume.UUID, 'Available');
    snapshotUUID = (await h.putSnapshot({ name: 'snap-a', projectName: 'default', sourceVolumeUUID: volume.UUID })).UUID;
  });
  after(async () => {
    await h?.close();
  });

  test('POST with random bodies: never a 5xx; a refused create writes nothing', async () => {
    const rand = prng(0xc0ffee);
    const statuses = new Map<number, number>();
    for (let i = 0; i < 300; i++) {
      const body = randomBody(rand, { name: `fuzz-${i}`, size: '1GiB', replicaCount: 1, acl: { values: ['ALLOW_ANY'] }, labels: [{ key: 'k', value: 'v' }] });
      const before = await volumeKeys();
      const path = i % 2 === 0 ? '/api/v2/volumes' : '/api/v2/projects/default/volumes';
      const res = await h.request('POST', path, { token: h.tokens.admin, body });
      assertRefusedCleanly(res, `POST #${i} ${JSON.stringify(body).slice(0, 300)}`);
      if (res.status !== 200) assert.deepEqual(await volumeKeys(), before, `POST #${i} wrote despite ${res.status}`);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    }
    assert.ok((statuses.get(200) ?? 0) > 10 && (statuses.get(400) ?? 0) > 100, `both accepted and refused bodies: ${JSON.stringify([...statuses])}`);
  });

  test('PUT with random bodies (by UUID, by name, rollback): never a 5xx; a refused update changes nothing', async () => {
    const rand = prng(0xbadbeef);
    const paths = () => [`/api/v2/volumes/${volume.UUID}`, `/api/v2/projects/default/volumes/?name=${encodeURIComponent(volume.name)}`, '/api/v2/volumes/', `/api/v2/projects/default/volumes/${volume.UUID}/rollback`];
    const statuses = new Map<number, number>();
    for (let i = 0; i < 300; i++) {
      const path = paths()[i % 4]!;
      const base = i % 4 === 3 ? { srcSnapshotUUID: snapshotUUID } : { name: volume.name, size: '2GiB', labels: [{ key: 'k', value: String(i) }], acl: { values: ['ALLOW_ANY'] } };
      const body = randomBody(rand, base);
      const before = await revisionOf(volume.UUID);
      const indexes = await indexKeys();
      const res = await h.request('PUT', path, { token: h.tokens.admin, body });
      assertRefusedCleanly(res, `PUT #${i} ${path} ${JSON.stringify(body).slice(0, 300)}`);
      if (res.status !== 200) {
        assert.equal(await revisionOf(volume.UUID), before, `PUT #${i} changed the record despite ${res.status}`);
        assert.deepEqual(await indexKeys(), indexes, `PUT #${i} changed the name index despite ${res.status}`);
      } else {
        // A valid random change: follow a rename, and settle it as the cluster manager would.
        const record = (await h.record(volume.UUID))!;
        volume = { UUID: record.UUID, name: record.name };
        if (record.state !== 'Available') await h.setState(volume.UUID, 'Available');
      }
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    }
    assert.ok((statuses.get(200) ?? 0) > 10 && (statuses.get(400) ?? 0) > 100, `both accepted and refused bodies: ${JSON.stringify([...statuses])}`);
  });

  test('raw bodies: invalid JSON, non-objects, deep nesting, huge strings and lists', async () => {
    const targets: [string, string][] = [
      ['POST', '/api/v2/volumes'], ['POST', '/api/v2/projects/default/volumes'], ['PUT', `/api/v2/volumes/${volume.UUID}`],
      ['PUT', `/api/v2/projects/default/volumes/?name=${volume.name}`], ['PUT', `/api/v2/projects/default/volumes/${volume.UUID}/rollback`],
    ];
    for (const raw of RAW_BODIES) {
      for (const [method, path] of targets) {
        const beforeKeys = await volumeKeys();
        const before = await revisionOf(volume.UUID);
        const res = await h.request(method, path, { token: h.tokens.admin, rawBody: raw });
        assertRefusedCleanly(res, `${method} ${path} ${raw.slice(0, 80)}`);
        assert.deepEqual(await volumeKeys(), beforeKeys, `${method} ${path} ${raw.slice(0, 80)} created a volume`);
        if (res.status !== 200) assert.equal(await revisionOf(volume.UUID), before, `${method} ${path} ${raw.slice(0, 80)} changed the record`);
      }
    }
    assert.equal(({} as Record<string, unknown>)['polluted'], undefined);
  });

  test('hostile paths and queries: 4xx, never a 5xx', async () => {
    const paths = [
      '/api/v2/volumes/%E0%A4%A', '/api/v2/volumes/%00', '/api/v2/volumes/..%2F..%2Fcluster', '/api/v2/projects/%2E%2E/volumes', '/api/v2/projects/a%2Fb/volumes',
      `/api/v2/projects/${'p'.repeat(300)}/volumes`, '/api/v2/volumes?limit=99999999999999999999', '/api/v2/volumes?offsetUUID=%ff%fe',
      '/api/v2/volumes/?name=%ff', `/api/v2/volumes/?name=${'n'.repeat(5000)}`, '/api/v2/volumes?showAll[]=1', '/api/v2/volumes?projectName[a]=b',
      `/api/v2/volumes/${volume.UUID}/rollback/`, `/api/v2/volumes/${volume.UUID}/`, '/api/v2/volumes//', '/api/v2/projects//volumes',
    ];
    for (const path of paths) {
      for (const method of ['GET', 'PUT', 'DELETE', 'POST']) {
        const before = await revisionOf(volume.UUID);
        const res = await h.request(method, path, { token: h.tokens.admin, ...(method === 'PUT' || method === 'POST' ? { body: { labels: [{ key: 'x', value: 'y' }] } } : {}) });
        assertRefusedCleanly(res, `${method} ${path}`);
        if (method !== 'GET' && res.status !== 200) assert.equal(await revisionOf(volume.UUID), before, `${method} ${path}`);
      }
    }
  });
});
