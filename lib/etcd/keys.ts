// The etcd key layout, in one place. docs/etcd-keys.md describes each key; keep them in step.
// Values are JSON records (lib/records.ts). Keys never carry user-chosen free text except
// names whose charset the API restricts (project names, credential names).

export const ROOT = '/strata/';

export const keys = {
  /** The cluster record; created exactly once by bootstrap. */
  cluster: () => `${ROOT}cluster`,
  /** Bootstrap marker written in the same transaction as the cluster record. */
  bootstrap: () => `${ROOT}bootstrap`,
  /** The secret agent tokens are signed with (current and previous); created once, rotated by CAS. */
  agentSecret: () => `${ROOT}agent-secret`,
  /** The cluster CA (certificate and private key): created with the cluster, or once by the first control plane that finds none. */
  clusterCa: () => `${ROOT}cluster-ca`,

  projectsPrefix: () => `${ROOT}projects/`,
  project: (name: string) => `${ROOT}projects/${name}`,

  credentialsPrefix: (project?: string) => (project ? `${ROOT}credentials/${project}/` : `${ROOT}credentials/`),
  credential: (project: string, name: string) => `${ROOT}credentials/${project}/${name}`,

  /** Persistent server identity, written by its agent at join. */
  serversPrefix: () => `${ROOT}servers/`,
  server: (serverUUID: string) => `${ROOT}servers/${serverUUID}`,
  /** Facts the agent reports over gRPC, persisted by the control plane. */
  serverFactsPrefix: () => `${ROOT}server-facts/`,
  serverFacts: (serverUUID: string) => `${ROOT}server-facts/${serverUUID}`,

  /** Persistent node identity and configuration, written by its agent at join. */
  nodesPrefix: () => `${ROOT}nodes/`,
  node: (nodeUUID: string) => `${ROOT}nodes/${nodeUUID}`,

  /** The command an administrator last gave a node (stop/start/restart/replace): its desired run state. */
  nodeCommandsPrefix: () => `${ROOT}node-commands/`,
  nodeCommand: (nodeUUID: string) => `${ROOT}node-commands/${nodeUUID}`,
  /** What the node's agent did about it (Stopping, Stopped, Starting, Running), written by the agent. */
  nodeRunStatesPrefix: () => `${ROOT}node-run-states/`,
  nodeRunState: (nodeUUID: string) => `${ROOT}node-run-states/${nodeUUID}`,

  /** NVMe devices as reported by agents, keyed by serial. */
  devicesPrefix: () => `${ROOT}devices/`,
  device: (serial: string) => `${ROOT}devices/${encodeURIComponent(serial)}`,

  /** A node's storage pool as its agent measured it (capacity, usage, device states). */
  nodePoolsPrefix: () => `${ROOT}node-pools/`,
  nodePool: (nodeUUID: string) => `${ROOT}node-pools/${nodeUUID}`,

  /** Liveness: one key per server, bound to its agent's lease. Absent key = server's nodes Inactive. */
  presencePrefix: () => `${ROOT}presence/`,
  presence: (serverUUID: string) => `${ROOT}presence/${serverUUID}`,

  /** Control-plane instances, bound to each instance's lease. */
  controlPlanesPrefix: () => `${ROOT}control-planes/`,
  controlPlane: (instanceId: string) => `${ROOT}control-planes/${instanceId}`,

  /** Which control plane holds each server's agent session, bound to that control plane's lease. */
  agentSessionsPrefix: () => `${ROOT}agent-sessions/`,
  agentSession: (serverUUID: string) => `${ROOT}agent-sessions/${serverUUID}`,

  /** The active cluster manager, bound to the leader's lease. Leader-only writes compare it. */
  leader: () => `${ROOT}leader`,

  /** What the membership-events controller last reported per node, server and device. */
  membershipEventsPrefix: () => `${ROOT}membership-events/`,
  membershipEventNode: (nodeUUID: string) => `${ROOT}membership-events/nodes/${nodeUUID}`,
  membershipEventServer: (serverUUID: string) => `${ROOT}membership-events/servers/${serverUUID}`,
  membershipEventDevice: (serial: string) => `${ROOT}membership-events/devices/${encodeURIComponent(serial)}`,

  eventsPrefix: () => `${ROOT}events/`,
  event: (id: string) => `${ROOT}events/${id}`,

  volumesPrefix: () => `${ROOT}volumes/`,
  volume: (uuid: string) => `${ROOT}volumes/${uuid}`,
  /** Name index, unique per project; deleted when the volume starts Deleting (name free at once). */
  volumeNamesPrefix: (project?: string) => (project ? `${ROOT}volume-names/${project}/` : `${ROOT}volume-names/`),
  volumeName: (project: string, name: string) => `${ROOT}volume-names/${project}/${name}`,
  /** Allocations owned by a volume: nsid and TCP port, each unique cluster-wide. */
  nsidsPrefix: () => `${ROOT}nsids/`,
  nsid: (nsid: number) => `${ROOT}nsids/${String(nsid).padStart(10, '0')}`,
  volumePortsPrefix: () => `${ROOT}volume-ports/`,
  volumePort: (port: number) => `${ROOT}volume-ports/${String(port).padStart(5, '0')}`,
  assignmentsPrefix: (nodeUUID?: string) => (nodeUUID ? `${ROOT}assignments/${nodeUUID}/` : `${ROOT}assignments/`),
  assignment: (nodeUUID: string, volumeUUID: string) => `${ROOT}assignments/${nodeUUID}/${volumeUUID}`,
  /** Replicated volumes: epoch, primary and in-sync copies (ReplicaSetRecord). */
  replicaSetsPrefix: () => `${ROOT}replica-sets/`,
  replicaSet: (volumeUUID: string) => `${ROOT}replica-sets/${volumeUUID}`,
  volumeStatusPrefix: (volumeUUID?: string) => (volumeUUID ? `${ROOT}volume-status/${volumeUUID}/` : `${ROOT}volume-status/`),
  volumeStatus: (volumeUUID: string, nodeUUID: string) => `${ROOT}volume-status/${volumeUUID}/${nodeUUID}`,

  snapshotsPrefix: () => `${ROOT}snapshots/`,
  snapshot: (uuid: string) => `${ROOT}snapshots/${uuid}`,
  snapshotNamesPrefix: (project?: string) => (project ? `${ROOT}snapshot-names/${project}/` : `${ROOT}snapshot-names/`),
  snapshotName: (project: string, name: string) => `${ROOT}snapshot-names/${project}/${name}`,

  policiesPrefix: () => `${ROOT}policies/`,
  policy: (uuid: string) => `${ROOT}policies/${uuid}`,
  policyName: (name: string) => `${ROOT}policy-names/${name}`,

  featureFlagsPrefix: () => `${ROOT}feature-flags/`,
  featureFlag: (name: string) => `${ROOT}feature-flags/${name}`,

  /** The last etcd corruption scan asked for (POST /cluster/etcdCorruption/scan), and the last scan's result. */
  etcdCorruptionScanRequest: () => `${ROOT}etcd-corruption/scan-request`,
  etcdCorruptionStatus: () => `${ROOT}etcd-corruption/status`,

  /** In-band authentication (docs/in-band-auth.md): trusted hosts per project, each host NQN once. */
  trustedHostsPrefix: (project?: string) => (project ? `${ROOT}in-band-auth/hosts/${project}/` : `${ROOT}in-band-auth/hosts/`),
  trustedHost: (project: string, name: string) => `${ROOT}in-band-auth/hosts/${project}/${name}`,
  trustedHostNqn: (hostNQN: string) => `${ROOT}in-band-auth/host-nqns/${encodeURIComponent(hostNQN)}`,
  /** Bumped by every in-band authentication change: they are serialized on its revision. */
  inBandAuthGeneration: () => `${ROOT}in-band-auth/generation`,
  /** Which host-secret key the stored secrets are sealed with (its id, never the key). */
  hostSecretKeyId: () => `${ROOT}in-band-auth/key-id`,
  /** Each server's published X25519 key, and the host keys sealed to it. */
  serverBoxKeysPrefix: () => `${ROOT}in-band-auth/server-keys/`,
  serverBoxKey: (serverUUID: string) => `${ROOT}in-band-auth/server-keys/${serverUUID}`,
  serverHostKeysPrefix: () => `${ROOT}in-band-auth/servers/`,
  serverHostKeys: (serverUUID: string) => `${ROOT}in-band-auth/servers/${serverUUID}`,

  /**
   * TLS on NVMe/TCP (docs/nvme-tcp-tls.md): the cluster's switch, TLS hosts (each host NQN once)
   * and their PSKs sealed to each server; serialized like in-band authentication, with the same
   * host-secret key and server box keys.
   */
  nvmeTcpTlsSwitch: () => `${ROOT}nvme-tcp-tls/switch`,
  nvmeTcpTlsGeneration: () => `${ROOT}nvme-tcp-tls/generation`,
  tlsHostsPrefix: () => `${ROOT}nvme-tcp-tls/hosts/`,
  tlsHost: (name: string) => `${ROOT}nvme-tcp-tls/hosts/${name}`,
  tlsHostNqn: (hostNQN: string) => `${ROOT}nvme-tcp-tls/host-nqns/${encodeURIComponent(hostNQN)}`,
  serverTlsKeysPrefix: () => `${ROOT}nvme-tcp-tls/servers/`,
  serverTlsKeys: (serverUUID: string) => `${ROOT}nvme-tcp-tls/servers/${serverUUID}`,

  adminEndpointsPrefix: () => `${ROOT}admin-endpoints/`,
  adminEndpoint: (port: number) => `${ROOT}admin-endpoints/${String(port).padStart(5, '0')}`,
};

/** The last path segment of a key (the record's id). */
export function idOfKey(key: string): string {
  return decodeURIComponent(key.slice(key.lastIndexOf('/') + 1));
}
