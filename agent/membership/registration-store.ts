// etcd writes of the agent's join: the persistent server and node records (RegistrationStore; the
// presence key under the agent's lease is presence-store.ts's). Both records are shared with the
// control plane, which owns some of their fields (names, device assignment, ec, createdAt). The
// agent creates a record when absent and afterwards rewrites only the fields it owns, with a
// compare on mod_revision so a concurrent control-plane edit is never overwritten: on conflict it
// re-reads and merges again.
import { hostPort } from '../../lib/endpoints.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import type { NodeRecord, ServerRecord } from '../../lib/records.js';
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

/** What Membership writes besides presence (presence-store.ts): the server and node records. */
export class RegistrationStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  registerServer(facts: RegistrationFacts): Promise<UpsertOutcome> {
    return registerServerRecord(this.kv, facts);
  }

  registerNodes(facts: RegistrationFacts): Promise<UpsertOutcome[]> {
    return registerNodeRecords(this.kv, facts);
  }
}

export function nodeName(hostname: string, index: number, nodeCount: number): string {
  return nodeCount === 1 ? hostname : `${hostname}-${index}`;
}

async function registerServerRecord(kv: Kv, facts: RegistrationFacts, now = new Date()): Promise<UpsertOutcome> {
  return upsertRecord<ServerRecord>(
    kv,
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

async function registerNodeRecords(kv: Kv, facts: RegistrationFacts, now = new Date()): Promise<UpsertOutcome[]> {
  const outcomes: UpsertOutcome[] = [];
  // A server added with extendCluster false (POST /api/v2/servers): its nodes join Unattached.
  const serverKey = keys.server(facts.serverUUID);
  const server = parseRecord<ServerRecord>(serverKey, (await kv.get(serverKey))?.value ?? null);
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
        kv,
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
 * differs. Compare-and-swap on the key's mod_revision ('0': still absent); retried on conflict.
 */
async function upsertRecord<T extends object>(
  kv: Kv,
  key: string,
  create: () => T,
  merge: (existing: T) => T,
  maxAttempts = 10,
): Promise<UpsertOutcome> {
  return retryLostRaces<UpsertOutcome>(maxAttempts, async () => {
    const stored = await kv.get(key);
    if (!stored) {
      const result = await kv.commit({ guards: [{ key, revision: '0' }], writes: [{ put: key, value: create() }] });
      return result.succeeded ? 'created' : LOST_RACE;
    }
    const existing = parseRecord<T>(key, stored.value);
    if (existing === null) throw new Error(`record at ${key} is empty`);
    const merged = merge(existing);
    if (sameJson(existing, merged)) return 'unchanged';
    const result = await kv.commit({ guards: [{ key, revision: stored.modRevision }], writes: [{ put: key, value: merged }] });
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
