// Every event the system emits, in one table: its EventCode, Type, default Severity and the
// service that reports it. docs/events.md documents each row (a test enforces it). Codes are
// grouped by Type in blocks of 1000 and never reused: clients may key on them.
import type { EventComponent, EventInput, EventSeverity, EventType, ReportingService } from './event-recorder.js';

export interface CatalogueEntry {
  readonly code: number;
  readonly type: EventType;
  readonly severity: EventSeverity;
  readonly reportingService: ReportingService;
}

export const eventCatalogue = {
  // Cluster (1xxx)
  FeatureFlagChanged: { code: 1001, type: 'Cluster', severity: 'Info', reportingService: 'API' },
  FeatureFlagEnabled: { code: 1003, type: 'Cluster', severity: 'Info', reportingService: 'API' },
  FeatureFlagDisabled: { code: 1004, type: 'Cluster', severity: 'Info', reportingService: 'API' },
  ClusterManagerChanged: { code: 1002, type: 'Cluster', severity: 'Info', reportingService: 'CM' },
  EtcdCorruptionScanStarted: { code: 1010, type: 'Cluster', severity: 'Info', reportingService: 'CM' },
  EtcdCorruptionScanCompleted: { code: 1011, type: 'Cluster', severity: 'Info', reportingService: 'CM' },
  EtcdCorruptionDetected: { code: 1012, type: 'Cluster', severity: 'Critical', reportingService: 'CM' },
  EtcdCorruptionResolved: { code: 1013, type: 'Cluster', severity: 'Info', reportingService: 'CM' },

  // Node (2xxx)
  NodeEnteredActiveState: { code: 2001, type: 'Node', severity: 'Info', reportingService: 'CM' },
  NodeEnteredInactiveState: { code: 2002, type: 'Node', severity: 'Medium', reportingService: 'CM' },
  NodeReplaceRequested: { code: 2010, type: 'Node', severity: 'Info', reportingService: 'API' },
  NodeReplaced: { code: 2011, type: 'Node', severity: 'Info', reportingService: 'CM' },
  NodeReplaceFailed: { code: 2012, type: 'Node', severity: 'High', reportingService: 'CM' },
  NodeStopRequested: { code: 2020, type: 'Node', severity: 'Info', reportingService: 'API' },
  NodeStartRequested: { code: 2021, type: 'Node', severity: 'Info', reportingService: 'API' },
  NodeRestartRequested: { code: 2022, type: 'Node', severity: 'Info', reportingService: 'API' },

  // Volume (3xxx); snapshots are Volume events too (3100+): the spec has no snapshot type.
  VolumeCreated: { code: 3001, type: 'Volume', severity: 'Info', reportingService: 'API' },
  VolumeAvailable: { code: 3002, type: 'Volume', severity: 'Info', reportingService: 'CM' },
  VolumeUpdated: { code: 3003, type: 'Volume', severity: 'Info', reportingService: 'API' },
  VolumeDeleteRequested: { code: 3004, type: 'Volume', severity: 'Info', reportingService: 'API' },
  VolumeDeleted: { code: 3005, type: 'Volume', severity: 'Info', reportingService: 'CM' },
  VolumeFailed: { code: 3006, type: 'Volume', severity: 'High', reportingService: 'CM' },
  VolumeDegraded: { code: 3007, type: 'Volume', severity: 'Medium', reportingService: 'CM' },
  VolumeFullyProtected: { code: 3008, type: 'Volume', severity: 'Info', reportingService: 'CM' },
  VolumeReadOnly: { code: 3009, type: 'Volume', severity: 'High', reportingService: 'CM' },
  VolumeNotAvailable: { code: 3010, type: 'Volume', severity: 'Critical', reportingService: 'CM' },
  VolumeRollbackRequested: { code: 3011, type: 'Volume', severity: 'Info', reportingService: 'API' },
  VolumeRolledBack: { code: 3012, type: 'Volume', severity: 'Info', reportingService: 'CM' },
  VolumePrimaryChanged: { code: 3013, type: 'Volume', severity: 'High', reportingService: 'CM' },
  VolumeReplicaReplaced: { code: 3014, type: 'Volume', severity: 'Medium', reportingService: 'CM' },
  VolumeRebuildStarted: { code: 3015, type: 'Volume', severity: 'Info', reportingService: 'CM' },
  VolumeRebuildCompleted: { code: 3016, type: 'Volume', severity: 'Info', reportingService: 'CM' },
  SnapshotCreated: { code: 3101, type: 'Volume', severity: 'Info', reportingService: 'API' },
  SnapshotDeleteRequested: { code: 3102, type: 'Volume', severity: 'Info', reportingService: 'API' },
  SnapshotDeleted: { code: 3103, type: 'Volume', severity: 'Info', reportingService: 'CM' },
  SnapshotExpired: { code: 3104, type: 'Volume', severity: 'Info', reportingService: 'CM' },
  SnapshotFailed: { code: 3105, type: 'Volume', severity: 'High', reportingService: 'CM' },
  SnapshotExpiryDeferred: { code: 3106, type: 'Volume', severity: 'Low', reportingService: 'CM' },
  SnapshotAvailable: { code: 3107, type: 'Volume', severity: 'Info', reportingService: 'CM' },

  // NVMeSSD (4xxx)
  NVMeSSDAdded: { code: 4001, type: 'NVMeSSD', severity: 'Info', reportingService: 'CM' },
  NVMeSSDFailed: { code: 4002, type: 'NVMeSSD', severity: 'High', reportingService: 'CM' },
  NVMeSSDRemoved: { code: 4003, type: 'NVMeSSD', severity: 'Low', reportingService: 'CM' },
  NVMeSSDAttachedToNode: { code: 4004, type: 'NVMeSSD', severity: 'Info', reportingService: 'API' },

  // Server (5xxx)
  ServerJoined: { code: 5001, type: 'Server', severity: 'Info', reportingService: 'CM' },
  ServerRemoved: { code: 5002, type: 'Server', severity: 'Info', reportingService: 'API' },

  // DataIntegrity (6xxx)
  DataIntegrityErrorDetected: { code: 6001, type: 'DataIntegrity', severity: 'High', reportingService: 'NM' },
  DataIntegrityErrorRecovered: { code: 6002, type: 'DataIntegrity', severity: 'Low', reportingService: 'NM' },

  // ClusterEncryption (7xxx): reserved; cluster encryption emits nothing yet.
} as const satisfies Record<string, CatalogueEntry>;

export type EventName = keyof typeof eventCatalogue;

/** The EventCode of a name; 0 for a name the catalogue does not know. */
export function eventCodeOf(eventName: string): number {
  return (eventCatalogue as Record<string, CatalogueEntry>)[eventName]?.code ?? 0;
}

export function isCatalogued(eventName: string): eventName is EventName {
  return Object.hasOwn(eventCatalogue, eventName);
}

/**
 * An EventInput with the catalogue's type, severity and reporting service filled in, so
 * emitters only say what happened: `catalogued('VolumeCreated', {component, description})`.
 * `severity` may be overridden when the same event matters more in some case.
 */
export function catalogued(
  eventName: EventName,
  fields: {
    readonly component: EventComponent;
    readonly description: string;
    readonly severity?: EventSeverity;
    readonly status?: string;
    readonly causeCode?: number;
    readonly associatedEventID?: string;
  },
): EventInput {
  const entry: CatalogueEntry = eventCatalogue[eventName];
  return {
    type: entry.type,
    severity: fields.severity ?? entry.severity,
    eventName,
    reportingService: entry.reportingService,
    description: fields.description,
    component: fields.component,
    ...(fields.status !== undefined ? { status: fields.status } : {}),
    ...(fields.causeCode !== undefined ? { causeCode: fields.causeCode } : {}),
    ...(fields.associatedEventID !== undefined ? { associatedEventID: fields.associatedEventID } : {}),
  };
}
