// Cluster health's volume counts (spec 2.7 `health`; docs/api.md "Cluster health"): each volume
// is classified by ONE pure function from its lifecycle state and its protection state, and the
// cluster's `state` follows from the counts. The protection state is the one GET volume shows
// (volumes/volume-wire.ts), so the two can never disagree, and whatever refines it (the in-sync
// replica set of replication) reaches the health counts through it.
import type { VolumeRecord } from '../../lib/records.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';
import { protectionStateOf, type ProtectionState } from '../volumes/volume-wire.js';

/** How one volume counts in the cluster's health. */
export type VolumeHealth = 'healthy' | 'degraded' | 'readOnly' | 'notAvailable' | 'failed' | 'waiting';

/**
 * null: not counted (Creating has no data to lose yet; Deleting is going away). Failed is
 * 'failed' whatever its replicas report. Otherwise (Available, Updating, Rollback: the data
 * is served meanwhile) by protection state; Unknown on a placed, created volume means no
 * replica is known to serve it: not available.
 */
export function healthOfVolume(volume: Pick<VolumeRecord, 'state'> & Partial<Pick<VolumeRecord, 'waitingFor'>>, protection: ProtectionState): VolumeHealth | null {
  switch (volume.state) {
    case 'Creating':
      // Waiting to be placed (it may fit later: nodes inactive, not enough room now).
      return volume.waitingFor ? 'waiting' : null;
    case 'Deleting':
      return null;
    case 'Failed':
      return 'failed';
    default:
      break;
  }
  switch (protection) {
    case 'FullyProtected':
      return 'healthy';
    case 'Degraded':
      return 'degraded';
    case 'ReadOnly':
      return 'readOnly';
    case 'NotAvailable':
    case 'Unknown':
      return 'notAvailable';
  }
}

export interface VolumeHealthCounts {
  readonly healthy: number;
  readonly degraded: number;
  readonly readOnly: number;
  /** NotAvailable and Failed volumes. */
  readonly notAvailable: number;
  /** Creating volumes the cluster cannot place now (absent when none): the cluster is in Warning. */
  readonly waiting?: number;
}

export const NO_VOLUMES: VolumeHealthCounts = { healthy: 0, degraded: 0, readOnly: 0, notAvailable: 0 };

export function countVolumeHealth(healths: Iterable<VolumeHealth | null>): VolumeHealthCounts {
  const counts = { ...NO_VOLUMES };
  for (const health of healths) {
    if (health === null) continue;
    if (health === 'failed' || health === 'notAvailable') counts.notAvailable++;
    else if (health === 'waiting') counts.waiting = (counts.waiting ?? 0) + 1;
    else counts[health]++;
  }
  return counts;
}

/**
 * Spec 2.7: Error for read-only or unavailable volumes (or no Active node), Warning for inactive
 * nodes, degraded volumes, or volumes waiting to be placed.
 */
export function clusterHealthState(volumes: VolumeHealthCounts, nodes: { readonly total: number; readonly active: number }): 'OK' | 'Warning' | 'Error' {
  if (volumes.readOnly > 0 || volumes.notAvailable > 0 || (nodes.total > 0 && nodes.active === 0)) return 'Error';
  if (volumes.degraded > 0 || (volumes.waiting ?? 0) > 0 || nodes.total > nodes.active) return 'Warning';
  return 'OK';
}

/** What the cluster service reads the volume counts from. */
export interface VolumeHealthSource {
  counts(): Promise<VolumeHealthCounts>;
}

/** From the watch cache (current as of the request's sync()): volumes, their status reports, presence. */
export class WatchedVolumeHealth implements VolumeHealthSource {
  constructor(private readonly cache: WatchCache) {}

  async counts(): Promise<VolumeHealthCounts> {
    const presentNodes = new Set(this.cache.presence().flatMap((p) => p.nodeUUIDs ?? []));
    const healths: (VolumeHealth | null)[] = [];
    for (const { record } of this.cache.volumesInOrder()) {
      healths.push(healthOfVolume(record, protectionStateOf(record, { statuses: this.cache.statusesOf(record.UUID), presentNodes, replicaSet: this.cache.replicaSet(record.UUID) })));
    }
    return countVolumeHealth(healths);
  }
}
