// Test support for the volume tests: the volume routes served with the real directories of
// projects, policies, snapshots and feature flags, project-scoped tokens, and writers that play
// the active cluster manager and the agents (placement, status reports). It runs on a private
// etcd or on the in-memory one (`backend`), so the suites run on both (describeForEveryBackend).
import { checkAnswer } from '../helpers/openapi-answers.js';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import { RecordStore } from '../../lib/etcd/record-store.js';
import { StrataError, errors } from '../../lib/errors.js';
import type { CredentialRecord, ProjectRecord, ReplicaSetRecord, SnapshotRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';
import { etcdBackend, type KvBackend } from '../helpers/kv-backends.js';
import { putRecord, readRecord, startApiHarnessOn, type ApiHarness } from '../helpers/records.js';
import { importPrivateKey, signToken } from '../../control-plane/auth/tokens.js';
import type { EventInput, EventRecorder } from '../../control-plane/events/event-recorder.js';
import type { PreparedEvent } from '../../control-plane/events/event-log-store.js';
import { FeatureFlagsService } from '../../control-plane/feature-flags/feature-flags-service.js';
import { FeatureFlagsStore } from '../../control-plane/feature-flags/feature-flags-store.js';
import { InventoryReader } from '../../control-plane/inventory/inventory-reader.js';
import { KernelCapabilitiesService } from '../../control-plane/kernel-capabilities/kernel-capabilities-service.js';
import { WatchedPolicyDirectory } from '../../control-plane/policies/policy-directory.js';
import { WatchedProjectDirectory } from '../../control-plane/projects/project-directory.js';
import { POLICY_TYPE_QOS } from '../../control-plane/projects/projects-schema.js';
import { EtcdSnapshotDirectory } from '../../control-plane/snapshots/snapshot-service.js';
import { SnapshotStore } from '../../control-plane/snapshots/snapshot-store.js';
import type { WatchCache } from '../../control-plane/watch-cache/watch-cache.js';
import type { FeatureFlagName, ReplicaLimits } from '../../control-plane/volumes/volume-dependencies.js';
import { createVolumeRoutes, type VolumeRoutesDeps } from '../../control-plane/volumes/volume-routes.js';
import { VolumeService } from '../../control-plane/volumes/volume-service.js';
import { VolumeStore } from '../../control-plane/volumes/volume-store.js';

/** The policy record as these tests store it (the policies folder owns the real one). */
export interface TestPolicyRecord {
  UUID: string;
  name: string;
  description: string;
  policyVisibility: 'Unavailable' | 'Scoped' | 'Global';
  projectsNamesScope: string[];
}

export class FixedReplicaLimits implements ReplicaLimits {
  constructor(public max: number) {}

  async currentMaxReplicas(): Promise<number> {
    return this.max;
  }
}

export class CollectingRecorder implements EventRecorder {
  readonly events: EventInput[] = [];

  async record(event: EventInput): Promise<void> {
    this.events.push(event);
  }

  /** Collects the event; adds no write to the caller's transaction. */
  async prepare(event: EventInput): Promise<PreparedEvent> {
    this.events.push(event);
    return { id: '', wire: {} as PreparedEvent['wire'], writes: [] };
  }
}

export interface HttpResult {
  status: number;
  body: any;
  contentType: string | null;
  headers: Headers;
}

export interface VolumesHarness {
  readonly api: ApiHarness<KvClient>;
  /** The backend's client: etcd's, or the in-memory etcd (read and write it through test/helpers/records.ts). */
  readonly etcd: KvClient;
  readonly store: VolumeStore;
  readonly service: VolumeService;
  readonly recorder: CollectingRecorder;
  /** The replica limit the service uses, unless the harness was started with `replicaLimits`. */
  readonly limits: FixedReplicaLimits;
  readonly tokens: {
    admin: string;
    clusterViewer: string;
    /** default:viewer */
    defaultViewer: string;
    /** default:admin */
    defaultAdmin: string;
    /** p2:admin */
    p2Admin: string;
  };
  request(method: string, path: string, options?: { token?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> }): Promise<HttpResult>;
  /** POST /api/v2/projects/{project}/volumes as cluster admin; asserts nothing. */
  create(body: Record<string, unknown>, project?: string): Promise<HttpResult>;
  putProject(name: string, qosPolicyUUID?: string): Promise<void>;
  putPolicy(policy: Partial<TestPolicyRecord> & { name: string }): Promise<TestPolicyRecord>;
  putSnapshot(snapshot: Partial<SnapshotRecord> & { name: string; projectName: string }): Promise<SnapshotRecord>;
  setFlag(name: FeatureFlagName, enabled: boolean): Promise<void>;
  /** What the active cluster manager does: place the volume and move its state. */
  place(uuid: string, placement: { nodeList: string[]; primaryNodeUUID?: string; nsid?: number; state?: VolumeRecord['state'] }): Promise<void>;
  /** Forces a state, as the cluster manager would (Available after an update, Failed...). */
  setState(uuid: string, state: VolumeRecord['state']): Promise<void>;
  /** What an agent reports, persisted by the control plane. */
  report(uuid: string, nodeUUID: string, status?: Partial<VolumeStatusRecord>): Promise<void>;
  record(uuid: string): Promise<VolumeRecord | null>;
  /** Brings the watch cache (what `store` reads) up to date, as every request does first. */
  sync(): Promise<void>;
  close(): Promise<void>;
}

/** A credential of `project` and a signer for tokens with that project's roles. */
async function projectCredential(etcd: KvClient, project: string): Promise<(roles: string[]) => Promise<string>> {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const credential: CredentialRecord = {
    project, name: 'volume-tests', type: 'RS256PubKey', payload: publicKey.export({ type: 'spki', format: 'pem' }).toString(), createdAt: new Date().toISOString(),
  };
  await putRecord(etcd, keys.credential(project, credential.name), credential);
  const key = await importPrivateKey(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  return (roles) => signToken(key, { kid: `${project}:${credential.name}`, subject: 'volume-tests', roles, ttlSeconds: 3600 });
}

export async function startVolumesHarness(
  options: {
    maxReplicas?: number;
    /** The service's replica limit instead of `limits` (e.g. the real one, from presence keys). */
    replicaLimits?: (cache: WatchCache) => ReplicaLimits;
    /** Check nodes' kernel capabilities (a QoS policy needs ublk) from the servers' facts in etcd. */
    kernelCapabilities?: boolean;
    /** What it runs on (kv-backends.ts); a private etcd unless given. */
    backend?: () => Promise<KvBackend>;
  } = {},
): Promise<VolumesHarness> {
  const recorder = new CollectingRecorder();
  const limits = new FixedReplicaLimits(options.maxReplicas ?? 3);
  // The service needs the cluster UUID, known once the harness has bootstrapped: the routes
  // read deps.volumes per request, so it is filled in below.
  const routeDeps = { volumes: undefined } as unknown as { -readonly [K in keyof VolumeRoutesDeps]: VolumeRoutesDeps[K] };
  const api = await startApiHarnessOn(options.backend ?? etcdBackend, (_etcd, auth) => {
    routeDeps.auth = auth;
    return [createVolumeRoutes(routeDeps)];
  });
  const etcd = api.etcd;
  const store = new VolumeStore(new RecordStore(etcd), api.cache);
  const service = new VolumeService({
    store,
    projects: new WatchedProjectDirectory(api.cache),
    policies: new WatchedPolicyDirectory(api.cache),
    snapshots: new EtcdSnapshotDirectory(new SnapshotStore(etcd)),
    flags: new FeatureFlagsService(new FeatureFlagsStore(etcd), recorder),
    replicaLimits: options.replicaLimits?.(api.cache) ?? limits,
    ...(options.kernelCapabilities ? { kernelCapabilities: new KernelCapabilitiesService(new InventoryReader(api.cache)) } : {}),
    events: recorder,
    clusterUUID: api.cluster.UUID,
    clusterSubsystemNQN: api.cluster.subsystemNQN,
  });
  routeDeps.volumes = service;

  const putProject = async (name: string, qosPolicyUUID?: string) => {
    const project: ProjectRecord = {
      UUID: randomUUID(), name, description: '', builtIn: false, createdAt: new Date().toISOString(),
      defaultPolicies: qosPolicyUUID ? [{ policyType: POLICY_TYPE_QOS, policyUUID: qosPolicyUUID }] : [],
    };
    await putRecord(etcd, keys.project(name), project);
  };
  await putProject('p2');
  const signDefault = await projectCredential(etcd, 'default');
  const signP2 = await projectCredential(etcd, 'p2');
  const tokens = {
    admin: api.adminToken,
    clusterViewer: api.clusterViewerToken,
    defaultViewer: api.projectViewerToken,
    defaultAdmin: await signDefault(['default:admin']),
    p2Admin: await signP2(['p2:admin']),
  };

  const request: VolumesHarness['request'] = async (method, path, opts = {}) => {
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (opts.token) headers['Authorization'] = `Bearer ${opts.token}`;
    let body: string | undefined;
    if (opts.rawBody !== undefined) body = opts.rawBody;
    else if (opts.body !== undefined) body = JSON.stringify(opts.body);
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(api.baseUrl + path, { method, headers, ...(body === undefined ? {} : { body }) });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = text;
    }
    checkAnswer(method, path, { status: res.status, contentType: res.headers.get('content-type'), body: parsed });
    return { status: res.status, body: parsed, contentType: res.headers.get('content-type'), headers: res.headers };
  };

  const modify = async (uuid: string, change: (v: VolumeRecord) => VolumeRecord) => {
    await new RecordStore(etcd).update<VolumeRecord>(keys.volume(uuid), (current) => ({ record: change(current.record) }), {
      notFound: () => new StrataError('NOT_FOUND', `volume ${uuid} not found`),
    });
  };

  return {
    api, etcd, store, service, recorder, limits, tokens, request,
    create: (body, project = 'default') => request('POST', `/api/v2/projects/${project}/volumes`, { token: api.adminToken, body }),
    putProject,
    async putPolicy(policy) {
      const record: TestPolicyRecord = { UUID: randomUUID(), description: '', policyVisibility: 'Global', projectsNamesScope: [], ...policy };
      await putRecord(etcd, keys.policy(record.UUID), record);
      await putRecord(etcd, keys.policyName(record.name), { UUID: record.UUID });
      return record;
    },
    async putSnapshot(snapshot) {
      const record: SnapshotRecord = {
        UUID: randomUUID(), description: '', sourceVolumeUUID: randomUUID(), sourceVolumeName: 'source', sizeBytes: String(1024 ** 3), compression: false,
        sectorSize: 4096, labels: [], state: 'Available', failureReason: '', retentionSeconds: 0, creationTime: new Date().toISOString(), ...snapshot,
      };
      await putRecord(etcd, keys.snapshot(record.UUID), record);
      await putRecord(etcd, keys.snapshotName(record.projectName, record.name), { UUID: record.UUID });
      return record;
    },
    async setFlag(name, enabled) {
      await putRecord(etcd, keys.featureFlag(name), { name, enabled });
    },
    async place(uuid, placement) {
      const primaryNodeUUID = placement.primaryNodeUUID ?? placement.nodeList[0] ?? '';
      await modify(uuid, (v) => ({
        ...v,
        state: placement.state ?? 'Available',
        placement: { nodeList: placement.nodeList, primaryNodeUUID, nsid: placement.nsid ?? 1, port: 4420 },
      }));
      // As the controller places a replicated volume: every copy in sync, epoch 1.
      if (placement.nodeList.length > 1) {
        const replicaSet: ReplicaSetRecord = { volumeUUID: uuid, epoch: 1, primaryNodeUUID, inSync: [...placement.nodeList], reason: 'created', announced: 'Unknown', updatedAt: new Date().toISOString() };
        await putRecord(etcd, keys.replicaSet(uuid), replicaSet);
      }
    },
    async setState(uuid, state) {
      await modify(uuid, (v) => ({ ...v, state }));
    },
    async report(uuid, nodeUUID, status = {}) {
      const record: VolumeStatusRecord = {
        volumeUUID: uuid, nodeUUID, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [], logicalUsedBytes: '0', physicalUsedBytes: '0',
        reportedAt: new Date().toISOString(), ...status,
      };
      await putRecord(etcd, keys.volumeStatus(uuid, nodeUUID), record);
    },
    async record(uuid) {
      return readRecord<VolumeRecord>(etcd, keys.volume(uuid));
    },
    sync: () => api.cache.sync(),
    close: () => api.close(),
  };
}
