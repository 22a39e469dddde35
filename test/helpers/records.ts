// Inventory records for tests, written into a real etcd (or the in-memory one) the way their writers write them:
// the agent writes its server, node and presence records when it joins (presence is leased in
// production; tests put and delete it); the control plane writes server facts and devices from
// agent reports; reads and deletes of a test's own, on either backend. Also an API harness: a
// real etcd (or the in-memory one), a bootstrapped cluster, tokens, and a Koa app on 127.0.0.1
// serving the routers under test.
import { checkAnswer } from './openapi-answers.js';
import { EtcdKv, kvOf, type KvClient, type StoredKey } from '../../lib/etcd/kv.js';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Router from '@koa/router';
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import { createLogger } from '../../lib/logger.js';
import type {
  ClusterRecord,
  ControlPlaneRecord,
  DeviceRecord,
  NodePoolRecord,
  NodeRecord,
  PresenceRecord,
  ServerFactsRecord,
  ServerRecord,
  VolumeRecord,
} from '../../lib/records.js';
import { Authenticator } from '../../control-plane/auth/authenticator.js';
import { WatchCache } from '../../control-plane/watch-cache/watch-cache.js';
import { ROLE_CLUSTER_VIEWER } from '../../control-plane/auth/permissions.js';
import { importPrivateKey, signToken } from '../../control-plane/auth/tokens.js';
import { ADMIN_TOKEN_FILE, ROOT_KEY_FILE, bootstrapCluster } from '../../control-plane/bootstrap/bootstrap.js';
import { BootstrapStore } from '../../control-plane/bootstrap/bootstrap-store.js';
import { createHttpApp } from '../../control-plane/http/app.js';
import { etcdBackend, type KvBackend } from './kv-backends.js';

const now = () => new Date().toISOString();

// ---- record builders (defaults a real writer would produce; override what a test needs) ----

export function serverRecord(overrides: Partial<ServerRecord> = {}): ServerRecord {
  const UUID = overrides.UUID ?? randomUUID();
  return { UUID, name: `server-${UUID.slice(0, 8)}`, hostname: `host-${UUID.slice(0, 8)}`, nodeUUIDs: [], endpoints: ['10.0.0.1:7443'], createdAt: now(), ...overrides };
}

export function nodeRecord(overrides: Partial<NodeRecord> & Pick<NodeRecord, 'serverUUID'>): NodeRecord {
  const UUID = overrides.UUID ?? randomUUID();
  return {
    UUID,
    name: `node-${UUID.slice(0, 8)}`,
    hostname: 'host',
    nvmeEndpoint: '10.0.0.1:4420',
    discoveryEndpoint: '10.0.0.1:8009',
    failureDomains: [],
    maxNvmeDevices: 24,
    managedDeviceSerials: [],
    journalDeviceSerial: '',
    ec: false,
    createdAt: now(),
    ...overrides,
  };
}

export function deviceRecord(overrides: Partial<DeviceRecord> & Pick<DeviceRecord, 'serial' | 'serverUUID'>): DeviceRecord {
  return {
    model: 'Test NVMe SSD',
    sizeBytes: '1000204886016',
    numaNode: 0,
    firmware: '1.0',
    pciAddress: '0000:01:00.0',
    controller: 'nvme0',
    holdsOS: false,
    ledState: 'off',
    present: true,
    reportedAt: now(),
    ...overrides,
  };
}

export function factsRecord(overrides: Partial<ServerFactsRecord> & Pick<ServerFactsRecord, 'serverUUID'>): ServerFactsRecord {
  return {
    hostname: 'host',
    productVersion: '0.1.0',
    tpm2IsSupported: false,
    cpuCores: 8,
    memoryBytes: '34359738368',
    os: 'Debian GNU/Linux 12',
    kernel: '6.1.0-test',
    journalDeviceSerial: '',
    reportedAt: now(),
    reportedTo: 'test-control-plane',
    ...overrides,
  };
}

export function controlPlaneRecord(overrides: Partial<ControlPlaneRecord> = {}): ControlPlaneRecord {
  const instanceId = overrides.instanceId ?? `cp-${randomUUID().slice(0, 8)}`;
  return { instanceId, hostname: 'host', apiEndpoint: '10.0.0.1:8080', grpcEndpoint: '10.0.0.1:7443', version: '0.1.0', since: now(), ...overrides };
}

// ---- writers ----

/** A node's pool as the control plane stores it from its agent's PoolReport: Ready, its devices Healthy. */
/** A volume record as the API writes it, placed on `nodeList` and Available. */
export function volumeRecord(nodeList: string[], overrides: Partial<VolumeRecord> = {}): VolumeRecord {
  const UUID = overrides.UUID ?? randomUUID();
  return {
    UUID, name: `vol-${UUID.slice(0, 8)}`, projectName: 'default', sizeBytes: '1073741824', acl: ['ALLOW_ANY'], ipAcl: ['ALLOW_ANY'],
    compression: false, replicaCount: nodeList.length, sectorSize: 4096, labels: [], qosPolicyUUID: '', placementRestrictions: [],
    sourceSnapshotUUID: '', sourceSnapshotName: '', encrypted: false, state: 'Available', generation: 1,
    placement: { nodeList, primaryNodeUUID: nodeList[0] ?? '', nsid: 1, port: 4421 }, failureReason: '', rollbackSnapshotUUID: '',
    creationTime: new Date().toISOString(), ...overrides,
  };
}

export function nodePoolRecord(node: NodeRecord, overrides: Partial<NodePoolRecord> = {}): NodePoolRecord {
  return {
    nodeUUID: node.UUID, serverUUID: node.serverUUID, state: 'Ready', error: '', level: 'raid0', journal: false,
    rawBytes: '0', arrayBytes: '0', capacityBytes: '0', freeBytes: '0', provisionedBytes: '0', logicalUsedBytes: '0',
    physicalUsedBytes: '0', physicalUsedIncludingParityBytes: '0', rebuildProgressPercent: 0,
    devices: node.managedDeviceSerials.map((serial) => ({ serial, role: 'data', state: 'Healthy', sizeBytes: '1000', error: '', stateSince: now(), rebuildCompletedAt: '' })),
    measuredAt: now(), reportedAt: now(), ...overrides,
  };
}

/** Puts the record as JSON: a plain put on etcd, a one-write transaction on another Kv (the in-memory etcd). */
export async function putRecord(client: KvClient, key: string, record: unknown): Promise<void> {
  const kv = kvOf(client);
  if (kv instanceof EtcdKv) await kv.etcd.put(key).value(JSON.stringify(record)).exec();
  else await kv.commit({ guards: [], writes: [{ put: key, value: record }] });
}

export interface JoinedServer {
  readonly server: ServerRecord;
  readonly nodes: readonly NodeRecord[];
}

/**
 * What an agent writes when it joins: its server record, one record per node (the server's
 * hostname and UUID filled in), and its presence listing every node (present = agent alive).
 */
export async function joinServer(
  etcd: KvClient,
  options: { server?: Partial<ServerRecord>; nodes?: readonly Partial<NodeRecord>[]; present?: boolean } = {},
): Promise<JoinedServer> {
  const base = serverRecord(options.server);
  const nodes = (options.nodes ?? [{}]).map((n) => nodeRecord({ hostname: base.hostname, ...n, serverUUID: base.UUID }));
  const server: ServerRecord = { ...base, nodeUUIDs: nodes.map((n) => n.UUID) };
  await putRecord(etcd, keys.server(server.UUID), server);
  for (const node of nodes) await putRecord(etcd, keys.node(node.UUID), node);
  if (options.present ?? true) await markPresent(etcd, server.UUID, server.nodeUUIDs, server.hostname);
  return { server, nodes };
}

/** The agent's presence key (leased in production): these nodes are Active. */
export async function markPresent(etcd: KvClient, serverUUID: string, nodeUUIDs: readonly string[], hostname = 'host'): Promise<void> {
  const presence: PresenceRecord = { serverUUID, nodeUUIDs: [...nodeUUIDs], hostname, agentVersion: '0.1.0', agentInstance: randomUUID(), since: now() };
  await putRecord(etcd, keys.presence(serverUUID), presence);
}

/** Deletes the key: a plain delete on etcd, a one-write transaction on another Kv (the in-memory etcd). */
export async function deleteKey(client: KvClient, key: string): Promise<void> {
  const kv = kvOf(client);
  if (kv instanceof EtcdKv) await kv.etcd.delete().key(key).exec();
  else await kv.commit({ guards: [], writes: [{ delete: key }] });
}

/** Deletes every key under `prefix`: one ranged delete on etcd, one transaction of deletes on another Kv. */
export async function deleteUnder(client: KvClient, prefix: string): Promise<void> {
  const kv = kvOf(client);
  if (kv instanceof EtcdKv) await kv.etcd.delete().prefix(prefix).exec();
  else await kv.commit({ guards: [], writes: (await kv.keys(prefix)).map((key) => ({ delete: key })) });
}

/** The agent's lease expired: the presence key is gone and the server's nodes are Inactive. */
export async function markAbsent(client: KvClient, serverUUID: string): Promise<void> {
  await deleteKey(client, keys.presence(serverUUID));
}

/** The key as stored (its value and revisions); null when absent. */
export function readKey(client: KvClient, key: string): Promise<StoredKey | null> {
  return kvOf(client).get(key);
}

/** The key's value as text; null when absent. */
export async function readText(client: KvClient, key: string): Promise<string | null> {
  return (await readKey(client, key))?.value.toString() ?? null;
}

/** The key's record, parsed; null when absent. */
export async function readRecord<T>(client: KvClient, key: string): Promise<T | null> {
  const text = await readText(client, key);
  return text === null ? null : (JSON.parse(text) as T);
}

/** The values under `prefix` as text, in key order. */
export async function textsUnder(client: KvClient, prefix: string): Promise<string[]> {
  return (await kvOf(client).range(prefix)).map((stored) => stored.value.toString());
}

/** The keys under `prefix`, in key order. */
export function keysUnder(client: KvClient, prefix: string): Promise<string[]> {
  return kvOf(client).keys(prefix);
}

/** What the control plane persists from an agent's inventory report: facts and devices. */
export async function reportInventory(
  etcd: KvClient,
  serverUUID: string,
  report: { facts?: Partial<ServerFactsRecord>; devices?: readonly (Partial<DeviceRecord> & Pick<DeviceRecord, 'serial'>)[] },
): Promise<DeviceRecord[]> {
  if (report.facts !== undefined) await putRecord(etcd, keys.serverFacts(serverUUID), factsRecord({ ...report.facts, serverUUID }));
  const devices = (report.devices ?? []).map((d) => deviceRecord({ ...d, serverUUID }));
  for (const device of devices) await putRecord(etcd, keys.device(device.serial), device);
  return devices;
}

// ---- API harness ----

/** `etcd` is what the harness runs on: the etcd client (startApiHarness), or the backend's client (startApiHarnessOn). */
export interface ApiHarness<C extends KvClient = Etcd3> {
  readonly etcd: C;
  readonly cluster: ClusterRecord;
  readonly baseUrl: string;
  /** system:cluster-admin (the bootstrap token, admin.jwt). */
  readonly adminToken: string;
  /** system:cluster-viewer. */
  readonly clusterViewerToken: string;
  /** A valid token without a cluster role: default:viewer. */
  readonly projectViewerToken: string;
  /** The control plane's read model, started; each /api request syncs it before its route. */
  readonly cache: WatchCache;
  /** GET with an optional bearer token; returns status and parsed JSON body. */
  get(path: string, token?: string): Promise<{ status: number; body: any; contentType: string | null }>;
  close(): Promise<void>;
}

/**
 * Starts etcd, bootstraps a cluster into a temp stateDir, and serves the routers built by
 * `routers(etcd, auth, cache)` on 127.0.0.1 (port 0), composed as the control plane composes them
 * (a watch cache synced before every /api route).
 */
export function startApiHarness(routers: (etcd: Etcd3, auth: Authenticator, cache: WatchCache) => Router[]): Promise<ApiHarness> {
  return startApiHarnessOn(etcdBackend, routers);
}

/**
 * startApiHarness() on the backend `open` gives (kv-backends.ts): a private etcd, or the in-memory
 * one, so that a suite runs on both; the harness closes the backend when it closes.
 */
export async function startApiHarnessOn<C extends KvClient>(
  open: () => Promise<KvBackend & { readonly client: C }>,
  routers: (etcd: C, auth: Authenticator, cache: WatchCache) => Router[],
): Promise<ApiHarness<C>> {
  const backend = await open();
  const etcd = backend.client;
  const stateDir = mkdtempSync(join(tmpdir(), 'strata-cp-'));
  let server: Server | undefined;
  let stopCache = async (): Promise<void> => {};
  try {
    const logger = createLogger('test', 'silent');
    const { cluster } = await bootstrapCluster({
      store: new BootstrapStore(etcd), logger, instanceId: 'test-cp', clusterName: 'test-cluster', subsystemNqnPrefix: 'nqn.2024-01.io.strata', stateDir, adminTokenTtlDays: 1,
    });
    const adminToken = readFileSync(join(stateDir, ADMIN_TOKEN_FILE), 'utf8').trim();
    const rootKey = await importPrivateKey(readFileSync(join(stateDir, ROOT_KEY_FILE), 'utf8'));
    const mint = (roles: string[]) => signToken(rootKey, { kid: 'system:root', subject: 'test', roles, ttlSeconds: 3600 });
    const clusterViewerToken = await mint([ROLE_CLUSTER_VIEWER]);
    const projectViewerToken = await mint(['default:viewer']);
    const cache = new WatchCache(etcd, logger);
    await cache.start();
    stopCache = () => cache.stop();
    const auth = new Authenticator(cache);
    const app = createHttpApp(logger, routers(etcd, auth, cache), { beforeApiRoutes: () => cache.sync(), authenticate: (headers) => auth.authenticate(headers) });
    const httpServer = createServer(app.callback());
    server = httpServer;
    await new Promise<void>((resolve) => httpServer.listen(0, '127.0.0.1', resolve));
    const baseUrl = `http://127.0.0.1:${(httpServer.address() as AddressInfo).port}`;
    return {
      etcd, cluster, baseUrl, adminToken, clusterViewerToken, projectViewerToken, cache,
      async get(path, token) {
        const res = await fetch(baseUrl + path, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
        const text = await res.text();
        const answer = { status: res.status, body: text ? JSON.parse(text) : undefined, contentType: res.headers.get('content-type') };
        checkAnswer('GET', path, answer);
        return answer;
      },
      async close() {
        httpServer.closeAllConnections();
        await new Promise<void>((resolve) => httpServer.close(() => resolve()));
        await cache.stop();
        await backend.close();
        rmSync(stateDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    server?.close();
    await stopCache();
    await backend.close();
    rmSync(stateDir, { recursive: true, force: true });
    throw err;
  }
}

/** Asserts-friendly: the sorted key set of an object. */
export function fieldsOf(value: object): string[] {
  return Object.keys(value).sort();
}
