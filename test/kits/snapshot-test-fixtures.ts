// Test support for the snapshot tests: records written the way their owners write them
// (volumes and their name index by the volumes service, placement by the leader, status by the
// control plane from agent reports), the interfaces snapshots depend on implemented over the
// stored records as their owners would, project tokens, and an HTTP helper. Used only by
// *.test.ts. Everything takes a KvClient (etcd's, or the in-memory etcd), so the suites run on
// both backends.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { ALLOW_ANY } from '../../lib/contract/acl.js';
import { errors } from '../../lib/errors.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../lib/etcd/kv.js';
import { RecordStore } from '../../lib/etcd/record-store.js';
import { commitTransaction, type Write } from '../../lib/etcd/transaction.js';
import type { CredentialRecord, ProjectRecord, SnapshotRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import { importPrivateKey, signToken } from '../../control-plane/auth/tokens.js';
import type { EventInput, EventRecorder } from '../../control-plane/events/event-recorder.js';
import { deleteKey, putRecord, readText } from '../helpers/records.js';
import type { ProjectDirectory, VolumeUsage } from '../../control-plane/volumes/volume-dependencies.js';

export function volumeRecord(overrides: Partial<VolumeRecord> = {}): VolumeRecord {
  const UUID = overrides.UUID ?? randomUUID();
  return {
    UUID,
    name: `vol-${UUID.slice(0, 8)}`,
    projectName: 'default',
    sizeBytes: '10737418240',
    acl: ['nqn.2014-08.org.nvmexpress:uuid:host-1'],
    ipAcl: [ALLOW_ANY],
    compression: true,
    // Snapshots of replicated volumes are refused (docs/replication.md).
    replicaCount: 1,
    sectorSize: 4096,
    labels: [{ key: 'team', value: 'storage' }],
    qosPolicyUUID: '',
    placementRestrictions: [],
    sourceSnapshotUUID: '',
    sourceSnapshotName: '',
    encrypted: false,
    state: 'Available',
    generation: 1,
    placement: { nodeList: [randomUUID(), randomUUID(), randomUUID()], primaryNodeUUID: '', nsid: 7, port: 20007 },
    failureReason: '',
    rollbackSnapshotUUID: '',
    creationTime: new Date().toISOString(),
    ...overrides,
  };
}

/** What the volumes service writes: the record and, unless Deleting, its name index. */
export async function putVolume(etcd: KvClient, volume: VolumeRecord): Promise<VolumeRecord> {
  if (volume.placement && volume.placement.primaryNodeUUID === '') volume.placement.primaryNodeUUID = volume.placement.nodeList[0] ?? '';
  // Both writes in one transaction (one revision), as the volumes service writes them.
  const nameIndex: Write = volume.state !== 'Deleting'
    ? { put: keys.volumeName(volume.projectName, volume.name), value: { UUID: volume.UUID } }
    : { delete: keys.volumeName(volume.projectName, volume.name) };
  await commitTransaction(etcd, { guards: [], writes: [{ put: keys.volume(volume.UUID), value: volume }, nameIndex] });
  return volume;
}

/** Changes a stored volume (state, name...) the way its writers would. */
export async function changeVolume(etcd: KvClient, volume: VolumeRecord, change: Partial<VolumeRecord>): Promise<VolumeRecord> {
  if (change.name !== undefined && change.name !== volume.name) await deleteKey(etcd, keys.volumeName(volume.projectName, volume.name));
  return putVolume(etcd, { ...volume, ...change });
}

export async function setSnapshotState(etcd: KvClient, uuid: string, state: SnapshotRecord['state'], change: Partial<SnapshotRecord> = {}): Promise<SnapshotRecord> {
  const store = new RecordStore(etcd);
  const updated = await store.update<SnapshotRecord>(keys.snapshot(uuid), (current) => ({ record: { ...current.record, ...change, state } }), {
    notFound: () => errors.notFound('snapshot', uuid),
  });
  return updated.record;
}

export function statusRecord(volumeUUID: string, nodeUUID: string, snapshots: VolumeStatusRecord['snapshots'], overrides: Partial<VolumeStatusRecord> = {}): VolumeStatusRecord {
  return {
    volumeUUID,
    nodeUUID,
    generation: 1,
    state: 'Served',
    error: '',
    snapshots,
    connectedHosts: [],
    logicalUsedBytes: '0',
    physicalUsedBytes: '0',
    reportedAt: new Date().toISOString(),
    ...overrides,
  };
}

/** ProjectDirectory over the project records (what projects/ implements). */
export class TestProjects implements Pick<ProjectDirectory, 'require'> {
  constructor(private readonly etcd: KvClient) {}
  async require(projectName: string): Promise<void> {
    const value = await readText(this.etcd, keys.project(projectName));
    if (value === null) throw errors.notFound('project', projectName);
  }
}

export async function putProject(etcd: KvClient, name: string): Promise<void> {
  const record: ProjectRecord = { UUID: randomUUID(), name, description: '', defaultPolicies: [], builtIn: false, createdAt: new Date().toISOString() };
  await putRecord(etcd, keys.project(name), record);
}

/** VolumeUsage.countClonedFrom over the volume records (what volumes/ implements). */
export class TestClones implements Pick<VolumeUsage, 'countClonedFrom'> {
  constructor(private readonly etcd: KvClient) {}
  async countClonedFrom(snapshotUUID: string): Promise<number> {
    const volumes = await new RecordStore(this.etcd).list<VolumeRecord>(keys.volumesPrefix());
    return volumes.filter((v) => v.record.sourceSnapshotUUID === snapshotUUID && v.record.state !== 'Deleting').length;
  }
}

export class CollectingEvents implements EventRecorder {
  readonly events: EventInput[] = [];
  async record(event: EventInput): Promise<void> {
    this.events.push(event);
  }
  named(eventName: string): EventInput[] {
    return this.events.filter((e) => e.eventName === eventName);
  }
}

/** Uploads a credential for `project` (as a project admin would) and mints tokens with it. */
export async function projectTokens(etcd: KvClient, project: string): Promise<{ admin: string; viewer: string; none: string }> {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const credential: CredentialRecord = {
    project,
    name: 'snapshot-tests',
    type: 'RS256PubKey',
    payload: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    createdAt: new Date().toISOString(),
  };
  await putRecord(etcd, keys.credential(project, credential.name), credential);
  const key = await importPrivateKey(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  const mint = (roles: string[]) => signToken(key, { kid: `${project}:${credential.name}`, subject: 'snapshot-tests', roles, ttlSeconds: 3600 });
  return { admin: await mint([`${project}:admin`]), viewer: await mint([`${project}:viewer`]), none: await mint([]) };
}

export interface HttpResult {
  status: number;
  body: any;
  contentType: string | null;
}

/** One HTTP request; `body` is JSON-encoded unless it is a string (sent as is). */
export async function call(
  baseUrl: string,
  method: string,
  path: string,
  options: { token?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<HttpResult> {
  const headers: Record<string, string> = { ...(options.headers ?? {}) };
  if (options.token) headers['Authorization'] = `Bearer ${options.token}`;
  let body: string | undefined;
  if (options.body !== undefined) {
    body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
    headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(baseUrl + path, { method, headers, ...(body !== undefined ? { body } : {}) });
  const text = await res.text();
  let parsed: unknown = undefined;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  return { status: res.status, body: parsed, contentType: res.headers.get('content-type') };
}

/** Every key and value under a prefix: to prove a refused request changed nothing. */
export async function dump(etcd: KvClient, prefix: string): Promise<Record<string, string>> {
  return Object.fromEntries((await kvOf(etcd).range(prefix)).map((stored) => [stored.key, stored.value.toString()]));
}
