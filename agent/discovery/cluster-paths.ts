// Where the discovery controller learns the cluster's paths: a watch-fed mirror of the etcd keys
// that say which node serves which volume (assignments, volume status, nodes, servers,
// presence, the cluster record), through ONE watch, turned into a DiscoveryView after every
// batch of changes. While etcd is unreachable the last view stays in force: the kernel targets
// keep serving, so their paths stay true.
//
// A path is listed only once it is served (docs/discovery.md, "What is listed"): the node holds
// an assignment for the volume, the node is Active (its server's presence key exists), and the
// node reports the volume Served at the assignment's generation or later. This node's own state
// comes from its data path directly (fresher than the status the control plane writes back).
import type { Logger } from '../../lib/logger.js';
import type { ClusterRecord, NodeRecord, ServerRecord, VolumeAssignment } from '../../lib/records.js';
import { retry, RetryAborted, sleep } from '../../lib/retry.js';
import type { VolumeReportSnapshot, VolumeReportSource } from '../datapath/reconcile/volume-report.js';
import type { ClusterPathsStore } from './cluster-paths-store.js';
import { addressFamily, makeDiscoveryView, type DiscoveryView, type Referral, type VolumePath } from './log-page.js';

/** The cluster's state as far as discovery needs it (one consistent snapshot). */
export interface ClusterPathState {
  readonly cluster: ClusterRecord | undefined;
  readonly servers: ReadonlyMap<string, ServerRecord>;
  readonly nodes: Iterable<NodeRecord>;
  /** Servers with a presence key: their nodes are Active. */
  readonly presentServers: ReadonlySet<string>;
  readonly assignments: Iterable<VolumeAssignment>;
  /** The state a node last reported for a volume. */
  readonly status: (volumeUUID: string, nodeUUID: string) => { state: string; generation: number } | undefined;
  /** This agent's server: its own discovery endpoint is not a referral. */
  readonly localServerUUID: string;
  /** TLS required on volume ports (docs/nvme-tcp-tls.md). */
  readonly tlsRequired?: boolean;
}

/** Builds the view: which paths are served, and which other discovery endpoints exist. */
export function buildDiscoveryView(state: ClusterPathState): DiscoveryView {
  const nodes = new Map<string, NodeRecord>();
  for (const node of state.nodes) nodes.set(node.UUID, node);
  const addressOf = (node: NodeRecord): string | undefined => {
    const address = unbracket(state.servers.get(node.serverUUID)?.endpoints[0] ?? '');
    return addressFamily(address) === undefined ? undefined : address;
  };
  const active = (node: NodeRecord) => node.serverUUID === state.localServerUUID || state.presentServers.has(node.serverUUID);

  const paths: VolumePath[] = [];
  for (const a of state.assignments) {
    const node = nodes.get(a.nodeUUID);
    if (!node || !active(node)) continue;
    const status = state.status(a.volumeUUID, a.nodeUUID);
    if (status?.state !== 'Served' || status.generation < a.generation) continue;
    const traddr = addressOf(node);
    if (traddr === undefined) continue;
    paths.push({ volumeUUID: a.volumeUUID, nodeUUID: a.nodeUUID, subsystemNQN: a.subsystemNQN, acl: a.acl, traddr, port: a.port });
  }

  const referrals: Referral[] = [];
  for (const node of nodes.values()) {
    if (node.serverUUID === state.localServerUUID || !state.presentServers.has(node.serverUUID)) continue;
    const endpoint = parseEndpoint(node.discoveryEndpoint);
    if (endpoint) referrals.push(endpoint);
  }
  return makeDiscoveryView(state.cluster?.subsystemNQN ?? '', paths, referrals, state.tlsRequired ?? false);
}

const unbracket = (host: string) => (host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host);

/** host:port (IPv6 in brackets) → address and port; undefined for '' or anything else. */
export function parseEndpoint(endpoint: string): Referral | undefined {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^\s:[\]]+):(\d{1,5})$/.exec(endpoint);
  if (!match) return undefined;
  const traddr = unbracket(match[1]!);
  const port = Number(match[2]);
  if (addressFamily(traddr) === undefined || port < 1 || port > 65535) return undefined;
  return { traddr, port };
}

/** Only what the view reads is checked: a record written by another version may have more. */
function isAssignment(value: unknown): value is VolumeAssignment {
  const a = value as Partial<VolumeAssignment> | null;
  return (
    !!a &&
    typeof a.volumeUUID === 'string' &&
    typeof a.nodeUUID === 'string' &&
    typeof a.subsystemNQN === 'string' &&
    a.subsystemNQN.length > 0 &&
    Number.isInteger(a.port) &&
    a.port! >= 1 &&
    a.port! <= 65535 &&
    Number.isInteger(a.generation) &&
    Array.isArray(a.acl) &&
    a.acl.every((e) => typeof e === 'string')
  );
}

export interface ClusterPathsOptions {
  /** The records the paths are built from (cluster-paths-store.ts), read from etcd and watched. */
  readonly store: ClusterPathsStore;
  readonly logger: Logger;
  readonly localServerUUID: string;
  /** This server's nodes: their served state comes from the local data path. */
  readonly localNodeUUIDs: readonly string[];
  /** Changes arriving within this window are folded into one new view. */
  readonly settleMs?: number;
  /**
   * How long after etcd was read the view waits for the local data path's first report; past
   * it, the view goes on without this node's paths (a stuck data path must not take the other
   * nodes' paths from hosts).
   */
  readonly localReportGraceMs?: number;
}

/** The live view of the cluster's paths; undefined until etcd was read once (and the local data path reported). */
export class ClusterPaths {
  private readonly store: ClusterPathsStore;
  private local: VolumeReportSource | undefined;
  private unsubscribeLocal: (() => void) | undefined;
  private current: DiscoveryView | undefined;
  private loaded = false;
  private readonly listeners = new Set<(view: DiscoveryView) => void>();
  private timer: NodeJS.Timeout | undefined;
  private graceTimer: NodeJS.Timeout | undefined;
  private graceOver = false;
  private stopped = false;
  private readonly abort = new AbortController();
  private starting: Promise<void> | undefined;

  constructor(private readonly options: ClusterPathsOptions) {
    this.store = options.store;
    this.store.onChange(() => this.schedule());
  }

  view(): DiscoveryView | undefined {
    return this.current;
  }

  onChange(listener: (view: DiscoveryView) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Starts reading etcd (retrying until it answers) and following the local data path's reports. */
  start(local?: VolumeReportSource): void {
    if (this.starting || this.stopped) return;
    this.local = local;
    this.unsubscribeLocal = local?.onChange(() => this.schedule());
    this.starting = this.loadUntilDone();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    clearTimeout(this.timer);
    clearTimeout(this.graceTimer);
    this.unsubscribeLocal?.();
    // An attempt blocked on an unreachable etcd must not hold up shutdown; it stops by itself.
    await Promise.race([this.starting, sleep(1000)]);
    await this.store.stop();
  }

  /**
   * Rebuilds the view now (the watch and the local reports call it). There is no view until
   * etcd was read once and this node's data path made its first report (or the grace period
   * ran out): a page without this node's paths would tell a host its volumes are gone.
   */
  refresh(): DiscoveryView | undefined {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.loaded || this.stopped || (this.local && !this.local.current() && !this.graceOver)) return this.current;
    this.current = buildDiscoveryView(this.snapshot());
    for (const listener of this.listeners) listener(this.current);
    return this.current;
  }

  private async loadUntilDone(): Promise<void> {
    if (this.stopped) return;
    try {
      await retry(() => this.store.start(), {
        backoff: { initialMs: 200, maxMs: 5000, jitter: 0.5 },
        signal: this.abort.signal,
        onRetry: (err, delay) => this.options.logger.warn({ err: err.message, retryInMs: delay }, 'reading the cluster’s paths from etcd failed; retrying'),
      });
    } catch (err) {
      if (this.stopped || err instanceof RetryAborted) return;
      throw err;
    }
    // Stopped while loading: the watch just created must go too.
    if (this.stopped) return await this.store.stop();
    this.loaded = true;
    this.graceTimer = setTimeout(() => {
      this.graceOver = true;
      if (!this.current) this.options.logger.warn('the data path has not reported yet; discovery goes on without this node’s paths');
      this.refresh();
    }, this.options.localReportGraceMs ?? 30_000);
    this.refresh();
  }

  private schedule(): void {
    if (!this.loaded || this.stopped || this.timer) return;
    this.timer = setTimeout(() => this.refresh(), this.options.settleMs ?? 50);
  }

  private snapshot(): ClusterPathState {
    const { store } = this;
    const servers = new Map<string, ServerRecord>();
    for (const s of store.servers()) if (s?.UUID) servers.set(s.UUID, s);
    const present = new Set<string>();
    for (const p of store.presence()) if (p?.serverUUID) present.add(p.serverUUID);
    const localNodes = new Set(this.options.localNodeUUIDs);
    const localReport: VolumeReportSnapshot | undefined = this.local?.current();
    const localStatus = new Map<string, { state: string; generation: number }>();
    for (const v of localReport?.volumes ?? []) localStatus.set(`${v.volumeUUID}/${v.nodeUUID}`, v);
    return {
      cluster: store.cluster(),
      servers,
      nodes: store.nodes().filter((n): n is NodeRecord => typeof n?.UUID === 'string'),
      presentServers: present,
      assignments: store.assignments().filter(isAssignment),
      status: (volumeUUID, nodeUUID) => {
        if (localNodes.has(nodeUUID)) return localStatus.get(`${volumeUUID}/${nodeUUID}`);
        const record = store.status(volumeUUID, nodeUUID);
        return record && typeof record.generation === 'number' ? record : undefined;
      },
      localServerUUID: this.options.localServerUUID,
      tlsRequired: store.tlsRequired(),
    };
  }
}
