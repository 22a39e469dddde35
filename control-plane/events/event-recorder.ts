// What the rest of the control plane uses to write the event log (wire-conventions §7 Event).
// The events folder implements it over etcd; tests may pass a recorder that collects events.

export type EventType = 'UnknownType' | 'Cluster' | 'Node' | 'Volume' | 'NVMeSSD' | 'Server' | 'DataIntegrity' | 'ClusterEncryption';
export type EventSeverity = 'Info' | 'Low' | 'Medium' | 'High' | 'Critical';
export type ReportingService = 'CM' | 'NM' | 'API' | 'UM';

export type EventComponent =
  | { readonly kind: 'volume'; readonly projectName: string; readonly volumes: readonly { ID: string; Name: string }[] }
  | { readonly kind: 'nvmeSsd'; readonly ID: string; readonly Name: string }
  | { readonly kind: 'node'; readonly ID: string; readonly Name: string }
  | { readonly kind: 'server'; readonly ID: string; readonly Name: string }
  | { readonly kind: 'cluster'; readonly ID: string; readonly Name: string }
  | { readonly kind: 'dataIntegrity'; readonly NodeUUID: string; readonly ServerUUID: string; readonly SSDs: readonly { ID: string; Name: string }[] };

export interface EventInput {
  readonly type: EventType;
  readonly severity: EventSeverity;
  /** e.g. VolumeCreated, NodeEnteredActiveState: see docs/events.md for the catalogue. */
  readonly eventName: string;
  readonly reportingService: ReportingService;
  readonly description: string;
  readonly component: EventComponent;
  readonly status?: string;
  readonly causeCode?: number;
  readonly associatedEventID?: string;
}

export interface EventRecorder {
  /** Appends an event. Never throws for the caller's sake: a lost event must not fail an API call. */
  record(event: EventInput): Promise<void>;
}
