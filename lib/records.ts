// Records as stored in etcd (JSON). These are storage shapes, not API shapes: the control plane's
// resource folders map them to the wire fields of the spec. Byte counts are decimal strings,
// because JSON numbers lose precision past 2^53.

import type { KernelCapabilities } from './contract/kernel-capabilities.js';
import type { QosLimits } from './contract/qos.js';

export interface ClusterRecord {
  UUID: string;
  clusterName: string;
  subsystemNQN: string;
  supportedMaxReplicas: number;
  createdAt: string;
  /** Control-plane instance that bootstrapped the cluster. */
  bootstrappedBy: string;
}

/** One HMAC key agents sign their gRPC tokens with (lib/agent-token.ts). */
export interface AgentSecret {
  /** Random id, the tokens' `kid`: names the key without revealing it. */
  id: string;
  /** 32 random bytes, base64url. */
  key: string;
  createdAt: string;
}

/** The agent secret: agents sign with `current`; control planes also accept `previous` (rotation). */
export interface AgentSecretRecord {
  current: AgentSecret;
  previous?: AgentSecret;
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
  /**
   * Set by POST /api/v2/servers (absent for servers whose agent simply joined): the etcd peer URL
   * of the server's member, its member ID once added ('' before), whether its nodes join Active
   * (extendCluster) or Unattached, and when the member was promoted from learner to voter.
   */
  added?: { etcdPeerURL: string; etcdMemberID: string; extendCluster: boolean; promotedAt: string };
}

/** AES-256-GCM under the control planes' host-secret key (control-plane/in-band-auth/host-secret-key.ts). */
export interface SecretCiphertext {
  /** Id of the key (a hash of it), so a control plane with another key refuses instead of failing to open. */
  kid: string;
  iv: string;
  tag: string;
  data: string;
}

/** /strata/in-band-auth/hosts/<project>/<name>: a trusted host and its DH-HMAC-CHAP secrets, encrypted. */
export interface TrustedHostRecord {
  UUID: string;
  name: string;
  projectName: string;
  hostNQN: string;
  /** The host's secret (nvmet dhchap_key; the host connects with --dhchap-secret). */
  secret: SecretCiphertext;
  /** The target's secret for bidirectional authentication (nvmet dhchap_ctrl_key), when set. */
  ctrlSecret?: SecretCiphertext;
  createdAt: string;
  secretUpdatedAt: string;
}

/** /strata/in-band-auth/server-keys/<server>: the X25519 public key its agent keeps the private half of. */
export interface ServerBoxKeyRecord {
  serverUUID: string;
  publicKey: string;
  createdAt: string;
}

/** /strata/in-band-auth/servers/<server>: in-band authentication as that server's agent applies it. */
export interface ServerHostKeysRecord {
  serverUUID: string;
  enabled: boolean;
  /** The public key the box was sealed to (a new agent key needs a new box). */
  publicKey: string;
  /** JSON {hosts: {<hostNQN>: {key, ctrlKey}}} sealed to the server (lib/sealed-box.ts). */
  box: import('./sealed-box.js').SealedBox;
  writtenAt: string;
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
  /** Measured by the agent; absent when it did not report them (every capability counts as missing). */
  kernelCapabilities?: KernelCapabilities;
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
  /**
   * host:port other nodes reach this node's replication listener at (a primary connects there to
   * the copies this node holds); '' until served. Absent in records written before replication.
   */
  replicationEndpoint?: string;
  failureDomains: string[];
  maxNvmeDevices: number;
  /** Serials of the data devices the node manages. */
  managedDeviceSerials: string[];
  /** Serial of the journal device, '' when none. */
  journalDeviceSerial: string;
  ec: boolean;
  createdAt: string;
  /** The node joined Unattached (its server was added with extendCluster false): it takes no new volumes. */
  unattached?: boolean;
}

/** A node command (spec 4.8): stop, start, restart (stop then start) or replace. */
export type NodeCommandKind = 'stop' | 'start' | 'restart' | 'replace';

/**
 * /strata/node-commands/<node>: the last command an administrator gave the node (docs/node-operations.md).
 * Written by the control plane that took the request; the node's agent watches it and acts
 * (stop, start, restart); the active cluster manager carries out a replace.
 */
export interface NodeCommandRecord {
  nodeUUID: string;
  /** A new UUID per command: the agent's run state names the command it answers. */
  id: string;
  kind: NodeCommandKind;
  /** What the node's agent is to make true: the node serves (Running) or serves nothing (Stopped). */
  desired: 'Running' | 'Stopped';
  force: boolean;
  /** restart: the node's storage pool is reassembled between the stop and the start. */
  considerBackend: boolean;
  /** replace: the node taking over this node's copies. */
  targetNodeUUID?: string;
  requestedAt: string;
  /** replace: when the active cluster manager finished it (every copy moved, the source detached). */
  completedAt?: string;
  /** replace: why it could not finish ('' while it runs or when it finished). */
  failure?: string;
  /** replace: when it ended failed (with `failure`). */
  failedAt?: string;
  /**
   * replace: why it is failing, while the copies already moved to the target go back to the
   * source; still in progress until they have, then `failure` (docs/node-operations.md).
   */
  failing?: string;
}

export type NodeRunState = 'Stopping' | 'Stopped' | 'Starting' | 'Running';

/**
 * /strata/node-run-states/<node>: what the node's agent did, never what was asked: Stopped once its
 * primaries were handed over and its exports are gone, Running once it serves again.
 */
export interface NodeRunStateRecord {
  nodeUUID: string;
  state: NodeRunState;
  /** The command this state answers ('' when none was ever given). */
  commandId: string;
  /** restart: the stop half is done (the agent continues with the start after its own restart). */
  stopDone?: boolean;
  /** restart with considerBackend: the node's storage pool was reassembled (then the start half). */
  reassembled?: boolean;
  /**
   * Why the command failed (restart with considerBackend: the reassembly, with the kernel's
   * reason); the node then stays stopped and the command is over (a new one may be given).
   */
  failure?: string;
  updatedAt: string;
  /** What the agent is doing or why it could not (free text). */
  detail: string;
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
  /** How its REST API is served; absent in records of older versions: https (the default). */
  apiScheme?: 'http' | 'https';
  grpcEndpoint: string;
  version: string;
  since: string;
}

/** Which control plane holds a server's agent session (docs/diagnostics.md "Any control plane"). */
export interface AgentSessionRecord {
  serverUUID: string;
  /** The control plane's instanceId (its /strata/control-planes record has its API endpoint). */
  instanceId: string;
  agentInstance: string;
  since: string;
}

export interface LeaderRecord {
  instanceId: string;
  since: string;
}

// ---------------------------------------------------------------------------------------------
// Volumes and their data path (docs/volume-lifecycle.md tells the whole flow).

export type VolumeState = 'Creating' | 'Available' | 'Deleting' | 'Failed' | 'Updating' | 'Rollback';
export type AclEntry = string; // a host NQN, or 'ALLOW_ANY' / 'ALLOW_NONE' alone
export interface Label {
  key: string;
  value: string;
}
export interface PlacementRestriction {
  operator: 'Unknown' | 'In';
  labelValueKeyPairs: { key: 'Unknown' | 'FD' | 'PrimaryFD' | 'ClusterID'; value: string }[];
}

/** Where a volume lives; chosen once by the active cluster manager. */
export interface VolumePlacement {
  nodeList: string[];
  primaryNodeUUID: string;
  /** Cluster-unique namespace id. */
  nsid: number;
  /** The volume's own NVMe/TCP port, the same on every node that serves it. */
  port: number;
  /**
   * The controller-ID window of each nodeList position (window w: controller IDs w*1000+1 to
   * (w+1)*1000). Absent (volumes placed before it existed, and never re-placed): the position
   * itself. A node that takes a copy's place gets a window no node of the volume had yet, since
   * hosts keep the lost node's controller (reconnecting) and refuse a new one with a controller ID
   * they hold (control-plane/volumes/assignments.ts).
   */
  cntlidWindows?: number[];
}

/** /strata/volumes/<UUID>: the volume as the API sees it (desired spec + lifecycle). */
export interface VolumeRecord {
  UUID: string;
  name: string;
  projectName: string;
  sizeBytes: string;
  acl: AclEntry[];
  ipAcl: string[];
  compression: boolean;
  replicaCount: number;
  sectorSize: 512 | 4096;
  labels: Label[];
  /** '' = none given: the project's default policy applies. */
  qosPolicyUUID: string;
  placementRestrictions: PlacementRestriction[];
  /** Clone source ('' when not a clone). */
  sourceSnapshotUUID: string;
  sourceSnapshotName: string;
  encrypted: boolean;
  state: VolumeState;
  /** Bumped by every change the data path must apply; agents report the generation they served. */
  generation: number;
  /** null until the active cluster manager places the volume. */
  placement: VolumePlacement | null;
  /** Why the volume is Failed ('' otherwise). */
  failureReason: string;
  /**
   * Creating and not placed yet, though it may fit later: why it waits (nodes inactive, pools not
   * reported, not enough room now). Cluster health shows it; absent otherwise.
   */
  waitingFor?: string;
  /** Pending rollback: the snapshot whose data replaces the volume's (state Rollback). */
  rollbackSnapshotUUID: string;
  creationTime: string;
}

/**
 * /strata/replica-sets/<volumeUUID>: who serves a replicated volume (replicaCount 2-3) and which
 * copies hold every acknowledged write (docs/replication.md). The invariant it carries: no write
 * is acknowledged without a copy in `inSync` unless that copy's removal from `inSync` is already
 * durable here. Written by the active cluster manager (created at placement; primary changes,
 * each bumping `epoch`) and by the primary's agent (a copy falls out of sync, or rejoins after
 * its resync), always by compare-and-swap on the key's mod_revision.
 */
export interface ReplicaSetRecord {
  volumeUUID: string;
  /** Bumped on every change of primary; replicas admit only the current primary. */
  epoch: number;
  primaryNodeUUID: string;
  /** Nodes of the nodeList whose copy has every acknowledged write (the primary's included). */
  inSync: string[];
  /** Why inSync or the primary last changed. */
  reason: string;
  /**
   * The size in bytes every host path of the volume may show: the primary raises it once its own
   * path serves a grown volume, and replicas grow their fences (their inaccessible paths) to it
   * only then, so a host never learns a size through a replica before the primary serves it (a
   * multipath host takes the size of whichever path it read last). Absent in sets written before
   * it existed: replicas then show the volume's size, and the primary writes it on its next pass.
   */
  hostSizeBytes?: string;
  /**
   * Why the current epoch began (created, a failover, a hand-over): kept while the in-sync set
   * changes within the epoch, which rewrites `reason` (a new primary may record a copy out of sync
   * before the leader has read how it became primary). Absent in sets written before it existed.
   */
  epochReason?: string;
  /** The protection state the leader last announced with an event (Unknown at first). */
  announced: 'Unknown' | 'FullyProtected' | 'Degraded' | 'ReadOnly' | 'NotAvailable';
  /** Copies whose resync start the leader announced (VolumeRebuildStarted), until they rejoin. */
  announcedResyncing?: string[];
  /** Copies the leader saw out of sync; announced with VolumeRebuildCompleted when they rejoin. */
  seenOutOfSync?: string[];
  updatedAt: string;
}

/** One copy of a replicated volume, as the primary's agent needs it. */
export interface ReplicaLeg {
  nodeUUID: string;
  /** host:port of the node's replication listener ('' while unknown). */
  endpoint: string;
  inSync: boolean;
}

/** The replication part of a VolumeAssignment (null for a single copy). */
export interface AssignmentReplication {
  epoch: number;
  primaryNodeUUID: string;
  /** The host NQN the primary connects to replicas with; the only host a replica admits. */
  primaryHostNQN: string;
  /** Every node of the nodeList, in nodeList order. */
  legs: ReplicaLeg[];
  /** The replica set's `hostSizeBytes`, when it has one: the size a replica's fence shows. */
  hostSizeBytes?: string;
}

/** /strata/snapshots/<UUID> (project-scoped; names unique per project). */
export interface SnapshotRecord {
  UUID: string;
  name: string;
  projectName: string;
  description: string;
  sourceVolumeUUID: string;
  sourceVolumeName: string;
  /** Copied from the volume when taken. */
  sizeBytes: string;
  compression: boolean;
  sectorSize: 512 | 4096;
  labels: Label[];
  state: 'Creating' | 'Available' | 'Deleting' | 'Failed';
  failureReason: string;
  /** Seconds the snapshot is kept after creation; 0 = forever. */
  retentionSeconds: number;
  creationTime: string;
}

/**
 * /strata/assignments/<nodeUUID>/<volumeUUID>: what one node must serve for one volume.
 * Written only by the active cluster manager (fenced); the node's agent watches its prefix.
 */
export interface VolumeAssignment {
  volumeUUID: string;
  nodeUUID: string;
  /** The volume generation this assignment reflects. */
  generation: number;
  sizeBytes: string;
  compression: boolean;
  sectorSize: 512 | 4096;
  acl: AclEntry[];
  ipAcl: string[];
  /** nqn of the volume's subsystem: `<cluster subsystemNQN>:vol:<volume UUID>`. */
  subsystemNQN: string;
  nsid: number;
  port: number;
  role: 'primary' | 'replica';
  anaState: 'optimized' | 'inaccessible';
  /** Controller-ID window of this node (disjoint per node, for multipath). */
  cntlidMin: number;
  cntlidMax: number;
  /** Clone: create the backing from this snapshot (on this node) instead of empty. */
  cloneFromSnapshotUUID: string;
  /** Snapshots of this volume that must exist on this node. */
  snapshotUUIDs: string[];
  /** Rollback: replace the volume's data with this snapshot's, then report the generation. */
  rollbackSnapshotUUID: string;
  /** Replicated volumes: the replica set as this node must act on it; absent or null for one copy. */
  replication?: AssignmentReplication | null;
  /**
   * The volume's effective QoS limits (its policy, else its project's default, scaled by its size:
   * lib/contract/qos.ts), the same on every node's assignment of the volume; null (or absent, in
   * assignments written before it) or all zero when no policy applies. A policy change rewrites it
   * without bumping `generation` (docs/policies.md). Only the primary enforces them (docs/datapath.md, "QoS").
   */
  qos?: QosLimits | null;
}

/**
 * How a connection's host NQN is known (docs/connected-hosts.md): `acl`, the volume's ACL admits
 * exactly one host, so the kernel admitted no other; `discovery`, the one NQN (that the ACL
 * admits) a host presented to this node's discovery controller from the connection's address;
 * `''`, not known (hostNQN is ''). Reports from agents before this field have none: `''`.
 */
export type HostNqnSource = 'acl' | 'discovery' | '';

/** One live NVMe/TCP connection (its peer address) to a volume on a node. */
export interface ConnectedHostReport {
  hostNQN: string;
  address: string;
  hostNQNSource?: HostNqnSource;
}

/** /strata/volume-status/<volumeUUID>/<nodeUUID>: what the node's agent last reported. */
export interface VolumeStatusRecord {
  volumeUUID: string;
  nodeUUID: string;
  /** The assignment generation the node has applied. */
  generation: number;
  /** Served: exported and reachable; Failed: could not apply (see error); Absent: torn down. */
  state: 'Served' | 'Failed' | 'Absent';
  error: string;
  /** Snapshots present on the node, with their state. */
  snapshots: { snapshotUUID: string; state: 'Available' | 'Failed'; error: string }[];
  connectedHosts: ConnectedHostReport[];
  logicalUsedBytes: string;
  physicalUsedBytes: string;
  /** From a replicated volume's primary: every copy as it sees it (absent elsewhere). */
  replicaLegs?: ReplicaLegState[];
  /**
   * What hosts wrote through this node's device-mapper device of a replicated volume, kept by the
   * control plane across restarts of the device's counter (control-plane/agents/user-written.ts).
   * Absent for a node that never reported one (single-copy volumes, replicas never primary).
   */
  userWritten?: UserWrittenCount;
  /**
   * From the volume's primary, when its assignment has QoS limits (not all zero): whether the I/O
   * path enforces exactly these limits there (`limits`: what it applied). `reason` names the node
   * when NotEnforced (a kernel without ublk, a single-copy volume served straight from its file).
   * Absent: no limits to enforce, or an agent that does not report it.
   */
  qos?: VolumeQosStatus;
  reportedAt: string;
}

/**
 * A policy's enforcement on the node that serves the volume's I/O. `Enforced` only while the
 * node's strata-ublk server runs with exactly `limits` and the volume's device-mapper table points
 * at its device; otherwise `NotEnforced`, and `reason` (one sentence naming the node) says why;
 * '' when Enforced.
 */
export interface VolumeQosStatus {
  state: 'Enforced' | 'NotEnforced';
  reason: string;
  limits: QosLimits;
}

/**
 * A volume's bytes written on one node, from the block layer's counter of its device-mapper
 * device (docs/api.md "Measured and not measured"): `base` is what earlier instances of the
 * device counted, `last` what the current one (`device`) counted at the last report. Byte counts
 * are decimal strings.
 */
export interface UserWrittenCount {
  device: string;
  base: string;
  last: string;
  /** Earlier instances (latest last, a few): a late report of one of them is not a new device. */
  retired: string[];
}

/** A copy of a replicated volume as its primary sees it. */
export interface ReplicaLegState {
  nodeUUID: string;
  state: 'InSync' | 'Resyncing' | 'OutOfSync' | 'Unreachable';
  /** md's resync progress, 0-100 (100 when InSync). */
  syncPercent: number;
}

/** State of one device in a node's storage pool (spec 2.13 `state`). */
export type PoolDeviceState = 'Healthy' | 'Adding' | 'Rebuilding' | 'Failed';

/**
 * /strata/node-pools/<nodeUUID>: the node's storage pool as its agent last measured it (md array
 * + btrfs; docs/datapath.md). Written by the control plane from the agent's gRPC PoolReport.
 */
export interface NodePoolRecord {
  nodeUUID: string;
  serverUUID: string;
  state: 'Ready' | 'Growing' | 'Rebuilding' | 'Degraded' | 'Failed';
  error: string;
  /** md level of the array (raid0, raid1, raid5, raid6; raid4 while a raid0 grows). */
  level: string;
  /** The journal device is the array's md write journal. */
  journal: boolean;
  /** Raw bytes of the data devices in the array. */
  rawBytes: string;
  /** The md array's size: parity excluded. */
  arrayBytes: string;
  /** What volumes can use: data on the filesystem plus its estimated free space. */
  capacityBytes: string;
  freeBytes: string;
  /** Sum of the volume backings' sizes (thin: provisioned, not used). */
  provisionedBytes: string;
  /** Allocated bytes of volumes and snapshots before compression (shared extents count per file). */
  logicalUsedBytes: string;
  /** Data on the array after compression and sharing. */
  physicalUsedBytes: string;
  physicalUsedIncludingParityBytes: string;
  /** Progress of a running reshape, resync or recovery (0 when none). */
  rebuildProgressPercent: number;
  devices: {
    serial: string;
    role: 'data' | 'journal';
    state: PoolDeviceState;
    sizeBytes: string;
    error: string;
    /** When the device entered `state` (as far as the control plane saw). */
    stateSince: string;
    /** When the device last became Healthy after Adding or Rebuilding ('' never). */
    rebuildCompletedAt: string;
    /** md's corrected read errors of the member (decimal); absent: not measured. */
    recoverableIntegrityErrors?: string;
  }[];
  measuredAt: string;
  reportedAt: string;
  /** md's corrected read errors, all members (decimal); absent: not measured (docs/api.md). */
  recoverableIntegrityErrors?: string;
  /** btrfs' read, corruption and generation errors (decimal); absent: not measured. */
  unrecoverableIntegrityErrors?: string;
}

/** /strata/admin-endpoints/<port>: which addresses may reach an administrative TCP port; written by the API, enforced by every agent (nftables). */
export interface AdminEndpointRecord {
  port: number;
  ips: string[];
  createdAt: string;
}

/** /strata/nvme-tcp-tls/hosts/<name>: a host that may connect over TLS, its configured PSK encrypted. */
export interface TlsHostRecord {
  UUID: string;
  name: string;
  hostNQN: string;
  /** `NVMeTLSkey-1:..` (the host connects with `nvme connect --tls --tls-key=<it>`). */
  psk: SecretCiphertext;
  createdAt: string;
  pskUpdatedAt: string;
}
