// The event as the API returns it and as etcd stores it (events are immutable, so the stored
// record IS the wire object: listing parses and returns it unchanged).
//
// 17 fields (spec 2.9, wire-conventions §7): the 11 scalar fields plus the 6 component fields.
// Exactly one component field holds an object; the other five are null (protobuf JSON with
// unpopulated fields emitted, as every other resource here does), so each event always has
// the same 17 keys.
import type { EventComponent, EventInput, EventSeverity, EventType, ReportingService } from './event-recorder.js';
import { eventCodeOf } from './event-catalogue.js';
import { rfc3339Nano } from './event-id.js';

export const eventTypes = ['UnknownType', 'Cluster', 'Node', 'Volume', 'NVMeSSD', 'Server', 'DataIntegrity', 'ClusterEncryption'] as const satisfies readonly EventType[];
export const eventSeverities = ['Info', 'Low', 'Medium', 'High', 'Critical'] as const satisfies readonly EventSeverity[];
export const reportingServices = ['CM', 'NM', 'API', 'UM'] as const satisfies readonly ReportingService[];

export interface ComponentRef {
  ID: string;
  Name: string;
}

export interface EventWire {
  ID: string;
  Time: string;
  Type: EventType;
  Severity: EventSeverity;
  EventName: string;
  EventCode: number;
  ReportingService: ReportingService;
  AssociatedEventID: string;
  Status: string;
  CauseCode: number;
  Description: string;
  ComponentVolumesInfo: { ProjectVolumesMap: Record<string, { VolumeComponentInfoList: ComponentRef[] }> } | null;
  ComponentNVMeSSDInfo: ComponentRef | null;
  ComponentNodeInfo: ComponentRef | null;
  ComponentServerInfo: ComponentRef | null;
  ComponentClusterInfo: ComponentRef | null;
  ComponentDataIntegrityInfo: { NodeUUID: string; ServerUUID: string; SSDs: ComponentRef[] } | null;
}

export const EVENT_FIELDS = [
  'ID', 'Time', 'Type', 'Severity', 'EventName', 'EventCode', 'ReportingService', 'AssociatedEventID', 'Status', 'CauseCode',
  'Description', 'ComponentVolumesInfo', 'ComponentNVMeSSDInfo', 'ComponentNodeInfo', 'ComponentServerInfo',
  'ComponentClusterInfo', 'ComponentDataIntegrityInfo',
] as const satisfies readonly (keyof EventWire)[];

/**
 * The data-integrity component of wire-conventions §7, which EventComponent (the recorder
 * contract) does not name yet; EtcdEventLog accepts it already.
 */
export interface DataIntegrityComponent {
  readonly kind: 'dataIntegrity';
  readonly NodeUUID: string;
  readonly ServerUUID: string;
  /** The devices involved: ID = serial, Name = kernel controller name. */
  readonly SSDs: readonly ComponentRef[];
}

export type RecordableComponent = EventComponent | DataIntegrityComponent;
export type RecordableEvent = Omit<EventInput, 'component'> & { readonly component: RecordableComponent };

/** Longer descriptions are cut: an event must stay small enough to list many per read. */
export const MAX_DESCRIPTION_CHARS = 1024;

export function toEventWire(event: RecordableEvent, id: string, ns: bigint): EventWire {
  const wire: EventWire = {
    ID: id,
    Time: rfc3339Nano(ns),
    Type: event.type,
    Severity: event.severity,
    EventName: event.eventName,
    EventCode: eventCodeOf(event.eventName),
    ReportingService: event.reportingService,
    AssociatedEventID: event.associatedEventID ?? '',
    Status: event.status ?? '',
    CauseCode: event.causeCode ?? 0,
    Description: event.description.length > MAX_DESCRIPTION_CHARS ? `${event.description.slice(0, MAX_DESCRIPTION_CHARS - 1)}…` : event.description,
    ComponentVolumesInfo: null,
    ComponentNVMeSSDInfo: null,
    ComponentNodeInfo: null,
    ComponentServerInfo: null,
    ComponentClusterInfo: null,
    ComponentDataIntegrityInfo: null,
  };
  const c = event.component;
  const ref = (x: { ID: string; Name: string }): ComponentRef => ({ ID: x.ID, Name: x.Name });
  switch (c.kind) {
    case 'volume':
      wire.ComponentVolumesInfo = { ProjectVolumesMap: { [c.projectName]: { VolumeComponentInfoList: c.volumes.map(ref) } } };
      break;
    case 'nvmeSsd':
      wire.ComponentNVMeSSDInfo = ref(c);
      break;
    case 'node':
      wire.ComponentNodeInfo = ref(c);
      break;
    case 'server':
      wire.ComponentServerInfo = ref(c);
      break;
    case 'cluster':
      wire.ComponentClusterInfo = ref(c);
      break;
    case 'dataIntegrity':
      wire.ComponentDataIntegrityInfo = { NodeUUID: c.NodeUUID, ServerUUID: c.ServerUUID, SSDs: c.SSDs.map(ref) };
      break;
  }
  return wire;
}

/** The projects an event concerns (the keys of its ProjectVolumesMap). */
export function projectsOf(event: EventWire): string[] {
  return Object.keys(event.ComponentVolumesInfo?.ProjectVolumesMap ?? {});
}
