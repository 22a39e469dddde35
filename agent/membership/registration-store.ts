// etcd writes of the agent's join: the persistent server and node records, and the presence key
// under the agent's lease (RegistrationStore). Both records are
// shared with the control plane, which owns some of their fields (names, device assignment,
// ec, createdAt). The agent creates a record when absent and afterwards rewrites only the
// fields it owns, with a compare on mod_revision so a concurrent control-plane edit is never
// overwritten: on conflict it re-reads and merges again.
import { hostPort } from '../../lib/endpoints.js';
import type { Etcd3, Lease } from 'etcd3';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { NodeRecord, PresenceRecord, ServerRecord } from '../../lib/records.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';

export interface RegistrationFacts {
  readonly serverUUID: string;
  readonly nodeUUIDs: readonly string[];
  readonly hostname: string;
  readonly advertiseAddress: string;
  /** Port of the NVMe/TCP endpoint this node advertises to hosts (its discovery controller), or undefined while nothing listens. */
  readonly nvmePort: number | undefined;
  /** Port of the discovery controller this agent serves, or undefined while it serves none. */
  readonly discoveryPort: number | undefined;
  /** host:port other nodes reach this server's replication port at ('' when it serves none). */
  readonly replicationEndpoint?: string;
  readonly failureDomain: string;
  readonly maxNvmeDevices: number;
  /** Initial managedDeviceSerials of the first node (the control plane owns them afterwards). */
  readonly dataDevices: readonly string[];
  /** Initial journal device of the first node, '' for none. */
  readonly journalDevice: string;
}

export type UpsertOutcome = 'created' | 'updated' | 'unchanged';

/**
 * One etcd lease of the agent and the presence key bound to it (etcd3's Lease: it keeps itself
 * alive; `lost` when etcd ends it or it could not be renewed within the TTL).
 */
export interface PresenceLease {
  /** Grants the lease; its ID (a decimal string). */
  grant(): Promise<string>;
  /** Writes the server's presence key under this lease. */
  putPresence(record: PresenceRecord): Promise<void>;
  /** Whether the lease was revoked or lost. */
  revoked(): boolean;
  /** Revokes the lease (its presence key goes at once); rejects past `deadline` (epoch ms). */
  revoke(deadline: number): Promise<void>;
  /** Stops keeping it alive without revoking it (it expires with the TTL). */
  release(): void;
  onLost(listener: (err: Error) => void): void;
  /** Every acknowledged keep-alive. */
  onRenewed(listener: () => void): void;
}

/** What Membership writes: the server and node records, and presence under a lease. */
export class RegistrationStore {
  constructor(private readonly etcd: Etcd3) {}

  lease(ttlSeconds: number): PresenceLease {
    return presenceLease(this.etcd.lease(ttlSeconds));
  }

  registerServer(facts: RegistrationFacts): Promise<UpsertOutcome> {
    return registerServerRecord(this.etcd, facts);
  }

  registerNodes(facts: RegistrationFacts): Promise<UpsertOutcome[]> {
    return registerNodeRecords(this.etcd, facts);
  }
}

function presenceLease(lease: Lease): PresenceLease {
  return {
    grant: () => lease.grant(),
    putPresence: async (record) => void (await lease.put(keys.presence(record.serverUUID)).value(JSON.stringify(record))),
    revoked: () => lease.revoked(),
    revoke: (deadline) => lease.revoke({ deadline }),
    release: () => lease.release(),
    onLost: (listener) => void lease.on('lost', listener),
    onRenewed: (listener) => void lease.on('keepaliveSucceeded', () => listener()),
  };
}


export function nodeName(hostname: string, index: number, nodeCount: number): string {
  return nodeCount === 1 ? hostname : `${hostname}-${index}`;
}

export async function registerServerRecord(etcd: Etcd3, facts: RegistrationFacts, now = new Date()): Promise<UpsertOutcome> {
  return upsertRecord<ServerRecord>(
    etcd,
    keys.server(facts.serverUUID),
    () => ({
      UUID: facts.serverUUID,
      name: facts.hostname,
      hostname: facts.hostname,
      nodeUUIDs: [...facts.nodeUUIDs],
      endpoints: [facts.advertiseAddress],
      createdAt: now.toISOString(),
    }),
    (existing) => ({
      ...existing,
      // A server added through POST /api/v2/servers has no name until its agent joins.
      name: existing.name || facts.hostname,
      hostname: facts.hostname,
      // The server may carry more nodes than configured now (nodesPerServer lowered); never
      // forget a node the cluster knows: its volumes still name it.
      nodeUUIDs: [...existing.nodeUUIDs, ...facts.nodeUUIDs.filter((u) => !existing.nodeUUIDs.includes(u))],
      endpoints: [facts.advertiseAddress],
    }),
  );
}

export async function registerNodeRecords(etcd: Etcd3, facts: RegistrationFacts, now = new Date()): Promise<UpsertOutcome[]> {
  const outcomes: UpsertOutcome[] = [];
  // A server added with extendCluster false (POST /api/v2/servers): its nodes join Unattached.
  const server = parseRecord<ServerRecord>(keys.server(facts.serverUUID), (await etcd.get(keys.server(facts.serverUUID)).string()) ?? null);
  const unattached = server?.added?.extendCluster === false;
  for (const [index, nodeUUID] of facts.nodeUUIDs.entries()) {
    const agentOwned = {
      serverUUID: facts.serverUUID,
      hostname: facts.hostname,
      // Only endpoints something listens on: the API hands these to hosts.
      nvmeEndpoint: facts.nvmePort === undefined ? '' : hostPort(facts.advertiseAddress, facts.nvmePort),
      discoveryEndpoint: facts.discoveryPort === undefined ? '' : hostPort(facts.advertiseAddress, facts.discoveryPort),
      replicationEndpoint: facts.replicationEndpoint ?? '',
      failureDomains: [facts.failureDomain],
      maxNvmeDevices: facts.maxNvmeDevices,
    };
    outcomes.push(
      await upsertRecord<NodeRecord>(
        etcd,
        keys.node(nodeUUID),
        () => ({
          UUID: nodeUUID,
          name: nodeName(facts.hostname, index, facts.nodeUUIDs.length),
          ...agentOwned,
          // A device belongs to one node: the configured devices go to the first node; the
          // control plane moves them (POST /nvmeDevices) once the nodes exist.
          managedDeviceSerials: index === 0 ? [...facts.dataDevices] : [],
          journalDeviceSerial: index === 0 ? facts.journalDevice : '',
          ec: false,
          createdAt: now.toISOString(),
          ...(unattached ? { unattached: true } : {}),
        }),
        (existing) => ({ ...existing, ...agentOwned }),
      ),
    );
  }
  return outcomes;
}

/**
 * Creates the record at `key` when absent, else replaces it with merge(existing) when that
 * differs. Compare-and-swap on create_revision / mod_revision; retried on conflict.
 */
export async function upsertRecord<T extends object>(
  etcd: Etcd3,
  key: string,
  create: () => T,
  merge: (existing: T) => T,
  maxAttempts = 10,
): Promise<UpsertOutcome> {
  return retryLostRaces<UpsertOutcome>(maxAttempts, async () => {
    const response = await etcd.get(key).exec();
    const kv = response.kvs[0];
    if (!kv) {
      const result = await etcd
        .if(key, 'Create', '==', 0)
        .then(etcd.put(key).value(JSON.stringify(create())))
        .commit();
      return result.succeeded ? 'created' : LOST_RACE;
    }
    const existing = parseRecord<T>(key, kv.value);
    if (existing === null) throw new Error(`record at ${key} is empty`);
    const merged = merge(existing);
    if (sameJson(existing, merged)) return 'unchanged';
    const result = await etcd
      .if(key, 'Mod', '==', kv.mod_revision)
      .then(etcd.put(key).value(JSON.stringify(merged)))
      .commit();
    return result.succeeded ? 'updated' : LOST_RACE;
  }, () => new Error(`${key} kept changing under ${maxAttempts} attempts to update it`));
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

/** Key order must not count as a change (the control plane may write fields in another order). */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}
