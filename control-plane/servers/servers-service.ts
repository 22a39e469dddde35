// Servers (spec 2.16, 4.12): the 17 fields of a server, from its record (written by its agent
// at join), its facts (reported over gRPC), its presence (the agent's lease) and the
// control-plane instances running on the same host; etcdMemberInfo from etcd's members.
import type { EtcdMember } from '../../lib/etcd/members.js';
import { errors } from '../../lib/errors.js';
import type { ServerRecord } from '../../lib/records.js';
import type { InventorySource, Stored } from '../inventory/inventory-reader.js';
import { InventoryView } from '../inventory/inventory-view.js';
import { etagOf, noUpgrade, type LastUpgradeWire } from '../inventory/wire.js';
import { UNKNOWN_MEMBER, membersOfServers, type EtcdMemberInfoWire, type EtcdMemberSource } from './etcd-members.js';
import type { ReplicationRisk, ReplicationRiskSource } from './replication-risk.js';

export type { EtcdMemberInfoWire } from './etcd-members.js';

export const riskOfServiceLossStates = [
  'UnknownRiskOfServiceLoss',
  'NoRiskOfServiceLoss',
  'InRiskOfServiceLoss',
  'SourceOfRiskOfServiceLoss',
] as const;
export type RiskOfServiceLossState = (typeof riskOfServiceLossStates)[number];

export type ServerState = 'UnknownState' | 'Creating' | 'Enabled' | 'Deleting' | 'Failed' | 'Disabled' | 'Enabling' | 'Disabling';
export type ServerHealth = 'None' | 'OK' | 'Warning' | 'Error';
export type UpgradeStatus = 'Unknown' | 'None' | 'UpgradeFailed' | 'Upgrading' | 'Rebooting' | 'Recovering';

/** `LastEviction`: lower-case keys (wire-conventions §7). */
export interface LastEvictionWire {
  status: 'None' | 'Failed' | 'Evicting' | 'Aborting' | 'Completed' | 'Aborted';
  startTime: string | null;
  endTime: string | null;
  errorMessage: string;
  progress: number;
}

/** A server as the API returns it: exactly the 17 fields of spec 2.16. */
export interface ServerWire {
  UUID: string;
  name: string;
  RiskOfServiceLossState: RiskOfServiceLossState;
  NodesUUIDs: string[];
  state: ServerState;
  ServerEndpoints: string[];
  ETag: string;
  ProductVersion: string;
  UpgradeStatus: UpgradeStatus;
  ApiEndpoints: string[];
  LastUpgrade: LastUpgradeWire;
  IsWitness: boolean;
  LastEviction: LastEvictionWire;
  health: ServerHealth;
  /** A per-server override of the cluster's permanent-failure timeout; null = none (the cluster's applies). */
  ServerPermanenetFailureTimeout: string | null;
  tpm2IsSupported: boolean;
  etcdMemberInfo: EtcdMemberInfoWire;
}

export interface ServerFilters {
  readonly UUID?: string;
  readonly name?: string;
  readonly riskOfServiceLoss?: RiskOfServiceLossState;
}

export class ServersService {
  constructor(
    private readonly inventory: InventorySource,
    private readonly etcdMembers: EtcdMemberSource,
    private readonly replication?: ReplicationRiskSource,
  ) {}

  async list(filters: ServerFilters = {}): Promise<ServerWire[]> {
    const [snapshot, members, risk] = await Promise.all([this.inventory.read(), this.etcdMembers.members(), this.replication?.risk()]);
    const view = new InventoryView(snapshot);
    const etcdMembers = etcdMembersOf(view, members);
    const servers: ServerWire[] = [];
    for (const server of view.snapshot.servers.values()) {
      if (filters.UUID !== undefined && server.record.UUID !== filters.UUID) continue;
      if (filters.name !== undefined && server.record.name !== filters.name) continue;
      const wire = serverToWire(view, server, etcdMembers.get(server.record.UUID) ?? UNKNOWN_MEMBER, risk);
      if (filters.riskOfServiceLoss !== undefined && wire.RiskOfServiceLossState !== filters.riskOfServiceLoss) continue;
      servers.push(wire);
    }
    return servers;
  }

  /**
   * `freshMembers`: etcd's members measured now (after an add: a measurement of the seconds
   * before, reused otherwise, does not have the new member, and the reply said Unknown).
   */
  async get(uuid: string, options: { readonly freshMembers?: boolean } = {}): Promise<ServerWire> {
    const [snapshot, members, risk] = await Promise.all([this.inventory.read(), this.etcdMembers.members({ fresh: options.freshMembers === true }), this.replication?.risk()]);
    const view = new InventoryView(snapshot);
    const server = view.snapshot.servers.get(uuid);
    if (!server) throw errors.notFound('server', uuid);
    return serverToWire(view, server, etcdMembersOf(view, members).get(uuid) ?? UNKNOWN_MEMBER, risk);
  }
}

function etcdMembersOf(view: InventoryView, members: readonly EtcdMember[]): Map<string, EtcdMemberInfoWire> {
  return membersOfServers(members, [...view.snapshot.servers.values()].map((s) => s.record));
}

export function serverToWire(view: InventoryView, stored: Stored<ServerRecord>, etcdMember: EtcdMemberInfoWire, risk?: ReplicationRisk): ServerWire {
  const server = stored.record;
  const facts = view.snapshot.serverFacts.get(server.UUID)?.record;
  const nodeUUIDs = view.nodeUUIDsOfServer(server);
  const health = serverHealth(view, server.UUID, nodeUUIDs);
  return {
    UUID: server.UUID,
    name: server.name,
    RiskOfServiceLossState: riskOfServiceLoss(health, server.UUID, risk),
    NodesUUIDs: nodeUUIDs,
    // A server added through POST /servers is Creating until its agent joined and its etcd
    // learner was promoted; every other server is Enabled (no disable/delete flow yet).
    state: server.added && (server.added.promotedAt === '' || server.nodeUUIDs.length === 0) ? 'Creating' : 'Enabled',
    ServerEndpoints: [...(server.endpoints ?? [])],
    ETag: etagOf(stored),
    ProductVersion: facts?.productVersion ?? '',
    UpgradeStatus: 'None',
    ApiEndpoints: apiEndpointsOnHost(view, server.hostname || facts?.hostname || ''),
    LastUpgrade: noUpgrade(),
    IsWitness: false,
    LastEviction: { status: 'None', startTime: null, endTime: null, errorMessage: '', progress: 0 },
    health,
    ServerPermanenetFailureTimeout: null,
    // Unknown support counts as unsupported (spec 2.16): no facts yet means false.
    tpm2IsSupported: facts?.tpm2IsSupported ?? false,
    etcdMemberInfo: { ...etcdMember },
  };
}

/**
 * OK when every node of the server is Active, Warning when some are Inactive, Error when none
 * is Active. A server without nodes is OK while its agent is present, Error when it is not.
 */
export function serverHealth(view: InventoryView, serverUUID: string, nodeUUIDs: readonly string[]): ServerHealth {
  if (nodeUUIDs.length === 0) return view.isServerPresent(serverUUID) ? 'OK' : 'Error';
  const active = nodeUUIDs.filter((uuid) => view.isNodeOfServerActive(serverUUID, uuid)).length;
  if (active === nodeUUIDs.length) return 'OK';
  return active === 0 ? 'Error' : 'Warning';
}

/**
 * SourceOfRiskOfServiceLoss: the server is not healthy (its agent or some of its nodes are down)
 * and holds a copy of a replicated volume now down to at most one live in-sync copy: its absence
 * is what put that volume at risk. InRiskOfServiceLoss: it is not healthy, or it holds the only
 * live in-sync copy of a replicated volume (losing it would make that volume NotAvailable).
 * NoRiskOfServiceLoss otherwise. Volumes of one copy do not count: they have no protection to
 * lose. UnknownRiskOfServiceLoss is not produced.
 */
export function riskOfServiceLoss(health: ServerHealth, serverUUID: string, risk: ReplicationRisk = NO_RISK): RiskOfServiceLossState {
  if (health !== 'OK' && risk.source.has(serverUUID)) return 'SourceOfRiskOfServiceLoss';
  if (health !== 'OK' || risk.lastCopy.has(serverUUID)) return 'InRiskOfServiceLoss';
  return 'NoRiskOfServiceLoss';
}

const NO_RISK: ReplicationRisk = { lastCopy: new Set(), source: new Set() };

/** apiEndpoint of the running control-plane instances on this host (hostnames compare case-insensitively). */
function apiEndpointsOnHost(view: InventoryView, hostname: string): string[] {
  if (!hostname) return [];
  const host = hostname.toLowerCase();
  const endpoints = new Set<string>();
  for (const { record } of view.snapshot.controlPlanes.values()) {
    if (record.apiEndpoint && record.hostname?.toLowerCase() === host) endpoints.add(record.apiEndpoint);
  }
  return [...endpoints].sort();
}
