// The control plane's Prometheus metrics (docs/install.md "Metrics" lists every one). Counters
// are incremented where the work happens (the API middleware, the volume controller); gauges of
// cluster state are computed at scrape time from what the API itself answers from (the watch
// cache, the inventory, etcd), so a scrape never shows a state the API would not.
import { Gauge } from 'prom-client';
import type { MemberStatus } from '../../lib/etcd/member-status.js';
import { counter, gauge, histogram, registry } from '../../lib/metrics.js';
import type { VolumeRecord } from '../../lib/records.js';
import type { AgentSessions } from '../agents/agent-sessions.js';
import type { EtcdCorruptionStore } from '../etcd-corruption/etcd-corruption-store.js';
import type { InventorySource } from '../inventory/inventory-reader.js';
import type { LeaderElection } from '../leadership/leader-election.js';
import type { ProtectionState } from '../volumes/protection.js';
import { protectionStateOf } from '../volumes/volume-wire.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';

const VOLUME_STATES: readonly VolumeRecord['state'][] = ['Creating', 'Available', 'Updating', 'Rollback', 'Deleting', 'Failed'];
const PROTECTION_STATES: readonly ProtectionState[] = ['Unknown', 'FullyProtected', 'Degraded', 'ReadOnly', 'NotAvailable'];
const NODE_STATES = ['Active', 'Inactive'] as const;
const ETCD_ALARMS = ['NOSPACE', 'CORRUPT'] as const;

export const apiRequests = counter('strata_api_requests_total', 'REST API requests answered, by route template, method and status code', ['route', 'method', 'status']);
export const apiRequestDuration = histogram('strata_api_request_duration_seconds', 'REST API request latency, by route template and method', ['route', 'method']);
/** How a volume's primary moved: handed over by the primary itself, or promoted by the leader after it was lost. */
export type FailoverKind = 'planned' | 'unplanned';
/** Failovers this instance's volume controller saw committed (a new primary in a new epoch). */
export const failovers = counter('strata_volume_failovers_total', 'Volume failovers seen committed by this control plane\'s volume controller, by kind (planned: handed over by the primary; unplanned: primary lost, in-sync copy promoted)', ['kind']);
/** From the failover's start to the new primary reporting it serves, as this instance saw both. */
export const failoverDuration = histogram(
  'strata_volume_failover_duration_seconds',
  'From a failover\'s start (unplanned: the primary\'s presence lease gone; planned: the hand-over committed) to the new primary reporting it serves the volume, by kind',
  ['kind'],
  [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300],
);
for (const kind of ['planned', 'unplanned'] as const) {
  failovers.labels(kind).inc(0);
  failoverDuration.zero({ kind });
}

/** What the scrape-time gauges read; set while the control plane runs. */
export interface ControlPlaneMetricsSources {
  readonly cache: WatchCache;
  readonly inventory: InventorySource;
  readonly sessions: AgentSessions;
  readonly election: LeaderElection;
  /** etcd's Status and alarms (lib/etcd/member-status.ts: `() => readMemberStatus(etcd)`). */
  readonly etcdStatus: () => Promise<MemberStatus>;
  /** Where the etcd corruption scan's last result is read from. */
  readonly corruption: Pick<EtcdCorruptionStore, 'status'>;
}

let sources: ControlPlaneMetricsSources | undefined;

/** Points the gauges at a running control plane (one per process); returns the undo. */
export function observeControlPlane(running: ControlPlaneMetricsSources): () => void {
  sources = running;
  return () => {
    if (sources === running) sources = undefined;
  };
}

function presentNodes(cache: WatchCache): Set<string> {
  return new Set(cache.presence().flatMap((p) => p.nodeUUIDs ?? []));
}

gauge('strata_volumes', 'Volumes by lifecycle state', ['state'], function () {
  this.reset();
  if (!sources) return;
  const counts = new Map<string, number>(VOLUME_STATES.map((s) => [s, 0]));
  for (const { record } of sources.cache.volumesInOrder()) counts.set(record.state, (counts.get(record.state) ?? 0) + 1);
  for (const [state, n] of counts) this.labels(state).set(n);
});

gauge('strata_volumes_by_protection', 'Volumes by protection state (as GET volume shows it: protectionOf)', ['protection'], function () {
  this.reset();
  if (!sources) return;
  const { cache } = sources;
  const present = presentNodes(cache);
  const counts = new Map<string, number>(PROTECTION_STATES.map((s) => [s, 0]));
  for (const { record } of cache.volumesInOrder()) {
    const protection = protectionStateOf(record, { statuses: cache.statusesOf(record.UUID), presentNodes: present, replicaSet: cache.replicaSet(record.UUID) });
    counts.set(protection, (counts.get(protection) ?? 0) + 1);
  }
  for (const [protection, n] of counts) this.labels(protection).set(n);
});

gauge('strata_nodes', 'Storage nodes by state (Active while the agent keeps its presence lease)', ['state'], function () {
  this.reset();
  if (!sources) return;
  const present = presentNodes(sources.cache);
  const counts = { Active: 0, Inactive: 0 };
  for (const node of sources.cache.nodes()) counts[present.has(node.UUID) ? 'Active' : 'Inactive']++;
  for (const state of NODE_STATES) this.labels(state).set(counts[state]);
});

/**
 * One read shared by the gauges of a scrape (prom-client collects them concurrently): the
 * first collect starts it, the others of the same scrape await the same promise.
 */
function perScrape<T>(read: (running: ControlPlaneMetricsSources) => Promise<T>): () => Promise<T | undefined> {
  let last: { at: number; value: Promise<T | undefined> } | undefined;
  return () => {
    const now = Date.now();
    if (!last || now - last.at > 1000) {
      const running = sources;
      last = { at: now, value: running ? read(running).catch(() => undefined) : Promise.resolve(undefined) };
    }
    return last.value;
  };
}

// Per node: as many series as storage nodes (bounded by the cluster's size).
const pools = perScrape(async ({ inventory }) => [...(await inventory.read()).nodePools].map(([node, { record }]) => ({ node, record })));
const POOL_STATES = ['Ready', 'Growing', 'Rebuilding', 'Degraded', 'Failed'];
gauge('strata_node_pools', 'Storage pools that reported, by state', ['state'], async function () {
  this.reset();
  const all = await pools();
  if (!all) return;
  for (const state of POOL_STATES) this.labels(state).set(all.filter((p) => p.record.state === state).length);
});
const poolBytes = (name: string, help: string, field: 'capacityBytes' | 'physicalUsedBytes' | 'provisionedBytes') =>
  gauge(name, help, ['node'], async function () {
    this.reset();
    for (const { node, record } of (await pools()) ?? []) this.labels(node).set(Number(record[field]));
  });
poolBytes('strata_node_pool_capacity_bytes', 'Usable capacity of a node\'s storage pool as its agent last measured it', 'capacityBytes');
poolBytes('strata_node_pool_used_bytes', 'Data on a node\'s storage pool after compression and sharing, as its agent last measured it', 'physicalUsedBytes');
poolBytes('strata_node_pool_provisioned_bytes', 'Sum of the sizes of the volume backings on a node\'s storage pool', 'provisionedBytes');

gauge('strata_agent_sessions', 'Agents connected to this control plane over their gRPC session', [], function () {
  this.set(sources ? sources.sessions.connectedServers().length : 0);
});

gauge('strata_control_plane_leader', '1 while this control plane is the active cluster manager, else 0', [], function () {
  this.set(sources?.election.isLeader ? 1 : 0);
});

// etcd's own view, read at scrape time from the member this client talks to.
const etcdStatus = perScrape((running) => running.etcdStatus());
let lastEtcdLeader: string | undefined;
counter('strata_etcd_leader_changes_total', 'etcd leader changes seen by this control plane (the leader id compared between scrapes)', [], async function () {
  const read = await etcdStatus();
  if (read && read.leader !== '0') {
    if (lastEtcdLeader !== undefined && read.leader !== lastEtcdLeader) this.inc();
    lastEtcdLeader = read.leader;
  }
}).inc(0);
gauge('strata_etcd_up', '1 when etcd answered this scrape\'s status request, else 0', [], async function () {
  this.set((await etcdStatus()) ? 1 : 0);
});
gauge('strata_etcd_has_leader', '1 when etcd reports a leader, else 0', [], async function () {
  const read = await etcdStatus();
  this.set(read && read.leader !== '0' ? 1 : 0);
});
gauge('strata_etcd_raft_term', 'etcd\'s raft term (rises with every election)', [], async function () {
  const read = await etcdStatus();
  if (read) this.set(Number(read.raftTerm));
});
gauge('strata_etcd_db_size_bytes', 'Size of the etcd member\'s database file', [], async function () {
  const read = await etcdStatus();
  if (read) this.set(Number(read.dbSize));
});
gauge('strata_etcd_alarms', 'Active etcd alarms by type (CORRUPT: a member\'s data diverged; NOSPACE: its space quota is exhausted)', ['alarm'], async function () {
  const read = await etcdStatus();
  for (const alarm of ETCD_ALARMS) this.labels(alarm).set(read?.alarms.includes(alarm) ? 1 : 0);
});

// The etcd corruption scan's last result (issue 15 item 6; docs/api.md), as every control plane
// reads it from etcd.
/** The last scan's result as etcd has it; throws when etcd does not answer. */
const readCorruptionStatus = async () => (sources ? sources.corruption.status() : null);
const corruptionStatus = () => readCorruptionStatus().catch(() => null);
/** A gauge without labels that has no sample at all while `read` answers undefined. */
function optionalGauge(name: string, help: string, read: () => Promise<number | undefined>): void {
  new (class extends Gauge {
    override async get() {
      const value = await read();
      this.set(value ?? 0);
      const got = await super.get();
      return value === undefined ? { ...got, values: [] } : got;
    }
  })({ name, help, registers: [registry] });
}
// Before the first scan (and after one that could not run) neither has a sample, rather than a 0
// that would claim a clean scan.
const lastScan = async () => {
  const status = await corruptionStatus();
  return status && status.error === '' ? status : undefined;
};
optionalGauge('strata_etcd_corruption_detected', '1 when the last etcd corruption scan found members whose data disagree, else 0 (absent before the first scan)', async () => {
  const status = await lastScan();
  return status && (status.corrupted ? 1 : 0);
});
optionalGauge('strata_etcd_corruption_scan_revision', 'The etcd revision the last etcd corruption scan compared the members\' hashes at (absent before the first scan)', async () => {
  const status = await lastScan();
  return status && Number(status.revision);
});
gauge('strata_etcd_corruption_last_scan_timestamp_seconds', 'When the last etcd corruption scan finished (0: never)', [], async function () {
  const status = await corruptionStatus();
  this.set(status ? Date.parse(status.finishedAt) / 1000 : 0);
});
gauge(
  'strata_etcd_corruption_member_disagrees',
  'Per member of the last etcd corruption scan: 1 when its hash disagrees with the cluster\'s, 0 when it agrees (unreachable or not compared members are absent)',
  ['member_id', 'member_name'],
  async function () {
    let status: Awaited<ReturnType<typeof readCorruptionStatus>>;
    try {
      status = await readCorruptionStatus();
    } catch {
      return; // a failed read says nothing about the members: the last samples stay
    }
    this.reset();
    for (const m of status?.members ?? []) {
      if (m.result === 'Agrees' || m.result === 'Disagrees') this.labels(m.ID, m.name).set(m.result === 'Disagrees' ? 1 : 0);
    }
  },
);

/** The route template koa-router matched (`/api/v2/volumes/:uuid`), never the raw path. */
export function routeLabel(matched: unknown): string {
  return typeof matched === 'string' ? matched : 'unmatched';
}
