// The stores of what agents report (inventory, pools, volume states) and the connected hosts'
// read, run twice: on a real etcd (the integration layer) and on the in-memory fake
// (test/fakes/memory-etcd.ts). A concurrent writer let in between a save's read and its guarded
// commit (MemoryEtcd.interleave), which a real etcd gives only by chance, runs on the fake alone.
// The gRPC side of the reports (agent-grpc-server.test.ts) stays on etcd.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../lib/etcd/kv.js';
import type { DeviceRecord, NodePoolRecord, ServerFactsRecord, VolumeStatusRecord } from '../../lib/records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { describeOnEveryBackend, racing } from '../../test/helpers/kv-backends.js';
import { deviceRecord, factsRecord, joinServer, markAbsent, nodePoolRecord, nodeRecord, putRecord, volumeRecord } from '../../test/helpers/records.js';
import { ConnectedHostsStore } from '../connected-hosts/connected-hosts-store.js';
import { InventoryStore } from './inventory-store.js';
import { NodePoolStore, type ReportedPool } from './node-pool-store.js';
import { VolumeStatusStore, type ReportedVolumeStatus } from './volume-status-store.js';

const read = async <T>(client: KvClient, key: string): Promise<(T & { revision: string }) | null> => {
  const stored = await kvOf(client).get(key);
  const record = stored && parseRecord<T>(key, stored.value);
  return record ? { ...record, revision: stored.modRevision } : null;
};

const devicesOf = async (client: KvClient, serverUUID: string): Promise<DeviceRecord[]> =>
  (await kvOf(client).range(keys.devicesPrefix()))
    .map((kv) => JSON.parse(kv.value.toString()) as DeviceRecord)
    .filter((d) => d.serverUUID === serverUUID)
    .sort((a, b) => a.serial.localeCompare(b.serial));

/** A pool as a report brings it: the devices with their states, no history yet. */
function reportedPool(nodeUUID: string, devices: Record<string, 'Healthy' | 'Adding'>, overrides: Partial<ReportedPool> = {}): ReportedPool {
  const { devices: _, ...pool } = nodePoolRecord(nodeRecord({ serverUUID: randomUUID(), UUID: nodeUUID }));
  const reportedAt = new Date().toISOString();
  return {
    ...pool,
    reportedAt,
    devices: Object.entries(devices).map(([serial, state]) => ({ serial, role: 'data', state, sizeBytes: '1000', error: '' })),
    ...overrides,
  };
}

function volumeStatus(volumeUUID: string, nodeUUID: string, written?: { bytes: string; device: string }): ReportedVolumeStatus {
  return {
    volumeUUID, nodeUUID, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [],
    logicalUsedBytes: '0', physicalUsedBytes: '0', reportedAt: new Date().toISOString(), ...(written ? { written } : {}),
  };
}

describeOnEveryBackend('report stores', (suite) => {

  test('inventory: facts and devices saved; a later report marks the server\'s vanished devices not present, leaves other servers\' alone, and does not rewrite an unchanged device', async () => {
    const [serverUUID, otherServer] = [randomUUID(), randomUUID()];
    const store = new InventoryStore(suite.client);
    await putRecord(suite.client, keys.device(`${otherServer}-X`), deviceRecord({ serial: `${otherServer}-X`, serverUUID: otherServer }));
    const [sn1, sn2] = [`${serverUUID}-1`, `${serverUUID}-2`];
    await store.save(serverUUID, { facts: factsRecord({ serverUUID, hostname: 'h1' }), devices: [deviceRecord({ serial: sn1, serverUUID }), deviceRecord({ serial: sn2, serverUUID })] });
    assert.equal((await read<ServerFactsRecord>(suite.client, keys.serverFacts(serverUUID)))?.hostname, 'h1');
    assert.deepEqual((await devicesOf(suite.client, serverUUID)).map((d) => [d.serial, d.present]), [[sn1, true], [sn2, true]]);

    const later = factsRecord({ serverUUID, hostname: 'h1', reportedAt: new Date(Date.now() + 1000).toISOString() });
    await store.save(serverUUID, { facts: later, devices: [deviceRecord({ serial: sn1, serverUUID, sizeBytes: '2000' })] });
    assert.deepEqual((await devicesOf(suite.client, serverUUID)).map((d) => [d.serial, d.present, d.sizeBytes]), [[sn1, true, '2000'], [sn2, false, '1000204886016']]);
    assert.equal((await read<DeviceRecord>(suite.client, keys.device(sn2)))?.reportedAt, later.reportedAt, 'found missing at the report\'s time');
    assert.equal((await read<DeviceRecord>(suite.client, keys.device(`${otherServer}-X`)))?.present, true, 'another server\'s device is not this report\'s');

    const before = (await read<DeviceRecord>(suite.client, keys.device(sn1)))?.revision;
    await store.save(serverUUID, { facts: later, devices: [deviceRecord({ serial: sn1, serverUUID, sizeBytes: '2000' })] });
    assert.equal((await read<DeviceRecord>(suite.client, keys.device(sn1)))?.revision, before, 'unchanged but for reportedAt: its ETag is stable');
  });

  test('pools: each device\'s history kept, a pool the agent no longer reports deleted, one changed only in its times not rewritten', async () => {
    const [node, otherNode] = [randomUUID(), randomUUID()];
    const store = new NodePoolStore(suite.client);
    const growing = reportedPool(node, { P1: 'Healthy', P2: 'Adding' }, { state: 'Growing' });
    await store.save([node, otherNode], [growing, reportedPool(otherNode, {})]);
    const first = await read<NodePoolRecord>(suite.client, keys.nodePool(node));
    assert.deepEqual(first?.devices.map((d) => [d.serial, d.state, d.stateSince, d.rebuildCompletedAt]), [['P1', 'Healthy', growing.reportedAt, ''], ['P2', 'Adding', growing.reportedAt, '']]);
    assert.ok(await read(suite.client, keys.nodePool(otherNode)));

    const ready = reportedPool(node, { P1: 'Healthy', P2: 'Healthy' }, { reportedAt: new Date(Date.now() + 1000).toISOString() });
    await store.save([node, otherNode], [ready]);
    const second = await read<NodePoolRecord>(suite.client, keys.nodePool(node));
    assert.equal(second?.devices.find((d) => d.serial === 'P2')?.rebuildCompletedAt, ready.reportedAt, 'Adding → Healthy: the time it finished');
    assert.equal(second?.devices.find((d) => d.serial === 'P1')?.stateSince, growing.reportedAt, 'unchanged state keeps its time');
    assert.equal(await read(suite.client, keys.nodePool(otherNode)), null, 'a pool the agent no longer reports is gone');

    await store.save([node, otherNode], [{ ...ready, measuredAt: 'later', reportedAt: 'later still' }]);
    assert.equal((await read<NodePoolRecord>(suite.client, keys.nodePool(node)))?.revision, second?.revision, 'only the times changed: not rewritten');
  });

  test('volume states: a complete report marks the node\'s unlisted volumes Absent (not other nodes\'), an unchanged one is not rewritten', async () => {
    const [node, otherNode, volumeA, volumeB] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    const store = new VolumeStatusStore(suite.client);
    await store.save([volumeStatus(volumeA, node), volumeStatus(volumeB, node), volumeStatus(volumeB, otherNode)], undefined);
    const served = await read<VolumeStatusRecord>(suite.client, keys.volumeStatus(volumeA, node));
    assert.equal(served?.state, 'Served');

    await store.save([volumeStatus(volumeA, node)], new Set([node]));
    assert.equal((await read<VolumeStatusRecord>(suite.client, keys.volumeStatus(volumeB, node)))?.state, 'Absent', 'not listed in a complete report: absent');
    assert.equal((await read<VolumeStatusRecord>(suite.client, keys.volumeStatus(volumeB, otherNode)))?.state, 'Served', 'another node\'s record is not this report\'s');
    assert.equal((await read<VolumeStatusRecord>(suite.client, keys.volumeStatus(volumeA, node)))?.revision, served?.revision, 'unchanged but for reportedAt: not rewritten');
  });

  test('two reports of one node racing (an agent between two control planes) lose no count and count none twice', async () => {
    const [node, volume] = [randomUUID(), randomUUID()];
    const store = new VolumeStatusStore(suite.client);
    await store.save([volumeStatus(volume, node, { bytes: '1000', device: 'd1' })], undefined);
    await Promise.all([store.save([volumeStatus(volume, node, { bytes: '10', device: 'd2' })], undefined), store.save([volumeStatus(volume, node, { bytes: '20', device: 'd2' })], new Set([node]))]);
    const c = (await read<VolumeStatusRecord>(suite.client, keys.volumeStatus(volume, node)))?.userWritten;
    assert.deepEqual(c && { base: c.base, last: c.last, retired: c.retired }, { base: '1000', last: '20', retired: ['d1'] });
  });

  test('connected hosts read the volume states, the volumes and which nodes are active, at one revision', async () => {
    const live = await joinServer(suite.client);
    const gone = await joinServer(suite.client);
    const [liveNode, goneNode] = [live.nodes[0]!.UUID, gone.nodes[0]!.UUID];
    const volume = volumeRecord([liveNode, goneNode]);
    await putRecord(suite.client, keys.volume(volume.UUID), volume);
    await new VolumeStatusStore(suite.client).save([volumeStatus(volume.UUID, liveNode), volumeStatus(volume.UUID, goneNode)], undefined);
    await markAbsent(suite.client, gone.server.UUID);
    const snapshot = await new ConnectedHostsStore(suite.client).read();
    assert.deepEqual(snapshot.statuses.filter((s) => s.volumeUUID === volume.UUID).map((s) => s.nodeUUID).sort(), [liveNode, goneNode].sort());
    assert.deepEqual(snapshot.volumes.get(volume.UUID)?.placement?.nodeList, [liveNode, goneNode]);
    assert.equal(snapshot.activeNodes.has(liveNode), true);
    assert.equal(snapshot.activeNodes.has(goneNode), false, 'its presence is gone');
  });
});

describe('report stores losing races (in-memory fake)', () => {

  test('inventory: a concurrent report of the server makes the first commit lose; the save reads again and lands; after 5 lost races it fails', async () => {
    const kv = new MemoryEtcd();
    const serverUUID = randomUUID();
    const store = new InventoryStore(kv);
    const race = racing(kv, 1, async () => {
      await kv.put(keys.serverFacts(serverUUID), factsRecord({ serverUUID, hostname: 'other control plane' }));
      await kv.put(keys.device('SN9'), deviceRecord({ serial: 'SN9', serverUUID }));
    });
    await store.save(serverUUID, { facts: factsRecord({ serverUUID, hostname: 'h1' }), devices: [deviceRecord({ serial: 'SN1', serverUUID })] });
    assert.equal(race.commits(), 2);
    assert.equal((await read<ServerFactsRecord>(kv, keys.serverFacts(serverUUID)))?.hostname, 'h1');
    assert.deepEqual((await devicesOf(kv, serverUUID)).map((d) => [d.serial, d.present]), [['SN1', true], ['SN9', false]], 'the winner\'s device, read again, is not in this report');

    const busy = racing(kv, Infinity, (n) => kv.put(keys.serverFacts(serverUUID), factsRecord({ serverUUID, hostname: `writer ${n}` })));
    await assert.rejects(store.save(serverUUID, { facts: factsRecord({ serverUUID, hostname: 'h2' }), devices: [] }), { message: `inventory of server ${serverUUID} kept changing under concurrent writes` });
    assert.equal(busy.commits(), 5);
  });

  test('pools: a concurrent report makes the first commit lose; the history is derived from the winner\'s record; after 5 lost races it fails', async () => {
    const kv = new MemoryEtcd();
    const node = randomUUID();
    const store = new NodePoolStore(kv);
    const adding = nodePoolRecord(nodeRecord({ serverUUID: randomUUID(), UUID: node, managedDeviceSerials: ['P1'] }));
    const race = racing(kv, 1, () => kv.put(keys.nodePool(node), { ...adding, devices: adding.devices.map((d) => ({ ...d, state: 'Adding', stateSince: 'T0' })) }));
    const healthy = reportedPool(node, { P1: 'Healthy' });
    await store.save([node], [healthy]);
    assert.equal(race.commits(), 2);
    const saved = await read<NodePoolRecord>(kv, keys.nodePool(node));
    assert.deepEqual(saved?.devices.map((d) => [d.state, d.stateSince, d.rebuildCompletedAt]), [['Healthy', healthy.reportedAt, healthy.reportedAt]], 'Adding (the winner\'s) → Healthy: finished');

    const busy = racing(kv, Infinity, (n) => kv.put(keys.nodePool(node), { ...adding, error: `writer ${n}` }));
    await assert.rejects(store.save([node], [reportedPool(node, { P1: 'Adding' })]), { message: `the pools of nodes ${node} kept changing under concurrent writes` });
    assert.equal(busy.commits(), 5);
  });

  test('volume states: a concurrent report makes the first commit lose; the bytes written carry the winner\'s count; after 5 lost races it fails', async () => {
    const kv = new MemoryEtcd();
    const [node, volume] = [randomUUID(), randomUUID()];
    const store = new VolumeStatusStore(kv);
    const { written: _, ...counted } = volumeStatus(volume, node);
    const winnersRecord = (n: number): VolumeStatusRecord => ({ ...counted, userWritten: { device: 'd1', base: '0', last: String(1000 * n), retired: [] } });
    // The other control plane stored the same node's report of device d1 in between.
    const race = racing(kv, 1, (n) => kv.put(keys.volumeStatus(volume, node), winnersRecord(n)));
    await store.save([volumeStatus(volume, node, { bytes: '20', device: 'd2' })], undefined);
    assert.equal(race.commits(), 2);
    const c = (await read<VolumeStatusRecord>(kv, keys.volumeStatus(volume, node)))?.userWritten;
    assert.deepEqual(c, { device: 'd2', base: '1000', last: '20', retired: ['d1'] }, 'what d1 counted is kept');

    const busy = racing(kv, Infinity, (n) => kv.put(keys.volumeStatus(volume, node), winnersRecord(n)));
    await assert.rejects(store.save([volumeStatus(volume, node, { bytes: '30', device: 'd2' })], new Set([node])), { message: 'volume states kept changing under concurrent writes' });
    assert.equal(busy.commits(), 5);
  });
});
