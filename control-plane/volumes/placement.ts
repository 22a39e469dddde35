// Placement: which nodes serve a new volume. Pure functions, so the rules are testable alone.
//
// A node qualifies when it is Active and has room: its capacity (what its storage pool can hold,
// as measured; the managed data devices' raw size until the pool first reports) minus what is
// already allocated to it must hold the volume's full size — thin volumes are not overcommitted
// by default, so a pool never runs out under volumes the cluster promised — and, once the pool
// reports it, its free space too (snapshots and metadata use space no volume size accounts for).
// Among those, distinct servers first, then distinct failure domains, then the most free space
// (spreading load); the first is primary.
//
// A node whose pool has not reported yet is not known to lack room: the raw estimate may admit
// a volume, but when it does not (typically the agent's inventory and pool report are still on
// their way after it turned Active) and such nodes could make up the shortfall, the volume waits
// for their reports (up to the creating timeout) instead of failing. Likewise a node whose pool
// reports itself down (Failed: not assembled yet after a reboot, being reassembled, or broken):
// it offers no room now, but it may once the pool is up again, so its lack of room is not final.
import type { PlacementRestriction } from '../../lib/records.js';

export interface NodeCandidate {
  readonly UUID: string;
  readonly serverUUID: string;
  readonly failureDomains: readonly string[];
  readonly active: boolean;
  readonly capacityBytes: bigint;
  readonly allocatedBytes: bigint;
  /** The pool's measured free space; absent until the pool reports. */
  readonly freeBytes?: bigint;
  /**
   * The node manages data devices, so it will have a pool, and that pool has not reported yet:
   * its capacity is only an estimate, which may admit a volume but never rules one out.
   */
  readonly awaitingPoolReport: boolean;
  /** The pool reported itself down (state Failed), with why: no room now, perhaps once it is up. */
  readonly poolDown?: string;
}

export interface PlacementRequest {
  readonly replicaCount: number;
  readonly sizeBytes: bigint;
  readonly placementRestrictions: readonly PlacementRestriction[];
  /** A clone must live where its snapshot's data is: only these nodes, in this order. */
  readonly onlyNodes?: readonly string[];
  readonly clusterUUID: string;
  /** Allowed allocation as a multiple of capacity (1 = no overcommit). */
  readonly overcommitRatio: number;
}

export type PlacementResult =
  | { readonly ok: true; readonly nodeList: string[]; readonly primaryNodeUUID: string }
  | {
      readonly ok: false;
      readonly reason: string;
      /** True when waiting may help: nodes are inactive, or pools that may have room have not reported. */
      readonly retryable: boolean;
      /** Active nodes without room only because their pool has not reported (what a timeout names). */
      readonly awaitingPoolReport: readonly string[];
      /** Active nodes without room because their pool is down, and why (what a timeout names). */
      readonly poolsDown: readonly { readonly UUID: string; readonly reason: string }[];
    };

function poolsDownOf(nodes: readonly NodeCandidate[]): { UUID: string; reason: string }[] {
  return nodes.map((c) => ({ UUID: c.UUID, reason: c.poolDown ?? '' }));
}

/** What a node can still take: its unallocated allowance, or its pool's free space when less. */
export function roomOn(c: NodeCandidate, overcommitRatio: number): bigint {
  const unallocated = allowedAllocation(c.capacityBytes, overcommitRatio) - c.allocatedBytes;
  return c.freeBytes !== undefined && c.freeBytes < unallocated ? c.freeBytes : unallocated;
}

/** What may be allocated on a node of this capacity at this overcommit ratio. */
export function allowedAllocation(capacityBytes: bigint, overcommitRatio: number): bigint {
  return BigInt(Math.floor(Number(capacityBytes) * overcommitRatio));
}

export function chooseNodes(request: PlacementRequest, candidates: readonly NodeCandidate[]): PlacementResult {
  const restrictions = request.placementRestrictions.filter((r) => r.operator === 'In');
  const required = (key: string) => restrictions.flatMap((r) => r.labelValueKeyPairs.filter((p) => p.key === key).map((p) => p.value));
  const clusterIds = required('ClusterID');
  if (clusterIds.length > 0 && !clusterIds.includes(request.clusterUUID)) {
    return { ok: false, reason: `placement restriction ClusterID matches no cluster (this is ${request.clusterUUID})`, retryable: false, awaitingPoolReport: [], poolsDown: [] };
  }
  const domains = required('FD');
  const primaryDomains = required('PrimaryFD');

  let pool = [...candidates];
  if (request.onlyNodes) {
    const order = new Map(request.onlyNodes.map((u, i) => [u, i]));
    pool = pool.filter((c) => order.has(c.UUID)).sort((a, b) => order.get(a.UUID)! - order.get(b.UUID)!);
    if (pool.length < request.replicaCount) {
      return { ok: false, reason: `a clone needs ${request.replicaCount} nodes holding its snapshot; ${pool.length} do`, retryable: false, awaitingPoolReport: [], poolsDown: [] };
    }
  }
  if (domains.length > 0) pool = pool.filter((c) => c.failureDomains.some((d) => domains.includes(d)));
  const active = pool.filter((c) => c.active);
  const free = (c: NodeCandidate) => roomOn(c, request.overcommitRatio);
  const roomy = active.filter((c) => free(c) >= request.sizeBytes);
  // Without room only for want of a pool report: these may have it once they report.
  const unreported = active.filter((c) => c.awaitingPoolReport && free(c) < request.sizeBytes);
  // Without room because their pool is down: these may have it once it is up again.
  const down = active.filter((c) => c.poolDown !== undefined && free(c) < request.sizeBytes);
  const poolsDown = poolsDownOf(down);
  if (roomy.length < request.replicaCount) {
    const why =
      active.length < request.replicaCount
        ? `${request.replicaCount} Active node(s) needed${domains.length ? ` in failure domain(s) ${domains.join(', ')}` : ''}, ${active.length} available`
        : `not enough free capacity: ${request.replicaCount} node(s) with ${request.sizeBytes} bytes free needed, ${roomy.length} have it${down.length > 0 ? `; the storage pool of node(s) ${down.map((c) => c.UUID).join(', ')} is down` : ''}`;
    const mayFitLater = roomy.length + unreported.length + down.length >= request.replicaCount;
    return { ok: false, reason: why, retryable: active.length < pool.length || mayFitLater, awaitingPoolReport: unreported.map((c) => c.UUID), poolsDown };
  }

  const ordered = request.onlyNodes ? roomy : [...roomy].sort((a, b) => (free(b) > free(a) ? 1 : free(b) < free(a) ? -1 : a.UUID.localeCompare(b.UUID)));
  const chosen: NodeCandidate[] = [];
  const pick = (accept: (c: NodeCandidate) => boolean) => {
    for (const c of ordered) {
      if (chosen.length >= request.replicaCount) return;
      if (!chosen.includes(c) && accept(c)) chosen.push(c);
    }
  };
  if (primaryDomains.length > 0) {
    const inPrimaryDomain = (c: NodeCandidate) => c.failureDomains.some((d) => primaryDomains.includes(d));
    const primary = ordered.find(inPrimaryDomain);
    if (!primary) {
      const reason = `no Active node with room in primary failure domain ${primaryDomains.join(', ')}`;
      return { ok: false, reason, retryable: true, awaitingPoolReport: unreported.filter(inPrimaryDomain).map((c) => c.UUID), poolsDown: poolsDownOf(down.filter(inPrimaryDomain)) };
    }
    chosen.push(primary);
  }
  // Distinct servers first, then distinct failure domains, then anything with room.
  pick((c) => !chosen.some((x) => x.serverUUID === c.serverUUID) && !chosen.some((x) => x.failureDomains.some((d) => c.failureDomains.includes(d))));
  pick((c) => !chosen.some((x) => x.serverUUID === c.serverUUID));
  // One server holds one copy of a replicated volume (an agent serves a volume once; and a copy
  // on the same server as another protects nothing). Only a single copy may go anywhere.
  if (request.replicaCount === 1) pick(() => true);
  if (chosen.length < request.replicaCount) {
    return { ok: false, reason: `${request.replicaCount} copies need ${request.replicaCount} servers with room, ${new Set(roomy.map((c) => c.serverUUID)).size} have it`, retryable: active.length < pool.length || down.length > 0, awaitingPoolReport: [], poolsDown };
  }
  return { ok: true, nodeList: chosen.map((c) => c.UUID), primaryNodeUUID: chosen[0]!.UUID };
}

/**
 * A node for a new copy of a replicated volume, replacing one lost for good: Active, with room,
 * on a server holding none of the other copies, preferably in a failure domain none of them is
 * in; the roomiest first. undefined when none qualifies.
 */
export function chooseReplacement(
  request: Pick<PlacementRequest, 'sizeBytes' | 'overcommitRatio'>,
  candidates: readonly NodeCandidate[],
  others: readonly NodeCandidate[],
): NodeCandidate | undefined {
  const free = (c: NodeCandidate) => roomOn(c, request.overcommitRatio);
  const eligible = candidates
    .filter((c) => c.active && free(c) >= request.sizeBytes && !others.some((o) => o.UUID === c.UUID || o.serverUUID === c.serverUUID))
    .sort((a, b) => (free(b) > free(a) ? 1 : free(b) < free(a) ? -1 : a.UUID.localeCompare(b.UUID)));
  const newDomain = (c: NodeCandidate) => !others.some((o) => o.failureDomains.some((d) => c.failureDomains.includes(d)));
  return eligible.find(newDomain) ?? eligible[0];
}
