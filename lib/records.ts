// Records as stored in etcd (JSON). These are storage shapes, not API shapes: the control plane's
// resource folders map them to the wire fields of the spec. Byte counts are decimal strings,
// because JSON numbers lose precision past 2^53.

export interface ClusterRecord {
  UUID: string;
  clusterName: string;
  subsystemNQN: string;
  supportedMaxReplicas: number;
  createdAt: string;
  /** Control-plane instance that bootstrapped the cluster. */
  bootstrappedBy: string;
}

export interface ProjectRecord {
  UUID: string;
  name: string;
  description: string;
  defaultPolicies: { policyType: string; policyUUID: string }[];
  builtIn: boolean;
  createdAt: string;
}

export interface CredentialRecord {
  project: string;
  name: string;
  type: 'RS256PubKey';
  /** SPKI PEM of the public key. */
  payload: string;
  createdAt: string;
}

export interface ServerRecord {
  UUID: string;
  name: string;
  hostname: string;
  nodeUUIDs: string[];
  /** Addresses the server is reached at (agent advertise address). */
  endpoints: string[];
  createdAt: string;
}

export interface ServerFactsRecord {
  serverUUID: string;
  hostname: string;
  productVersion: string;
  tpm2IsSupported: boolean;
  cpuCores: number;
  memoryBytes: string;
  os: string;
  kernel: string;
  journalDeviceSerial: string;
  reportedAt: string;
  /** Control-plane instance that received the report. */
  reportedTo: string;
}

export interface NodeRecord {
  UUID: string;
  serverUUID: string;
  name: string;
  hostname: string;
  /** host:port of the node's NVMe/TCP target. */
  nvmeEndpoint: string;
  /** host:port of the node's discovery controller. */
  discoveryEndpoint: string;
  failureDomains: string[];
  maxNvmeDevices: number;
  /** Serials of the data devices the node manages. */
  managedDeviceSerials: string[];
  /** Serial of the journal device, '' when none. */
  journalDeviceSerial: string;
  ec: boolean;
  createdAt: string;
}

export type LedState = 'off' | 'locate' | 'rebuild';

export interface DeviceRecord {
  serial: string;
  model: string;
  sizeBytes: string;
  /** -1 when the platform does not say. */
  numaNode: number;
  firmware: string;
  pciAddress: string;
  /** Kernel controller name at the last report (nvme0, ...); changes across boots. */
  controller: string;
  serverUUID: string;
  /** The device holds a mounted filesystem of the OS. */
  holdsOS: boolean;
  ledState: LedState;
  /** False once the agent stops reporting it (pulled, failed). */
  present: boolean;
  /** When this record last changed: first seen, changed, or found missing (its failure time). */
  reportedAt: string;
}

export interface PresenceRecord {
  serverUUID: string;
  nodeUUIDs: string[];
  hostname: string;
  agentVersion: string;
  /** A random id per agent process start; tells a restart from a continuous session. */
  agentInstance: string;
  since: string;
}

export interface ControlPlaneRecord {
  instanceId: string;
  hostname: string;
  apiEndpoint: string;
  grpcEndpoint: string;
  version: string;
  since: string;
}

export interface LeaderRecord {
  instanceId: string;
  since: string;
}
