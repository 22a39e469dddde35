// The cluster (spec 2.7, GET /api/v2/cluster, cluster read) and the tenant view of it (spec
// 2.8, GET /api/v2/clusterinfo, any valid token), from the cluster record written at
// bootstrap and the live inventory. Both come from one inventory snapshot (one revision).
import { errors } from '../../lib/errors.js';
import { productVersion as packageVersion } from '../../lib/paths.js';
import type { InventorySource, InventorySnapshot } from '../inventory/inventory-reader.js';
import { InventoryView, bytes } from '../inventory/inventory-view.js';
import { addStorageFigures, NO_STORAGE, nodeStorageFigures, storageStatisticsWire } from '../inventory/storage-statistics.js';
import { etagOf, int64, noUpgrade, type LastUpgradeWire, type StorageStatisticsWire } from '../inventory/wire.js';
import { minVersion } from './semver.js';
import { clusterHealthState, type VolumeHealthSource } from './volume-health.js';

/** The 11 cluster statistics: decimal strings of bytes, except compressionRatio. */
export interface ClusterStatisticsWire extends StorageStatisticsWire {
  installedPhysicalStorage: string;
}

/** Counts are JSON numbers: see the integer decision in inventory/wire.ts. */
export interface ClusterHealthWire {
  state: 'None' | 'OK' | 'Warning' | 'Error';
  numDegradedVolumes: number;
  numReadOnlyVolumes: number;
  numNotAvailableVolumes: number;
  numInactiveNodes: number;
  numHealthyVolumes: number;
}

export interface EncryptionStatusWire {
  encryptionState: 'Disabled' | 'Enabling' | 'Enabled' | 'Unknown';
  /** 64-bit: a string. */
  kekGeneration: string;
  kekUpdateDate: string | null;
  previousKekGenerations: string[];
  rotationState: 'NoRotation' | 'DistributingKEK' | 'EncryptingDEKs' | 'EncryptyingDEKs';
}

export type InBandAuthMode = 'UnKnown' | 'Enabled' | 'Disabled';

/** GET /api/v2/cluster: exactly the 17 fields of spec 2.7. */
export interface ClusterWire {
  UUID: string;
  subsystemNQN: string;
  currentMaxReplicas: number;
  supportedMaxReplicas: number;
  statistics: ClusterStatisticsWire;
  ETag: string;
  health: ClusterHealthWire;
  MinVersionInCluster: string;
  MinAllowedVersion: string;
  MaxAllowedVersion: string;
  apiEndpoints: string[];
  discoveryEndpoints: string[];
  clusterName: string;
  lastUpgrade: LastUpgradeWire;
  inBandAuthMode: InBandAuthMode;
  encryptionStatus: EncryptionStatusWire;
  federatedAuthenticationStatus: {
    federatedAuthenticationEnabled: boolean;
    idpHealthInfos: { serverName: string; idpHealthStatus: string; timestamp: string | null; healthErrorMessage: string }[];
  };
}

/** GET /api/v2/clusterinfo: exactly the 12 fields of spec 2.8. */
export interface ClusterInfoWire {
  UUID: string;
  subsystemNQN: string;
  currentMaxReplicas: number;
  supportedMaxReplicas: number;
  ETag: string;
  apiEndpoints: string[];
  discoveryEndpoints: string[];
  nvmeEndpoints: string[];
  clusterName: string;
  lastUpgrade: LastUpgradeWire;
  encryptionStatus: EncryptionStatusWire;
  inBandAuthMode: InBandAuthMode;
}

export interface ClusterServiceOptions {
  /** This software's version (MinAllowedVersion, MaxAllowedVersion); default: package.json's. */
  readonly productVersion?: string;
  /** Whether in-band authentication is enabled (inBandAuthMode); without it, Disabled. */
  readonly inBandAuth?: { isEnabled(): Promise<boolean> };
}

export class ClusterService {
  private readonly productVersion: string;

  constructor(
    private readonly inventory: InventorySource,
    private readonly volumes: VolumeHealthSource,
    options: ClusterServiceOptions = {},
  ) {
    this.productVersion = options.productVersion ?? packageVersion;
    this.inBandAuth = options.inBandAuth;
  }

  private readonly inBandAuth: ClusterServiceOptions['inBandAuth'];

  /** Enabled or Disabled as stored (in-band-auth/); Disabled where no reader is given (harnesses without it). */
  private async inBandAuthMode(): Promise<InBandAuthMode> {
    return (await this.inBandAuth?.isEnabled()) ? 'Enabled' : 'Disabled';
  }

  async cluster(): Promise<ClusterWire> {
    const [snapshot, volumes, inBandAuthMode] = await Promise.all([this.inventory.read(), this.volumes.counts(), this.inBandAuthMode()]);
    const view = new InventoryView(snapshot);
    const { record, etag } = requireCluster(view.snapshot);
    const nodes = nodeSummary(view);
    return {
      UUID: record.UUID,
      subsystemNQN: record.subsystemNQN,
      currentMaxReplicas: currentMaxReplicas(record.supportedMaxReplicas, nodes.activeServers),
      supportedMaxReplicas: record.supportedMaxReplicas,
      statistics: clusterStatistics(view),
      ETag: etag,
      health: {
        state: clusterHealthState(volumes, nodes),
        numDegradedVolumes: volumes.degraded,
        numReadOnlyVolumes: volumes.readOnly,
        numNotAvailableVolumes: volumes.notAvailable,
        numInactiveNodes: nodes.total - nodes.active,
        numHealthyVolumes: volumes.healthy,
      },
      MinVersionInCluster: minVersionInCluster(view.snapshot),
      // Both are this software's version: no server may run older than the control plane
      // expects, and there is nothing newer to upgrade to until upgrades exist.
      MinAllowedVersion: this.productVersion,
      MaxAllowedVersion: this.productVersion,
      apiEndpoints: apiEndpoints(view.snapshot),
      discoveryEndpoints: nodes.discoveryEndpoints,
      clusterName: record.clusterName,
      lastUpgrade: noUpgrade(),
      inBandAuthMode,
      encryptionStatus: encryptionDisabled(),
      federatedAuthenticationStatus: { federatedAuthenticationEnabled: false, idpHealthInfos: [] },
    };
  }

  async clusterInfo(): Promise<ClusterInfoWire> {
    const [snapshot, inBandAuthMode] = await Promise.all([this.inventory.read(), this.inBandAuthMode()]);
    const view = new InventoryView(snapshot);
    const { record, etag } = requireCluster(view.snapshot);
    const nodes = nodeSummary(view);
    return {
      UUID: record.UUID,
      subsystemNQN: record.subsystemNQN,
      currentMaxReplicas: currentMaxReplicas(record.supportedMaxReplicas, nodes.activeServers),
      supportedMaxReplicas: record.supportedMaxReplicas,
      ETag: etag,
      apiEndpoints: apiEndpoints(view.snapshot),
      discoveryEndpoints: nodes.discoveryEndpoints,
      nvmeEndpoints: nodes.nvmeEndpoints,
      clusterName: record.clusterName,
      lastUpgrade: noUpgrade(),
      encryptionStatus: encryptionDisabled(),
      inBandAuthMode,
    };
  }
}

function requireCluster(snapshot: InventorySnapshot) {
  if (!snapshot.cluster) throw errors.unavailable('the cluster is not bootstrapped yet');
  return { record: snapshot.cluster.record, etag: etagOf(snapshot.cluster) };
}

interface NodeSummary {
  readonly total: number;
  readonly active: number;
  /** Distinct servers with at least one Active node. */
  readonly activeServers: number;
  readonly discoveryEndpoints: string[];
  readonly nvmeEndpoints: string[];
}

function nodeSummary(view: InventoryView): NodeSummary {
  let total = 0;
  let active = 0;
  const servers = new Set<string>();
  const discovery = new Set<string>();
  const nvme = new Set<string>();
  for (const { record } of view.snapshot.nodes.values()) {
    total++;
    if (!view.isNodeActive(record)) continue;
    active++;
    servers.add(record.serverUUID);
    if (record.discoveryEndpoint) discovery.add(record.discoveryEndpoint);
    if (record.nvmeEndpoint) nvme.add(record.nvmeEndpoint);
  }
  return { total, active, activeServers: servers.size, discoveryEndpoints: [...discovery], nvmeEndpoints: [...nvme] };
}

/**
 * Replicas of a volume go to nodes of distinct servers, so a new volume can have at most one
 * replica per server with an Active node, and never more than the installation supports.
 */
export function currentMaxReplicas(supportedMaxReplicas: number, serversWithActiveNodes: number): number {
  return Math.max(0, Math.min(supportedMaxReplicas, serversWithActiveNodes));
}

/**
 * installedPhysicalStorage: every device the agents report now (data, journal, OS, unused).
 * The others are the sums of the nodes' figures (inventory/storage-statistics.ts), and
 * compressionRatio is the cluster's logicalUsed / physicalUsed.
 */
function clusterStatistics(view: InventoryView): ClusterStatisticsWire {
  let installed = 0n;
  for (const { record } of view.snapshot.devices.values()) {
    if (record.present) installed += bytes(record.sizeBytes);
  }
  let total = NO_STORAGE;
  for (const { record } of view.snapshot.nodes.values()) total = addStorageFigures(total, nodeStorageFigures(view, record));
  return { installedPhysicalStorage: int64(installed), ...storageStatisticsWire(total) };
}

/** The lowest ProductVersion among registered servers whose agent has reported facts; '' when none has. */
function minVersionInCluster(snapshot: InventorySnapshot): string {
  const versions: string[] = [];
  for (const uuid of snapshot.servers.keys()) {
    const version = snapshot.serverFacts.get(uuid)?.record.productVersion;
    if (version) versions.push(version);
  }
  return minVersion(versions);
}

/** apiEndpoint of every running control-plane instance (their records are leased). */
function apiEndpoints(snapshot: InventorySnapshot): string[] {
  const endpoints = new Set<string>();
  for (const { record } of snapshot.controlPlanes.values()) {
    if (record.apiEndpoint) endpoints.add(record.apiEndpoint);
  }
  return [...endpoints].sort();
}

function encryptionDisabled(): EncryptionStatusWire {
  return { encryptionState: 'Disabled', kekGeneration: '0', kekUpdateDate: null, previousKekGenerations: [], rotationState: 'NoRotation' };
}
