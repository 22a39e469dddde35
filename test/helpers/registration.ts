// What the agent's join registers (agent/membership/registration-store.ts), for the suites of the
// registration store and of Membership on top of it.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { RegistrationFacts } from '../../agent/membership/registration-store.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../lib/etcd/kv.js';
import type { NodeRecord, ServerRecord } from '../../lib/records.js';
import { putRecord } from './records.js';

/** Two data devices and a journal, on new server and node UUIDs. */
export function registrationFacts(overrides: Partial<RegistrationFacts> = {}): RegistrationFacts {
  return {
    serverUUID: randomUUID(),
    nodeUUIDs: [randomUUID()],
    hostname: 'storage-1',
    advertiseAddress: '10.0.0.1',
    nvmePort: 4420,
    discoveryPort: 8009,
    failureDomain: 'rack-1',
    maxNvmeDevices: 32,
    dataDevices: ['SER-A', 'SER-B'],
    journalDevice: 'SER-J',
    ...overrides,
  };
}

export const readRecord = async <T>(client: KvClient, key: string): Promise<T | null> => parseRecord<T>(key, (await kvOf(client).get(key))?.value ?? null);

/** The server and two node records as the first registration of `facts` (two nodes, 'storage-1' at 10.0.0.1) creates them. */
export async function assertFirstRegistration(client: KvClient, facts: RegistrationFacts): Promise<void> {
  const server = await readRecord<ServerRecord>(client, keys.server(facts.serverUUID));
  assert.deepEqual({ ...server, createdAt: undefined }, {
    UUID: facts.serverUUID,
    name: 'storage-1',
    hostname: 'storage-1',
    nodeUUIDs: facts.nodeUUIDs,
    endpoints: ['10.0.0.1'],
    createdAt: undefined,
  });
  const [first, second] = await Promise.all(facts.nodeUUIDs.map((u) => readRecord<NodeRecord>(client, keys.node(u))));
  assert.equal(first?.serverUUID, facts.serverUUID);
  assert.equal(first?.name, 'storage-1-0');
  assert.equal(first?.nvmeEndpoint, '10.0.0.1:4420');
  assert.equal(first?.discoveryEndpoint, '10.0.0.1:8009');
  assert.deepEqual(first?.failureDomains, ['rack-1']);
  assert.deepEqual(first?.managedDeviceSerials, ['SER-A', 'SER-B']);
  assert.equal(first?.journalDeviceSerial, 'SER-J');
  assert.equal(first?.maxNvmeDevices, 32);
  assert.equal(first?.ec, false);
  assert.deepEqual(second?.managedDeviceSerials, [], 'a device belongs to one node: the first');
  assert.equal(second?.name, 'storage-1-1');
}

/**
 * Between two registrations of `facts`: the control plane renames the first node, reassigns its
 * devices and enables ec; the record as the first registration created it.
 */
export async function editAsControlPlane(client: KvClient, facts: RegistrationFacts): Promise<NodeRecord> {
  const nodeKey = keys.node(facts.nodeUUIDs[0]!);
  const created = (await readRecord<NodeRecord>(client, nodeKey))!;
  await putRecord(client, nodeKey, { ...created, name: 'renamed', managedDeviceSerials: ['SER-Z'], ec: true });
  return created;
}

/** The same server registering again with another hostname, address, failure domain and devices. */
export function movedFacts(facts: RegistrationFacts): RegistrationFacts {
  return registrationFacts({ ...facts, hostname: 'storage-1b', advertiseAddress: '10.0.0.2', failureDomain: 'rack-2', dataDevices: ['SER-Q'] });
}

/** After movedFacts registered: the agent-owned fields rewritten, the control plane's (editAsControlPlane) kept. */
export async function assertReRegistered(client: KvClient, facts: RegistrationFacts, created: NodeRecord): Promise<void> {
  const updated = await readRecord<NodeRecord>(client, keys.node(facts.nodeUUIDs[0]!));
  assert.deepEqual(updated, {
    ...created,
    name: 'renamed',
    managedDeviceSerials: ['SER-Z'],
    ec: true,
    hostname: 'storage-1b',
    nvmeEndpoint: '10.0.0.2:4420',
    discoveryEndpoint: '10.0.0.2:8009',
    failureDomains: ['rack-2'],
  });
  const server = await readRecord<ServerRecord>(client, keys.server(facts.serverUUID));
  assert.equal(server?.hostname, 'storage-1b');
  assert.equal(server?.name, 'storage-1', 'name is kept after creation');
  assert.deepEqual(server?.endpoints, ['10.0.0.2']);
}
