// The agent's Prometheus metrics (docs/install.md "Metrics" lists every one): data path passes
// and their phases, configfs and nftables operations, discovery connections, replica resyncs
// and the control-plane session. Counters are incremented where the work happens; gauges of the
// agent's state are read at scrape time from the running agent.
import { counter, gauge, histogram } from '../../lib/metrics.js';

const PASS_KINDS = ['full', 'incremental'] as const;
const NVMET_OPS = ['mkdir', 'write', 'symlink', 'rmdir', 'unlink'] as const;
const RESULTS = ['ok', 'error'] as const;

export const reconcilePasses = counter('strata_agent_reconcile_passes_total', 'Data path reconcile passes, by kind (full: the kernel tree read again) and result', ['kind', 'result']);
for (const kind of PASS_KINDS) for (const result of RESULTS) reconcilePasses.labels(kind, result).inc(0);
reconcilePasses.labels('unknown', 'error').inc(0);
export const reconcilePassDuration = histogram('strata_agent_reconcile_pass_duration_seconds', 'Duration of data path passes that ran to the end, by kind', ['kind']);
export const reconcilePhaseDuration = histogram('strata_agent_reconcile_phase_duration_seconds', 'Duration of each phase of a data path pass (plan, apply, readBack, status, …)', ['phase']);

export const configfsOperations = counter('strata_agent_configfs_operations_total', 'nvmet configfs operations applied, by operation and result', ['operation', 'result']);
for (const op of NVMET_OPS) for (const result of RESULTS) configfsOperations.labels(op, result).inc(0);
export const nftablesOperations = counter('strata_agent_nftables_operations_total', 'nft invocations for IP ACLs, by operation (read, apply) and result', ['operation', 'result']);
for (const op of ['read', 'apply']) for (const result of RESULTS) nftablesOperations.labels(op, result).inc(0);

export const discoveryConnectionsAccepted = counter('strata_agent_discovery_connections_accepted_total', 'Host connections the NVMe/TCP discovery controller accepted');
discoveryConnectionsAccepted.inc(0);

export const resyncsStarted = counter('strata_agent_resyncs_started_total', 'Replica resynchronizations started (an out-of-sync copy re-added to a primary\'s mirror)');
resyncsStarted.inc(0);
export const resyncsCompleted = counter('strata_agent_resyncs_completed_total', 'Replica resynchronizations completed (the copy recorded in sync again)');
resyncsCompleted.inc(0);
const resyncDuration = histogram('strata_agent_resync_duration_seconds', 'From re-adding a copy to recording it in sync (resyncs this agent process saw start)', [], [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600]);
const resyncStarts = new Map<string, number>();

export function resyncStarted(volumeUUID: string, replica: string): void {
  resyncsStarted.inc();
  resyncStarts.set(`${volumeUUID}/${replica}`, Date.now());
}

export function resyncCompleted(volumeUUID: string, replica: string): void {
  resyncsCompleted.inc();
  const started = resyncStarts.get(`${volumeUUID}/${replica}`);
  resyncStarts.delete(`${volumeUUID}/${replica}`);
  if (started !== undefined) resyncDuration.observe((Date.now() - started) / 1000);
}

/** What the scrape-time gauges read; set while the agent runs. */
export interface AgentMetricsSources {
  /** Open discovery connections (undefined: the controller does not listen). */
  discoveryConnections(): number | undefined;
  /** Whether the control-plane session is established, and how many were established so far. */
  session(): { readonly connected: boolean; readonly established: number };
  /** The last finished pass's volume counts (undefined before the first). */
  lastPass(): { readonly served: number; readonly failed: number } | undefined;
}

let sources: AgentMetricsSources | undefined;

/** Points the gauges at a running agent (one per process); returns the undo. */
export function observeAgent(running: AgentMetricsSources): () => void {
  sources = running;
  return () => {
    if (sources === running) sources = undefined;
  };
}

gauge('strata_agent_discovery_connections', 'Host connections the NVMe/TCP discovery controller holds now', [], function () {
  this.set(sources?.discoveryConnections() ?? 0);
});
gauge('strata_agent_control_plane_connected', '1 while the agent\'s gRPC session with a control plane is established, else 0', [], function () {
  this.set(sources?.session().connected ? 1 : 0);
});
let sessionsCounted = 0;
counter('strata_agent_control_plane_sessions_total', 'Sessions with a control plane this agent process established', [], function () {
  const established = sources?.session().established ?? sessionsCounted;
  if (established > sessionsCounted) this.inc(established - sessionsCounted);
  sessionsCounted = Math.max(sessionsCounted, established);
}).inc(0);
gauge('strata_agent_volumes', 'Volume copies on this server by the state the last data path pass reported (Served, Failed)', ['state'], function () {
  const last = sources?.lastPass();
  this.labels('Served').set(last?.served ?? 0);
  this.labels('Failed').set(last?.failed ?? 0);
});
