// Volumes (spec 2.15, 3.1, 4.11; docs/volume-lifecycle.md): the API side of the lifecycle. It
// writes only the volume record and its name index, bumps `generation` when the data path must
// act, and leaves placement and the moves to Available/Failed/gone to the active cluster
// manager. Rules the spec leaves open are decided in docs/volumes.md.
import { randomUUID } from 'node:crypto';
import { StrataError, errors } from '../../lib/errors.js';
import type { VolumeRecord, VolumeState } from '../../lib/records.js';
import { LOST_RACE, retryLostRaces, type LostRace } from '../../lib/retry.js';
import { DEFAULT_PROJECT } from '../auth/permissions.js';
import { catalogued, type EventName } from '../events/event-catalogue.js';
import type { EventRecorder } from '../events/event-recorder.js';
import type { EventPreparer } from '../events/etcd-event-log.js';
import type { PreparedEvent } from '../events/event-log-store.js';
import { DEFAULT_ACL, DEFAULT_IP_ACL } from '../../lib/contract/acl.js';
import { volumeSubsystemNQN } from '../../lib/contract/nqn.js';
import { MAX_SIZE_BYTES } from '../../lib/contract/size.js';
import type {
  CapacityCeiling,
  FeatureFlagReader,
  KernelCapabilityCheck,
  PolicyDirectory,
  PolicyRef,
  ProjectDirectory,
  ReplicaLimits,
  SnapshotDirectory,
  SnapshotRef,
  VolumeUsage,
} from './volume-dependencies.js';
import { type CreateVolumeBody, type ListVolumesQuery, type UpdateVolumeBody } from './volume-schema.js';
import type { Guard, StoredVolume, VolumeChange, VolumeStore } from './volume-store.js';
import { volumeConnectionToWire, volumeToWire, type EffectiveQos, type VolumeConnectionWire, type VolumeWire } from './volume-wire.js';

/** Throws PERMISSION_DENIED (403) when the caller may not act on the project. */
export type ProjectGuard = (projectName: string) => void;

/** How a request addresses one volume: by UUID, or by name within a project. */
export interface VolumeTarget {
  readonly UUID?: string | undefined;
  readonly name?: string | undefined;
  /** Given: the volume must be in it (and the caller is checked against it first). */
  readonly projectName?: string | undefined;
}

export interface VolumeServiceDeps {
  readonly store: VolumeStore;
  readonly projects: ProjectDirectory;
  readonly policies: PolicyDirectory;
  readonly snapshots: SnapshotDirectory;
  readonly flags: FeatureFlagReader;
  readonly replicaLimits: ReplicaLimits;
  /** Refuses at create what can never be placed (issue 17); absent in tests without nodes. */
  readonly capacity?: CapacityCeiling;
  /** Refuses a QoS policy on nodes that cannot enforce it (no ublk); absent in tests without nodes. */
  readonly kernelCapabilities?: KernelCapabilityCheck;
  readonly events: EventRecorder & EventPreparer;
  /** The cluster's UUID (responses' clusterId; placement restriction ClusterID). */
  readonly clusterUUID: string;
  /** The cluster's subsystem NQN: each volume's subsystem NQN is derived from it. */
  readonly clusterSubsystemNQN: string;
  readonly now?: () => Date;
}

const TRANSIENT_STATES: readonly VolumeState[] = ['Creating', 'Updating', 'Rollback'];

// What the data path cannot do, refused before anything is written (docs/volumes.md,
// "Refused requests"): the API never accepts a change it would only echo.
/** The logical block size hosts are served: a file-backed nvmet namespace has 4 KiB blocks. */
const SERVED_SECTOR_SIZE = 4096;
const SECTOR_SIZE_REFUSAL =
  'sectorSize_512B is not supported: volumes are served from file-backed namespaces of the kernel NVMe target, whose logical block size is 4096 bytes; use sectorSize_4K (the default)';
const SHRINK_REFUSAL =
  'shrinking a volume is not supported, with or without Force (the data path only grows a volume\'s backing, and hosts would keep seeing the old size); create a smaller volume and copy the data';
const COMPRESSION_CHANGE_REFUSAL =
  'a volume\'s compression is fixed when it is created (its backing\'s format on every node); the data path does not convert an existing backing, so neither the data already written nor new writes would follow the change; create a new volume with the compression wanted and copy the data';

export class VolumeService {
  private readonly deps: VolumeServiceDeps;

  constructor(deps: VolumeServiceDeps) {
    this.deps = deps;
  }

  /** POST: the new volume, Creating, unplaced (spec §3.1). The caller was checked for write access. */
  async create(body: CreateVolumeBody): Promise<VolumeWire> {
    // A referenced snapshot or policy that changes between the checks and the commit (deleted,
    // going Deleting) refuses the commit: check again with what is there now.
    return retryLostRaces(5, () => this.createOnce(body), () => new StrataError('OPERATION_IN_PROGRESS', 'the snapshot or policy the volume refers to keeps changing; retry'));
  }

  private async createOnce(body: CreateVolumeBody): Promise<VolumeWire | LostRace> {
    const { projects, replicaLimits, store } = this.deps;
    const projectName = body.projectName ?? DEFAULT_PROJECT;
    // Independent reads: one round trip of waiting, not two.
    const [, maxReplicas] = await Promise.all([projects.require(projectName), replicaLimits.currentMaxReplicas()]);

    const replicaCount = body.replicaCount ?? 1;
    if (maxReplicas === 0) {
      // No node is Active: a passing state (an agent's lease lapsed and it is registering again,
      // or no agent has joined yet), not a fault of the request. 503 tells clients to retry.
      throw errors.unavailable('no node is Active now, so no volume can be placed; retry');
    }
    if (replicaCount > maxReplicas) {
      throw errors.invalid(`replicaCount ${replicaCount} exceeds the cluster's current maximum of ${maxReplicas}`);
    }
    if (body.placementRestrictions) await this.checkPlacementRestrictions(body.placementRestrictions, replicaCount);

    const references: Guard[] = [];
    const snapshot = await this.cloneSource(projectName, body);
    if (snapshot && replicaCount > 1) throw errors.invalid('a clone has replicaCount 1: replicated volumes cannot be created from snapshots yet (docs/replication.md)');
    if (snapshot) references.push(await this.usableSnapshotGuard(snapshot));
    if (snapshot && body.sectorSize !== undefined && body.sectorSize !== snapshot.sectorSize) {
      throw errors.invalid(`sectorSize ${body.sectorSize} differs from the snapshot's ${snapshot.sectorSize}; a clone keeps its snapshot's sector size`);
    }
    const sectorSize = body.sectorSize ?? snapshot?.sectorSize ?? 4096;
    if (sectorSize !== SERVED_SECTOR_SIZE) throw errors.invalid(SECTOR_SIZE_REFUSAL);
    const requested = body.size ?? (snapshot ? BigInt(snapshot.sizeBytes) : undefined);
    if (requested === undefined) throw errors.invalid('invalid request: size is required');
    const sizeBytes = alignedSize(requested, sectorSize);
    if (snapshot && sizeBytes < BigInt(snapshot.sizeBytes)) {
      throw errors.invalid(`size ${sizeBytes} is smaller than the snapshot's ${snapshot.sizeBytes} bytes`);
    }
    const ceiling = await this.deps.capacity?.largestVolumeBytes(replicaCount);
    if (ceiling !== undefined && sizeBytes > ceiling) {
      throw errors.invalid(`size ${sizeBytes} bytes can never be placed: the largest volume with ${replicaCount} replica(s) this cluster's nodes can hold is ${ceiling} bytes (node capacity × overcommit ratio)`);
    }
    const policy = await this.qosPolicyOf(projectName, body.qosPolicyUUID, body.qosPolicyName);
    const qosPolicyUUID = policy.UUID;
    if (qosPolicyUUID !== '') {
      references.push(await this.policyGuard(qosPolicyUUID));
      // Not placed yet: any node may get it, so every node must be able to enforce it.
      await this.requireQosEnforceable(policy, body.name);
    }

    const record: VolumeRecord = {
      UUID: randomUUID(),
      name: body.name,
      projectName,
      sizeBytes: sizeBytes.toString(),
      acl: body.acl ?? [...DEFAULT_ACL],
      ipAcl: body.IPAcl ?? [...DEFAULT_IP_ACL],
      compression: body.compression ?? snapshot?.compression ?? false,
      replicaCount,
      sectorSize,
      labels: body.labels ?? (snapshot ? snapshot.labels.map((l) => ({ key: l.key, value: l.value })) : []),
      qosPolicyUUID,
      placementRestrictions: body.placementRestrictions ?? [],
      sourceSnapshotUUID: snapshot?.UUID ?? '',
      sourceSnapshotName: snapshot?.name ?? '',
      // Cluster-level encryption is not offered: `unencrypted` has nothing to opt out of.
      encrypted: false,
      state: 'Creating',
      generation: 1,
      placement: null,
      failureReason: '',
      rollbackSnapshotUUID: '',
      creationTime: (this.deps.now?.() ?? new Date()).toISOString(),
    };
    // The event is written in the create's own transaction: one etcd commit per create, and no
    // volume without its event or event without its volume.
    const event = await this.preparedEvent('VolumeCreated', record, `volume ${record.name} (${record.UUID}) created in project ${projectName}`);
    const created = await store.create(record, references, event);
    if (created === 'references-changed') return LOST_RACE;
    if (created === 'name-taken') throw errors.exists('volume', `${record.name} in project ${projectName}`);
    if (created === 'project-missing') throw errors.notFound('project', projectName);
    const [wire] = await this.toWire([created]);
    return wire!;
  }

  /** GET one volume; by name it also finds a Deleting one (wire-conventions §4). */
  async get(target: VolumeTarget, guard: ProjectGuard): Promise<VolumeWire> {
    const stored = await this.resolve(target, guard);
    const [wire] = await this.toWire([stored]);
    return wire!;
  }

  /** How a host attaches the volume: its subsystem, every path, discovery, the device link. */
  async connection(target: VolumeTarget, guard: ProjectGuard): Promise<VolumeConnectionWire> {
    const { record } = await this.resolve(target, guard);
    const nodeList = record.placement?.nodeList ?? [];
    const [nodes, statuses] = await Promise.all([this.deps.store.nodeAddresses(nodeList), this.deps.store.statusesOf([record.UUID])]);
    const { clusterSubsystemNQN } = this.deps;
    return volumeConnectionToWire(record, clusterSubsystemNQN, volumeSubsystemNQN(clusterSubsystemNQN, record.UUID), nodes, statuses.get(record.UUID) ?? []);
  }

  /**
   * GET list. `query.projectName` undefined lists every project (the route allows that only
   * for cluster roles). Paging: UUID order, after `offsetUUID`, at most `limit`.
   */
  async list(query: ListVolumesQuery): Promise<VolumeWire[]> {
    const { store } = this.deps;
    if (query.projectName !== undefined) await this.deps.projects.require(query.projectName);
    let inFailureDomain: Set<string> | undefined;
    if (query.failureDomain !== undefined) {
      const domains = await store.nodeFailureDomains();
      inFailureDomain = new Set([...domains].filter(([, fds]) => fds.includes(query.failureDomain!)).map(([node]) => node));
    }
    const match = (v: VolumeRecord): boolean =>
      (query.showAll || v.state !== 'Deleting') &&
      (query.projectName === undefined || v.projectName === query.projectName) &&
      (query.UUID === undefined || v.UUID === query.UUID) &&
      (query.name === undefined || v.name === query.name) &&
      (query.snapshotUUID === undefined || v.sourceSnapshotUUID === query.snapshotUUID) &&
      (inFailureDomain === undefined || (v.placement?.nodeList ?? []).some((n) => inFailureDomain!.has(n)));
    const page = await store.page({ ...(query.offsetUUID === undefined ? {} : { startAfterUUID: query.offsetUUID }), limit: query.limit, match });
    return this.toWire(page);
  }

  /** PUT: answers nothing (the route sends `{}`). */
  async update(target: VolumeTarget, body: UpdateVolumeBody, guard: ProjectGuard, expectedRevision?: string): Promise<void> {
    const { store } = this.deps;
    const found = await this.resolve(target, guard);
    const uuid = found.record.UUID;
    const policy =
      body.qosPolicyUUID !== undefined || body.qosPolicyName !== undefined
        ? await this.qosPolicyOf(found.record.projectName, body.qosPolicyUUID, body.qosPolicyName)
        : undefined;
    const qosPolicyUUID = policy?.UUID;

    const result = await store.update(
      uuid,
      async (current): Promise<VolumeChange> => {
        const v = current.record;
        requireSettled(v, 'updated', { allowFailed: false });
        const next: VolumeRecord = { ...v };
        let dataPath = false;
        let changed = false;
        if (body.replicaCount !== undefined && body.replicaCount !== v.replicaCount) {
          throw errors.invalid(`volume ${v.name} has replicaCount ${v.replicaCount}: changing the replica count of an existing volume is not supported (docs/replication.md)`);
        }
        if (body.size !== undefined) {
          const requested = alignedSize(body.size, v.sectorSize);
          const size = BigInt(v.sizeBytes);
          if (requested < size) {
            throw errors.invalid(`size ${requested} is smaller than the volume's ${size} bytes: ${SHRINK_REFUSAL}`);
          }
          if (requested !== size) {
            next.sizeBytes = requested.toString();
            dataPath = true;
          }
        }
        if (body.acl !== undefined && !sameList(body.acl, v.acl)) {
          next.acl = body.acl;
          dataPath = true;
        }
        if (body.IPAcl !== undefined && !sameList(body.IPAcl, v.ipAcl)) {
          next.ipAcl = body.IPAcl;
          dataPath = true;
        }
        if (body.compression !== undefined && body.compression !== v.compression) {
          throw errors.invalid(`compression cannot be changed from ${v.compression} to ${body.compression}: ${COMPRESSION_CHANGE_REFUSAL}`);
        }
        const guards: Guard[] = [];
        if (qosPolicyUUID !== undefined && qosPolicyUUID !== v.qosPolicyUUID) {
          next.qosPolicyUUID = qosPolicyUUID;
          dataPath = true;
          if (qosPolicyUUID !== '') {
            guards.push(await this.policyGuard(qosPolicyUUID));
            await this.requireQosEnforceable(policy!, v.name, v.placement?.nodeList ?? []);
          }
        }
        if (body.labels !== undefined && !sameList(body.labels.map(labelText), v.labels.map(labelText))) {
          next.labels = body.labels;
          changed = true;
        }
        const names: { claimName?: string; releaseName?: string } = {};
        if (body.newName !== undefined && body.newName !== v.name) {
          const taken = await store.nameIndex(v.projectName, body.newName);
          if (taken) throw errors.exists('volume', `${body.newName} in project ${v.projectName}`);
          const old = await store.nameIndex(v.projectName, v.name);
          names.claimName = body.newName;
          guards.push(store.freeNameGuard(v.projectName, body.newName));
          if (old && old.record.UUID === uuid) {
            names.releaseName = v.name;
            guards.push(old.guard);
          }
          next.name = body.newName;
          changed = true;
        }
        if (!dataPath && !changed) return null;
        if (dataPath) {
          next.state = 'Updating';
          next.generation = v.generation + 1;
        }
        return { record: next, ...names, guards };
      },
      expectedRevision,
    );
    if (result.changed) {
      const v = result.volume.record;
      await this.event('VolumeUpdated', v, `volume ${v.name} (${v.UUID}) in project ${v.projectName} updated${v.state === 'Updating' ? '' : ' (labels or name only)'}`);
    }
  }

  /**
   * DELETE: state Deleting, generation + 1, name index removed (the name is free at once).
   * A Failed volume may be deleted: it is the only way out of Failed.
   */
  async delete(target: VolumeTarget, guard: ProjectGuard, expectedRevision?: string): Promise<void> {
    const { store } = this.deps;
    const found = await this.resolve(target, guard);
    // Snapshots live in the volume's backing on its nodes: deleting the volume would take them
    // along silently. They are deleted first, explicitly.
    const snapshots = await this.deps.snapshots.countOfVolume(found.record.UUID);
    if (snapshots > 0) {
      throw new StrataError('INVALID_STATE', `volume ${found.record.name} (${found.record.UUID}) has ${snapshots} snapshot(s); delete them first`);
    }
    const { volume } = await store.update(
      found.record.UUID,
      async (current): Promise<VolumeChange> => {
        const v = current.record;
        requireSettled(v, 'deleted', { allowFailed: true });
        const index = await store.nameIndex(v.projectName, v.name);
        const owned = index !== null && index.record.UUID === v.UUID;
        return {
          record: { ...v, state: 'Deleting', generation: v.generation + 1 },
          ...(owned ? { releaseName: v.name } : {}),
          guards: owned ? [index.guard] : [],
        };
      },
      expectedRevision,
    );
    const v = volume.record;
    await this.event('VolumeDeleteRequested', v, `deletion of volume ${v.name} (${v.UUID}) in project ${v.projectName} requested`);
  }

  /**
   * PUT …/rollback: the volume's data (and size) become the snapshot's. The snapshot must be
   * one of this volume's and Available; the volume must be Available.
   */
  async rollback(target: VolumeTarget, ref: { UUID?: string | undefined; name?: string | undefined }, guard: ProjectGuard, expectedRevision?: string): Promise<void> {
    const { store, snapshots } = this.deps;
    const found = await this.resolve(target, guard);
    const snapshot = await snapshots.resolve(found.record.projectName, definedOnly(ref));
    if (snapshot.sourceVolumeUUID !== found.record.UUID) {
      throw errors.invalid(`snapshot ${snapshot.name} (${snapshot.UUID}) is not a snapshot of volume ${found.record.name} (${found.record.UUID})`);
    }
    requireUsableSnapshot(snapshot);
    const { volume } = await store.update(
      found.record.UUID,
      async (current): Promise<VolumeChange> => {
        const v = current.record;
        requireSettled(v, 'rolled back', { allowFailed: false });
        return {
          record: { ...v, state: 'Rollback', rollbackSnapshotUUID: snapshot.UUID, sizeBytes: snapshot.sizeBytes, generation: v.generation + 1 },
          guards: [await this.usableSnapshotGuard(snapshot)],
        };
      },
      expectedRevision,
    );
    const v = volume.record;
    await this.event('VolumeRollbackRequested', v, `rollback of volume ${v.name} (${v.UUID}) in project ${v.projectName} to snapshot ${snapshot.name} (${snapshot.UUID}) requested`);
  }

  /**
   * Finds the addressed volume. With a project given, the caller is checked against it before
   * any lookup (403 before 404) and the volume must belong to it; by UUID without a project,
   * the caller is checked against the volume's own project. A UUID wins over a name.
   */
  private async resolve(target: VolumeTarget, guard: ProjectGuard): Promise<StoredVolume> {
    const { store } = this.deps;
    if (target.projectName !== undefined) guard(target.projectName);
    if (target.UUID !== undefined) {
      const stored = await store.get(target.UUID);
      if (!stored || (target.projectName !== undefined && stored.record.projectName !== target.projectName)) {
        throw errors.notFound('volume', target.UUID);
      }
      if (target.projectName === undefined) guard(stored.record.projectName);
      return stored;
    }
    if (target.name !== undefined) {
      const project = target.projectName ?? DEFAULT_PROJECT;
      if (target.projectName === undefined) guard(project);
      const stored = await store.findByName(project, target.name, { includeDeleting: true });
      if (!stored) throw errors.notFound('volume', `${target.name} in project ${project}`);
      return stored;
    }
    throw errors.invalid('invalid request: give the volume UUID (in the path) or its name');
  }

  private async checkPlacementRestrictions(restrictions: NonNullable<CreateVolumeBody['placementRestrictions']>, replicaCount: number): Promise<void> {
    if (replicaCount !== 1) throw errors.invalid('placementRestrictions are allowed only for volumes with replicaCount 1');
    const [failInPlace, proactiveRebalance] = await Promise.all([this.deps.flags.isEnabled('fail-in-place'), this.deps.flags.isEnabled('proactive-rebalance')]);
    if (failInPlace || proactiveRebalance) {
      throw errors.invalid('placementRestrictions are allowed only while the feature flags fail-in-place and proactive-rebalance are both disabled');
    }
    for (const restriction of restrictions) {
      for (const pair of restriction.labelValueKeyPairs) {
        if (pair.key === 'ClusterID' && pair.value !== this.deps.clusterUUID) {
          throw errors.invalid(`placementRestrictions ClusterID ${pair.value} is not this cluster (${this.deps.clusterUUID})`);
        }
      }
    }
  }

  private async cloneSource(projectName: string, body: CreateVolumeBody): Promise<SnapshotRef | undefined> {
    if (body.sourceSnapshotUUID === undefined && body.sourceSnapshotName === undefined) return undefined;
    const snapshot = await this.deps.snapshots.resolve(projectName, definedOnly({ UUID: body.sourceSnapshotUUID, name: body.sourceSnapshotName }));
    requireUsableSnapshot(snapshot);
    return snapshot;
  }

  /**
   * The snapshot's key at a revision where it is Available: a write guarded on it fails if the
   * snapshot starts Deleting (or goes) before the write commits.
   */
  private async usableSnapshotGuard(snapshot: SnapshotRef): Promise<Guard> {
    const stored = await this.deps.store.snapshotReference(snapshot.UUID);
    if (!stored) throw errors.notFound('snapshot', snapshot.UUID);
    requireUsableSnapshot({ ...snapshot, state: stored.record.state });
    return stored.guard;
  }

  /** The policy's key at its current revision: a write guarded on it fails if the policy goes. */
  private async policyGuard(policyUUID: string): Promise<Guard> {
    const stored = await this.deps.store.policyReference(policyUUID);
    if (!stored) throw errors.notFound('policy', policyUUID);
    return stored.guard;
  }

  /** The policy a request names (UUID '' when none: the project's default applies when read). */
  private async qosPolicyOf(projectName: string, UUID: string | undefined, name: string | undefined): Promise<PolicyRef> {
    if (UUID === undefined && name === undefined) return { UUID: '', name: '' };
    return this.deps.policies.resolve(projectName, definedOnly({ UUID, name }));
  }

  /**
   * KERNEL_CAPABILITY_MISSING (400) naming each of the volume's nodes (`nodes`; every node of the
   * cluster before placement) whose kernel has no ublk: the policy could not be enforced there
   * (docs/policies.md "Enforcement").
   */
  private async requireQosEnforceable(policy: PolicyRef, volumeName: string, nodes?: readonly string[]): Promise<void> {
    await this.deps.kernelCapabilities?.require(
      'ublk',
      `attach QoS policy ${policy.name} to volume ${volumeName} (a policy is enforced by a ublk server on ${nodes ? "each of the volume's nodes" : 'whichever nodes the volume is placed on, so on every node before placement'}; Debian 12's 6.1 kernel has no ublk)`,
      nodes,
    );
  }

  /** Wire form of stored volumes: their status reports and node liveness read together. */
  private async toWire(volumes: readonly StoredVolume[]): Promise<VolumeWire[]> {
    const { store } = this.deps;
    const placed = volumes.filter((v) => v.record.placement !== null).map((v) => v.record.UUID);
    const [statuses, presentNodes, replicaSets, qos] = await Promise.all([
      placed.length > 0 ? store.statusesOf(placed) : Promise.resolve(new Map<string, never[]>()),
      placed.length > 0 ? store.presentNodes() : Promise.resolve(new Set<string>()),
      placed.length > 0 ? store.replicaSetsOf(placed) : Promise.resolve(new Map<string, never>()),
      this.effectiveQos(volumes),
    ]);
    return volumes.map((v) =>
      volumeToWire(
        v,
        { statuses: statuses.get(v.record.UUID) ?? [], presentNodes, replicaSet: replicaSets.get(v.record.UUID) },
        qos.get(v.record.UUID) ?? { UUID: '', name: '' },
        this.deps.clusterUUID,
      ),
    );
  }

  /** The QoS policy in effect per volume; each project's default and each name read once. */
  private async effectiveQos(volumes: readonly StoredVolume[]): Promise<Map<string, EffectiveQos>> {
    const defaults = new Map<string, Promise<string>>();
    const names = new Map<string, Promise<string>>();
    const defaultOf = (project: string) => {
      let p = defaults.get(project);
      if (!p) defaults.set(project, (p = ignoreNotFound(() => this.deps.projects.defaultQosPolicyUUID(project))));
      return p;
    };
    const nameOf = (uuid: string) => {
      let p = names.get(uuid);
      if (!p) names.set(uuid, (p = ignoreNotFound(() => this.deps.policies.nameOf(uuid))));
      return p;
    };
    const result = new Map<string, EffectiveQos>();
    await Promise.all(
      volumes.map(async (v) => {
        const UUID = v.record.qosPolicyUUID || (await defaultOf(v.record.projectName));
        result.set(v.record.UUID, { UUID, name: UUID ? await nameOf(UUID) : '' });
      }),
    );
    return result;
  }

  /** The event, prepared for a caller's own transaction; null when it cannot be had. */
  private async preparedEvent(eventName: EventName, v: VolumeRecord, description: string): Promise<PreparedEvent | null> {
    try {
      return await this.deps.events.prepare(
        catalogued(eventName, { description, component: { kind: 'volume', projectName: v.projectName, volumes: [{ ID: v.UUID, Name: v.name }] } }),
      );
    } catch {
      return null; // the event log is unreachable: the change itself must still go through
    }
  }

  /** Events are best effort: a lost event must not fail the call that caused it. */
  private async event(eventName: EventName, v: VolumeRecord, description: string): Promise<void> {
    try {
      await this.deps.events.record(
        catalogued(eventName, { description, component: { kind: 'volume', projectName: v.projectName, volumes: [{ ID: v.UUID, Name: v.name }] } }),
      );
    } catch {
      // EventRecorder promises not to throw; nothing more to do if one does.
    }
  }
}

/** Counts volume records for the resources that must not delete what volumes still use. */
export class VolumeUsageCounter implements VolumeUsage {
  constructor(
    private readonly store: VolumeStore,
    private readonly sync?: () => Promise<void>,
  ) {}

  /** Volumes naming the policy explicitly (a project default is the project's own use). */
  async countUsingPolicy(policyUUID: string): Promise<number> {
    return this.count((v) => v.qosPolicyUUID === policyUUID);
  }

  /** Volumes of the project, Failed included (they still hold data); Deleting ones no longer count. */
  async countInProject(projectName: string): Promise<number> {
    return this.count((v) => v.projectName === projectName);
  }

  async countClonedFrom(snapshotUUID: string): Promise<number> {
    return this.count((v) => v.sourceSnapshotUUID === snapshotUUID);
  }

  /** Callers outside a request (snapshot retention) pass `sync`: the cache is made current first. */
  private async count(match: (v: VolumeRecord) => boolean): Promise<number> {
    await this.sync?.();
    return (await this.store.scan((v) => v.state !== 'Deleting' && match(v))).length;
  }
}

/**
 * Spec §3.1: Deleting (and Failed, except for DELETE) → 400; Creating, Updating (and Rollback,
 * equally transient) → 503, retry later.
 */
function requireSettled(v: VolumeRecord, action: string, options: { allowFailed: boolean }): void {
  if (v.state === 'Deleting' || (v.state === 'Failed' && !options.allowFailed)) {
    throw new StrataError('INVALID_STATE', `volume ${v.name} (${v.UUID}) is ${v.state} and cannot be ${action}`);
  }
  if (TRANSIENT_STATES.includes(v.state)) {
    throw new StrataError('TRANSIENT_STATE', `volume ${v.name} (${v.UUID}) is ${v.state}; retry once it is Available`);
  }
}

/** A snapshot used as a source must be Available: Creating is worth a retry (503), the rest not. */
function requireUsableSnapshot(snapshot: SnapshotRef): void {
  if (snapshot.state === 'Available') return;
  if (snapshot.state === 'Creating') throw new StrataError('TRANSIENT_STATE', `snapshot ${snapshot.name} (${snapshot.UUID}) is Creating; retry once it is Available`);
  throw new StrataError('INVALID_STATE', `snapshot ${snapshot.name} (${snapshot.UUID}) is ${snapshot.state}`);
}

/** Sizes are whole sectors: a size between two is rounded up to the next. */
function alignedSize(size: bigint, sectorSize: number): bigint {
  const sector = BigInt(sectorSize);
  const aligned = ((size + sector - 1n) / sector) * sector;
  if (aligned > MAX_SIZE_BYTES) throw errors.invalid('invalid request: size is too large');
  return aligned;
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function labelText(l: { key: string; value: string }): string {
  return `${l.key}=${l.value}`;
}

function definedOnly(ref: { UUID?: string | undefined; name?: string | undefined }): { UUID?: string; name?: string } {
  return { ...(ref.UUID !== undefined ? { UUID: ref.UUID } : {}), ...(ref.name !== undefined ? { name: ref.name } : {}) };
}

async function ignoreNotFound(read: () => Promise<string>): Promise<string> {
  try {
    return await read();
  } catch (err) {
    if (err instanceof StrataError && err.code === 'NOT_FOUND') return '';
    throw err;
  }
}
