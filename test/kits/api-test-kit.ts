// Test kit for the projects, credentials, policies, feature-flags, admin-endpoints and
// federation suites, composed over test/helpers/records.ts's startApiHarnessOn (a private etcd
// or the in-memory one, a bootstrapped cluster, real HTTP): tokens for any roles, requests with
// any method and body, snapshots of the stored keys to prove a refused request changed nothing,
// records written the way the volumes and snapshots services write them, and a malformed-body
// generator for fuzzing. It writes and reads only through Kv (records.ts), so the suites run on
// both backends (describeForEveryBackend in kv-backends.ts).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type Router from '@koa/router';
import { exportPKCS8, exportSPKI, generateKeyPair } from 'jose';
import { ALLOW_ANY } from '../../lib/contract/acl.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../lib/etcd/kv.js';
import { commitTransaction } from '../../lib/etcd/transaction.js';
import type { CredentialRecord, SnapshotRecord, VolumeRecord } from '../../lib/records.js';
import { checkAnswer } from '../helpers/openapi-answers.js';
import { etcdBackend, type KvBackend } from '../helpers/kv-backends.js';
import { putRecord, startApiHarnessOn, type ApiHarness } from '../helpers/records.js';
import type { Authenticator } from '../../control-plane/auth/authenticator.js';
import { importPrivateKey, signToken } from '../../control-plane/auth/tokens.js';
import type { EventInput, EventRecorder } from '../../control-plane/events/event-recorder.js';
import type { VolumeUsage } from '../../control-plane/volumes/volume-dependencies.js';
import { VolumeUsageCounter } from '../../control-plane/volumes/volume-service.js';
import { VolumeStore } from '../../control-plane/volumes/volume-store.js';
import type { WatchCache } from '../../control-plane/watch-cache/watch-cache.js';
import { RecordStore } from '../../lib/etcd/record-store.js';
import { createPoliciesRoutes } from '../../control-plane/policies/policies-routes.js';
import { PoliciesService } from '../../control-plane/policies/policies-service.js';
import { PoliciesStore } from '../../control-plane/policies/policies-store.js';
import { WatchedQosEnforcement } from '../../control-plane/policies/qos-enforcement.js';
import { createProjectsRoutes } from '../../control-plane/projects/projects-routes.js';
import { ProjectsService } from '../../control-plane/projects/projects-service.js';
import { ProjectsStore } from '../../control-plane/projects/projects-store.js';

export interface Reply {
  readonly status: number;
  readonly body: any;
  readonly headers: Headers;
}

export interface RequestOptions {
  readonly token?: string;
  /** Serialized as JSON. */
  readonly body?: unknown;
  /** Sent as is (for malformed bodies). */
  readonly rawBody?: string;
  readonly headers?: Record<string, string>;
}

export interface ApiKit {
  readonly api: ApiHarness<KvClient>;
  /** The backend's client: etcd's, or the in-memory etcd (read and write it through test/helpers/records.ts). */
  readonly etcd: KvClient;
  /** A token carrying exactly these roles (signed by a system credential, so any role passes). */
  token(roles: readonly string[]): Promise<string>;
  request(method: string, path: string, options?: RequestOptions): Promise<Reply>;
  /** Every key under /strata/ with its mod revision. */
  snapshot(): Promise<Map<string, string>>;
  close(): Promise<void>;
}

export const TOKEN_MINTER = 'test-minter';

export async function startApiKit(
  routers: (etcd: KvClient, auth: Authenticator, cache: WatchCache) => Router[],
  options: {
    /** What it runs on (kv-backends.ts); a private etcd unless given. */
    backend?: () => Promise<KvBackend>;
  } = {},
): Promise<ApiKit> {
  const api = await startApiHarnessOn(options.backend ?? etcdBackend, routers);
  try {
    const { publicKey, privateKey } = await generateKeyPair('RS256', { extractable: true });
    const minter: CredentialRecord = { project: 'system', name: TOKEN_MINTER, type: 'RS256PubKey', payload: await exportSPKI(publicKey), createdAt: new Date().toISOString() };
    await putRecord(api.etcd, keys.credential('system', TOKEN_MINTER), minter);
    const signingKey = await importPrivateKey(await exportPKCS8(privateKey));
    return {
      api,
      etcd: api.etcd,
      token: (roles) => signToken(signingKey, { kid: `system:${TOKEN_MINTER}`, subject: `test-${roles.join('+') || 'none'}`, roles, ttlSeconds: 3600 }),
      request: (method, path, options = {}) => send(api.baseUrl, method, path, options),
      async snapshot() {
        const stored = await kvOf(api.etcd).range('/strata/');
        return new Map(stored.map((kv) => [kv.key, kv.modRevision]));
      },
      close: () => api.close(),
    };
  } catch (err) {
    await api.close();
    throw err;
  }
}

async function send(baseUrl: string, method: string, path: string, options: RequestOptions): Promise<Reply> {
  const headers: Record<string, string> = { ...(options.headers ?? {}) };
  if (options.token !== undefined) headers['Authorization'] = `Bearer ${options.token}`;
  let body: string | undefined;
  if (method === 'GET' || method === 'HEAD') body = undefined; // fetch sends no body with these
  else if (options.rawBody !== undefined) body = options.rawBody;
  else if (options.body !== undefined) body = JSON.stringify(options.body);
  if (body !== undefined && headers['Content-Type'] === undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(baseUrl + path, { method, headers, ...(body === undefined ? {} : { body }) });
  const text = await res.text();
  let parsed: unknown = undefined;
  if (text !== '') {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  checkAnswer(method, path, { status: res.status, contentType: res.headers.get('content-type'), body: parsed });
  return { status: res.status, body: parsed, headers: res.headers };
}

/** Asserts the JSON error body of wire-conventions §3 with this HTTP status and gRPC code. */
export function expectError(reply: Reply, status: number, grpc: number, message?: RegExp): void {
  const context = JSON.stringify(reply.body)?.slice(0, 400);
  assert.equal(reply.status, status, context);
  assert.match(reply.headers.get('content-type') ?? '', /application\/json/);
  assert.equal(reply.body.code, grpc, context);
  assert.equal(typeof reply.body.error, 'string');
  assert.equal(reply.body.error, reply.body.message);
  if (message) assert.match(reply.body.message, message);
}

/** The sorted field names of an object. */
export function fieldsOf(value: object): string[] {
  return Object.keys(value).sort();
}

// ---- volumes and snapshots, as their services write them ----

/** The product's VolumeUsage, over the harness's etcd (or a fake's) and watch cache. */
export function volumeUsage(etcd: KvClient, cache: WatchCache): VolumeUsage {
  return new VolumeUsageCounter(new VolumeStore(new RecordStore(etcd), cache), () => cache.sync());
}

/** The projects and policies routes over real stores, as the control plane wires them. */
export function projectAndPolicyRoutes(etcd: KvClient, auth: Authenticator, cache: WatchCache): { routers: Router[]; projects: ProjectsStore } {
  const projects = new ProjectsStore(etcd);
  const policies = new PoliciesStore(etcd);
  const usage = volumeUsage(etcd, cache);
  return {
    projects,
    routers: [
      createProjectsRoutes({ auth, projects: new ProjectsService(projects, policies, usage) }),
      createPoliciesRoutes({ auth, policies: new PoliciesService(policies, projects, usage, new WatchedQosEnforcement(cache)) }),
    ],
  };
}

export async function putVolume(etcd: KvClient, overrides: Partial<VolumeRecord> & Pick<VolumeRecord, 'projectName'>): Promise<VolumeRecord> {
  const UUID = overrides.UUID ?? randomUUID();
  const volume: VolumeRecord = {
    UUID, name: `vol-${UUID.slice(0, 8)}`, sizeBytes: '1073741824', acl: [ALLOW_ANY], ipAcl: [ALLOW_ANY], compression: false,
    replicaCount: 1, sectorSize: 4096, labels: [], qosPolicyUUID: '', placementRestrictions: [], sourceSnapshotUUID: '',
    sourceSnapshotName: '', encrypted: false, state: 'Available', generation: 1, placement: null, failureReason: '',
    rollbackSnapshotUUID: '', creationTime: new Date().toISOString(), ...overrides,
  };
  await commitTransaction(etcd, {
    guards: [{ key: keys.volume(UUID), revision: '0' }],
    writes: [
      { put: keys.volume(UUID), value: volume },
      { put: keys.volumeName(volume.projectName, volume.name), value: { UUID } },
    ],
  });
  return volume;
}

/** Deletes the keys one at a time (two revisions), as a writer outside a transaction would. */
async function deleteEach(etcd: KvClient, ...keys: string[]): Promise<void> {
  for (const key of keys) await commitTransaction(etcd, { guards: [], writes: [{ delete: key }] });
}

async function putEach(etcd: KvClient, ...writes: [string, unknown][]): Promise<void> {
  for (const [key, value] of writes) await commitTransaction(etcd, { guards: [], writes: [{ put: key, value }] });
}

export async function removeVolume(etcd: KvClient, volume: VolumeRecord): Promise<void> {
  await deleteEach(etcd, keys.volume(volume.UUID), keys.volumeName(volume.projectName, volume.name));
}

export async function putSnapshot(etcd: KvClient, overrides: Partial<SnapshotRecord> & Pick<SnapshotRecord, 'projectName'>): Promise<SnapshotRecord> {
  const UUID = overrides.UUID ?? randomUUID();
  const snapshot: SnapshotRecord = {
    UUID, name: `snap-${UUID.slice(0, 8)}`, description: '', sourceVolumeUUID: randomUUID(), sourceVolumeName: 'v', sizeBytes: '1073741824',
    compression: false, sectorSize: 4096, labels: [], state: 'Available', failureReason: '', retentionSeconds: 0,
    creationTime: new Date().toISOString(), ...overrides,
  };
  await putEach(etcd, [keys.snapshot(UUID), snapshot], [keys.snapshotName(snapshot.projectName, snapshot.name), { UUID }]);
  return snapshot;
}

export async function removeSnapshot(etcd: KvClient, snapshot: SnapshotRecord): Promise<void> {
  await deleteEach(etcd, keys.snapshot(snapshot.UUID), keys.snapshotName(snapshot.projectName, snapshot.name));
}

export class CollectingEventRecorder implements EventRecorder {
  readonly events: EventInput[] = [];
  async record(event: EventInput): Promise<void> {
    this.events.push(event);
  }
}

// ---- malformed bodies ----

/** A small deterministic PRNG (mulberry32): a failing fuzz case can be replayed from its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WEIRD_STRINGS = [
  '', ' ', '0', '-1', '1e3', '65536', '99999999999999999999', 'null', 'true', ALLOW_ANY, '../..', '.', '..', 'a/b', 'a:b',
  '<script>', '\u0000', 'é', '💥', '\n', 'Global', 'Scoped', 'Unavailable', 'qosRateLimit', 'snapshot', '::1', '10.0.0.1',
  '300.1.1.1', '10.0.0.0/8', '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----', 'RS256PubKey', 'x'.repeat(254),
];

export function randomJsonValue(rng: () => number, depth = 0): unknown {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;
  const kind = Math.floor(rng() * (depth > 3 ? 6 : 9));
  switch (kind) {
    case 0: return null;
    case 1: return rng() < 0.5;
    case 2: return pick([0, -1, 1, 1.5, -0.0001, 2 ** 53 + 2, 1e308, 65535, 65536, 4294967296, Math.floor(rng() * 1e6)]);
    case 3: return pick(WEIRD_STRINGS);
    case 4: return Array.from({ length: Math.floor(rng() * 40) }, () => String.fromCharCode(32 + Math.floor(rng() * 0x2000))).join('');
    case 5: return pick([String(Math.floor(rng() * 100000)), `${Math.floor(rng() * 100)} gib`]);
    case 6: return Array.from({ length: Math.floor(rng() * 4) }, () => randomJsonValue(rng, depth + 1));
    case 7: {
      const object: Record<string, unknown> = {};
      for (let i = Math.floor(rng() * 4); i > 0; i--) object[pick(['a', 'name', 'ips', 'port', 'limitIOPS', '__proto__', 'constructor', 'x y'])] = randomJsonValue(rng, depth + 1);
      return object;
    }
    default: return pick([{}, [], '', 0]);
  }
}

/**
 * Raw request bodies that are not valid requests (with overwhelming likelihood): invalid JSON,
 * JSON that is not an object, huge and deeply nested values, and objects whose known keys
 * hold random values of random types.
 */
export function malformedBodies(knownKeys: readonly string[], count: number, seed: number): string[] {
  const rng = prng(seed);
  const fixed = [
    '{', '{"a":}', 'nul', '[1,2', '\u0000\u0001', '{"name": "x"', '"just a string"', '42', 'true', '[]', '[{}]', '{}{}',
    JSON.stringify({ [knownKeys[0] ?? 'name']: 'z'.repeat(300_000) }),
    `{"${knownKeys[0] ?? 'name'}": ${'['.repeat(3000)}${']'.repeat(3000)}}`,
    `${'['.repeat(3000)}${']'.repeat(3000)}`,
    JSON.stringify(Object.fromEntries(knownKeys.map((k) => [k, Array.from({ length: 2000 }, (_, i) => ({ i }))]))),
    JSON.stringify({ padding: 'p'.repeat(1024 * 1024 + 10) }),
    JSON.stringify(Object.fromEntries(knownKeys.map((k) => [k, null]))),
  ];
  const bodies = [...fixed];
  while (bodies.length < count) {
    const roll = rng();
    if (roll < 0.1) {
      bodies.push(JSON.stringify(randomJsonValue(rng, 4)) ?? 'null');
    } else {
      const object: Record<string, unknown> = {};
      for (const key of knownKeys) if (rng() < 0.75) object[key] = randomJsonValue(rng);
      if (rng() < 0.3) object['unknown-' + Math.floor(rng() * 10)] = randomJsonValue(rng);
      bodies.push(JSON.stringify(object));
    }
  }
  return bodies;
}

/**
 * Sends every body to `method path`: never a 5xx, always the JSON error body on a 4xx, and a
 * refused request leaves every stored key as it was. Returns how many were accepted (valid by
 * chance), which callers may bound.
 */
export async function fuzzRoute(kit: ApiKit, method: string, path: string, token: string, bodies: readonly string[]): Promise<number> {
  let accepted = 0;
  for (const rawBody of bodies) {
    const before = await kit.snapshot();
    const reply = await kit.request(method, path, { token, rawBody });
    const context = `${method} ${path} ${rawBody.slice(0, 200)} → ${reply.status} ${JSON.stringify(reply.body)?.slice(0, 300)}`;
    assert.ok(reply.status < 500, context);
    if (reply.status >= 400) {
      assert.equal(typeof reply.body?.code, 'number', context);
      assert.equal(typeof reply.body?.message, 'string', context);
      assert.deepEqual(await kit.snapshot(), before, `a refused request changed etcd: ${context}`);
    } else {
      accepted++;
    }
  }
  return accepted;
}
