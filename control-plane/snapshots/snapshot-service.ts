// Snapshots (wire-conventions §7; lifecycle in docs/volume-lifecycle.md and docs/snapshots.md):
// create, get, list and delete for the API; the deletion rules shared with retention; and the
// SnapshotDirectory other resources (volume clones, rollback) resolve snapshots through.
// The API only writes the snapshot record and its name index; the active cluster manager
// takes it from Creating to Available/Failed and removes Deleting ones.
import { randomUUID } from 'node:crypto';
import { StrataError, errors } from '../../lib/errors.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import type { Logger } from '../../lib/logger.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import type { SnapshotRecord, VolumeRecord } from '../../lib/records.js';
import type { EventInput, EventRecorder } from '../events/event-recorder.js';
import type { ProjectDirectory, SnapshotDirectory, SnapshotRef, VolumeUsage } from '../volumes/volume-dependencies.js';
import type { CreateSnapshotInput, SnapshotAddress, SnapshotListFilter } from './snapshot-schema.js';
import type { SnapshotStore } from './snapshot-store.js';
import { snapshotToWire, type SnapshotWire } from './snapshot-wire.js';

/** Read-modify-write retries when a concurrent writer changed the snapshot or its volume. */
const ATTEMPTS = 10;

export interface SnapshotServiceDeps {
  readonly store: SnapshotStore;
  readonly projects: Pick<ProjectDirectory, 'require'>;
  /** Live clones of a snapshot: one with clones cannot be deleted. */
  readonly clones: Pick<VolumeUsage, 'countClonedFrom'>;
  readonly events: EventRecorder;
  readonly logger?: Logger;
  /** The clock for creationTime (tests). */
  readonly now?: () => Date;
}

export class SnapshotService {
  private readonly now: () => Date;

  constructor(private readonly deps: SnapshotServiceDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  async create(project: string, input: CreateSnapshotInput): Promise<SnapshotWire> {
    await this.deps.projects.require(project);
    const { store } = this.deps;
    return retryLostRaces(ATTEMPTS, async () => {
      const volume = await this.sourceVolume(project, input);
      assertCanSnapshot(volume.record);
      const v = volume.record;
      const record: SnapshotRecord = {
        UUID: randomUUID(),
        name: input.name,
        projectName: project,
        description: input.description,
        sourceVolumeUUID: v.UUID,
        sourceVolumeName: v.name,
        sizeBytes: v.sizeBytes,
        compression: v.compression,
        sectorSize: v.sectorSize,
        labels: v.labels.map((l) => ({ key: l.key, value: l.value })),
        state: 'Creating',
        failureReason: '',
        retentionSeconds: input.retentionSeconds,
        creationTime: this.now().toISOString(),
      };
      const outcome = await store.create(record, volume);
      if (outcome.kind === 'name-taken') throw errors.exists(`snapshot ${input.name} in project`, project);
      if (outcome.kind !== 'created') return LOST_RACE;
      await this.record(snapshotEvent('SnapshotCreated', 'API', 'Info', record, `snapshot ${record.name} (${record.UUID}) of volume ${v.name} requested`));
      return snapshotToWire(outcome.snapshot, v, await store.clusterUUID());
    }, () => new StrataError('OPERATION_IN_PROGRESS', `volume ${input.sourceVolumeUUID ?? input.sourceVolumeName} keeps changing; retry`));
  }

  async get(project: string, address: SnapshotAddress): Promise<SnapshotWire> {
    await this.deps.projects.require(project);
    const snapshot = await this.find(project, address, { includeDeleting: true });
    const volume = await this.deps.store.getVolume(snapshot.record.sourceVolumeUUID);
    return snapshotToWire(snapshot, volume?.record, await this.deps.store.clusterUUID());
  }

  async list(project: string, filter: SnapshotListFilter): Promise<SnapshotWire[]> {
    await this.deps.projects.require(project);
    const { store } = this.deps;
    const sourceByName = filter.sourceVolumeName === undefined ? undefined : await store.volumeByName(project, filter.sourceVolumeName);
    const keep = (s: Versioned<SnapshotRecord>): boolean => {
      const r = s.record;
      if (r.projectName !== project) return false;
      if (!filter.showAll && r.state === 'Deleting') return false;
      if (filter.UUID !== undefined && r.UUID !== filter.UUID) return false;
      if (filter.name !== undefined && r.name !== filter.name) return false;
      if (filter.sourceVolumeUUID !== undefined && r.sourceVolumeUUID !== filter.sourceVolumeUUID) return false;
      if (filter.sourceVolumeName !== undefined && r.sourceVolumeUUID !== sourceByName?.record.UUID && r.sourceVolumeName !== filter.sourceVolumeName) return false;
      return true;
    };
    let page: Versioned<SnapshotRecord>[];
    if (filter.UUID !== undefined) {
      // One key, not a scan; the page rules still apply.
      const one = await store.get(filter.UUID);
      page = one && keep(one) && (filter.offsetUUID === undefined || one.record.UUID > filter.offsetUUID) ? [one] : [];
    } else {
      page = await store.scan({ ...(filter.offsetUUID !== undefined ? { startAfterUUID: filter.offsetUUID } : {}), limit: filter.limit, keep });
    }
    const volumes = await store.volumesOf(page.map((s) => s.record));
    const clusterId = await store.clusterUUID();
    return page.map((s) => snapshotToWire(s, volumes.get(s.record.sourceVolumeUUID), clusterId));
  }

  /** DELETE: the snapshot goes Deleting and its name is free at once; `{}` on the wire. */
  async delete(project: string, address: SnapshotAddress, expectedRevision?: string): Promise<void> {
    await this.deps.projects.require(project);
    await retryLostRaces<void>(ATTEMPTS, async () => {
      // By name, a Deleting snapshot no longer owns the name: 404, as for any free name.
      const current = await this.find(project, address, { includeDeleting: 'UUID' in address });
      if (expectedRevision !== undefined && current.revision !== expectedRevision) throw errors.etagMismatch('snapshot', current.record.UUID);
      const outcome = await requestDeletion(this.deps.store, this.deps.clones, current);
      if (outcome.kind === 'deleting') {
        const s = outcome.snapshot.record;
        await this.record(snapshotEvent('SnapshotDeleteRequested', 'API', 'Info', s, `deletion of snapshot ${s.name} (${s.UUID}) of volume ${s.sourceVolumeName} requested`));
        return;
      }
      if (outcome.kind !== 'changed') throw deletionRefusal(outcome, current.record);
      return LOST_RACE;
    }, () => new StrataError('OPERATION_IN_PROGRESS', 'the snapshot keeps changing; retry'));
  }

  /** The snapshot an address names in the project; NOT_FOUND otherwise. */
  private async find(project: string, address: SnapshotAddress, options: { includeDeleting: boolean }): Promise<Versioned<SnapshotRecord>> {
    const { store } = this.deps;
    if ('UUID' in address) {
      const snapshot = await store.get(address.UUID);
      if (snapshot && snapshot.record.projectName === project && (address.name === undefined || snapshot.record.name === address.name)) return snapshot;
      throw errors.notFound('snapshot', address.name === undefined ? address.UUID : `${address.UUID} named ${address.name}`);
    }
    const index = await store.nameIndex(project, address.name);
    if (index) {
      const snapshot = await store.get(index.UUID);
      if (snapshot && snapshot.record.projectName === project && snapshot.record.name === address.name) return snapshot;
    }
    if (options.includeDeleting) {
      // The index no longer names a Deleting snapshot: look for one (a rare path, so a scan).
      const deleting = await store.scan({
        limit: Number.POSITIVE_INFINITY,
        keep: (s) => s.record.projectName === project && s.record.name === address.name && s.record.state === 'Deleting',
      });
      const newest = deleting.sort((a, b) => b.record.creationTime.localeCompare(a.record.creationTime))[0];
      if (newest) return newest;
    }
    throw errors.notFound('snapshot', `${address.name} in project ${project}`);
  }

  private async sourceVolume(project: string, input: CreateSnapshotInput): Promise<Versioned<VolumeRecord>> {
    const { store } = this.deps;
    if (input.sourceVolumeUUID !== undefined) {
      const volume = await store.getVolume(input.sourceVolumeUUID);
      if (!volume || volume.record.projectName !== project) throw errors.notFound('volume', `${input.sourceVolumeUUID} in project ${project}`);
      if (input.sourceVolumeName !== undefined && volume.record.name !== input.sourceVolumeName) {
        throw errors.invalid(`sourceVolumeUUID ${input.sourceVolumeUUID} and sourceVolumeName ${input.sourceVolumeName} name different volumes`);
      }
      return volume;
    }
    const name = input.sourceVolumeName!;
    const volume = await store.volumeByName(project, name);
    if (!volume) throw errors.notFound('volume', `${name} in project ${project}`);
    return volume;
  }

  private async record(event: EventInput): Promise<void> {
    try {
      await this.deps.events.record(event);
    } catch (err) {
      this.deps.logger?.warn({ err, eventName: event.eventName }, 'could not record event');
    }
  }
}

/**
 * A snapshot is taken of an Available volume. Creating/Updating/Rollback are transient (503,
 * retry); Deleting/Failed volumes never become snapshottable (400), as for a volume's own
 * PUT/DELETE (spec 3.1).
 */
function assertCanSnapshot(volume: VolumeRecord): void {
  if (volume.replicaCount > 1) {
    // Each copy would be captured at its own instant, and a clone or rollback built from such
    // snapshots would start a mirror whose copies differ (docs/replication.md, "Not yet").
    throw errors.invalid(`volume ${volume.name} has ${volume.replicaCount} replicas: snapshots of replicated volumes are not supported yet`);
  }
  switch (volume.state) {
    case 'Available':
      if (volume.placement === null) throw new StrataError('TRANSIENT_STATE', `volume ${volume.name} is not placed yet; retry`);
      return;
    case 'Creating':
    case 'Updating':
    case 'Rollback':
      throw new StrataError('TRANSIENT_STATE', `volume ${volume.name} is ${volume.state}; retry when it is Available`);
    default:
      throw new StrataError('INVALID_STATE', `volume ${volume.name} is ${volume.state}; only an Available volume can be snapshotted`);
  }
}

// ---- deletion, shared by DELETE and retention ----

export type DeletionOutcome =
  | { readonly kind: 'deleting'; readonly snapshot: Versioned<SnapshotRecord> }
  /** Creating: the data path is still taking it (503, retry). */
  | { readonly kind: 'creating' }
  /** Already Deleting (400). */
  | { readonly kind: 'already-deleting' }
  /** Volumes cloned from it are alive (400); they must be deleted first. */
  | { readonly kind: 'has-clones'; readonly clones: number }
  /** The record changed since it was read: read again and decide again. */
  | { readonly kind: 'changed' };

/**
 * The one path into Deleting, for DELETE and for retention: the state rules, the clone rule,
 * then a conditional transaction that sets Deleting and frees the name.
 */
export async function requestDeletion(
  store: SnapshotStore,
  clones: Pick<VolumeUsage, 'countClonedFrom'>,
  current: Versioned<SnapshotRecord>,
): Promise<DeletionOutcome> {
  const state = current.record.state;
  if (state === 'Creating') return { kind: 'creating' };
  if (state === 'Deleting') return { kind: 'already-deleting' };
  const count = await clones.countClonedFrom(current.record.UUID);
  if (count > 0) return { kind: 'has-clones', clones: count };
  const updated = await store.markDeleting(current);
  return updated ? { kind: 'deleting', snapshot: updated } : { kind: 'changed' };
}

function deletionRefusal(outcome: Exclude<DeletionOutcome, { kind: 'deleting' | 'changed' }>, snapshot: SnapshotRecord): StrataError {
  switch (outcome.kind) {
    case 'creating':
      return new StrataError('TRANSIENT_STATE', `snapshot ${snapshot.name} is Creating; retry when it is Available`);
    case 'already-deleting':
      return new StrataError('INVALID_STATE', `snapshot ${snapshot.name} is already Deleting`);
    case 'has-clones':
      return new StrataError('INVALID_STATE', `snapshot ${snapshot.name} has ${outcome.clones} cloned volume(s); delete them first`);
  }
}

/** Snapshot events name the source volume as their component; the text names the snapshot. */
export function snapshotEvent(
  eventName: string,
  reportingService: EventInput['reportingService'],
  severity: EventInput['severity'],
  snapshot: SnapshotRecord,
  description: string,
  status?: string,
): EventInput {
  return {
    type: 'Volume',
    severity,
    eventName,
    reportingService,
    description,
    component: { kind: 'volume', projectName: snapshot.projectName, volumes: [{ ID: snapshot.sourceVolumeUUID, Name: snapshot.sourceVolumeName }] },
    ...(status !== undefined ? { status } : {}),
  };
}

// ---- the directory other resources use ----

/** A resolved snapshot, with its ETag so a clone can be committed only if it is unchanged. */
export interface ResolvedSnapshot extends SnapshotRef {
  /** The snapshot record's etcd mod_revision: compare it in the clone's create transaction. */
  readonly revision: string;
}

/** Snapshots as volumes (clone, rollback) and projects (delete refusal) see them. */
export class EtcdSnapshotDirectory implements SnapshotDirectory {
  constructor(private readonly store: SnapshotStore) {}

  /**
   * By UUID or name (at least one; both must agree, else INVALID_ARGUMENT), in the project.
   * NOT_FOUND when absent. A Deleting snapshot resolves by UUID only (its name is free); the
   * caller checks `state` (a clone or rollback needs Available).
   */
  async resolve(projectName: string, ref: { UUID?: string; name?: string }): Promise<ResolvedSnapshot> {
    const uuid = ref.UUID === '' ? undefined : ref.UUID;
    const name = ref.name === '' ? undefined : ref.name;
    if (uuid === undefined && name === undefined) throw errors.invalid('give the snapshot UUID or name');
    let found: Versioned<SnapshotRecord> | null = null;
    if (uuid !== undefined) {
      found = await this.store.get(uuid);
      if (found && found.record.projectName !== projectName) found = null;
      if (found && name !== undefined && found.record.name !== name) {
        throw errors.invalid(`snapshot UUID ${uuid} and name ${name} name different snapshots`);
      }
    } else {
      const index = await this.store.nameIndex(projectName, name!);
      found = index ? await this.store.get(index.UUID) : null;
      if (found && (found.record.projectName !== projectName || found.record.name !== name)) found = null;
    }
    if (!found) throw errors.notFound('snapshot', `${uuid ?? name} in project ${projectName}`);
    const s = found.record;
    return {
      UUID: s.UUID,
      name: s.name,
      projectName: s.projectName,
      sourceVolumeUUID: s.sourceVolumeUUID,
      sizeBytes: s.sizeBytes,
      compression: s.compression,
      sectorSize: s.sectorSize,
      labels: s.labels.map((l) => ({ key: l.key, value: l.value })),
      state: s.state,
      revision: found.revision,
    };
  }

  /** Snapshots of a volume that are not Deleting (a volume with snapshots keeps its data). */
  async countOfVolume(volumeUUID: string): Promise<number> {
    const found = await this.store.scan({ limit: Number.POSITIVE_INFINITY, keep: (s) => s.record.sourceVolumeUUID === volumeUUID && s.record.state !== 'Deleting' });
    return found.length;
  }

  /** Snapshots of a project that are not Deleting (the name index holds exactly those). */
  async countInProject(projectName: string): Promise<number> {
    return this.store.countNames(projectName);
  }
}
