// Membership events on a real etcd and on the in-memory fake (test/fakes/memory-etcd.ts): records
// written as agents and the control plane write them, events read back from the log.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { StrataError } from '../../lib/errors.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../lib/etcd/kv.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { startEtcdWithClient } from '../../test/helpers/etcd.js';
import { joinServer, markAbsent, markPresent, putRecord, reportInventory, type JoinedServer } from '../../test/helpers/records.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { EtcdEventLog } from '../events/etcd-event-log.js';
import { EventLogStore } from '../events/event-log-store.js';
import type { EventWire } from '../events/event-wire.js';
import { InventoryReader } from '../inventory/inventory-reader.js';
import { startMembershipEvents, type MembershipEvents, type ReportedNodeState } from './membership-events.js';
import { MembershipEventsStore, membershipKeys } from './membership-events-store.js';
import { WatchCache } from '../watch-cache/watch-cache.js';

/** Where the cases run: the store client, and how to stop it. */
interface Backend {
  readonly client: KvClient;
  close(): Promise<void>;
}

function membershipEventCases(name: string, open: () => Promise<Backend>): void {
  describe(`membership events on ${name}`, () => {
    let etcd: KvClient;
    let close: Backend['close'] = async () => {};
    let log: EtcdEventLog;
    /** The process's watched state: the controller follows its changes. */
    let state: WatchCache;
    let controller: MembershipEvents | undefined;
    let a: JoinedServer;
    let b: JoinedServer;

    before(async () => {
      ({ client: etcd, close } = await open());
      log = new EtcdEventLog(new EventLogStore(etcd), silentLogger(), { flagCacheMs: 0 });
      state = new WatchCache(etcd, silentLogger());
      await state.start();
    });
    after(async () => {
      await controller?.stop();
      await state?.stop();
      await close();
    });

    /** A key's value as text; null when there is none. */
    const raw = async (key: string): Promise<string | null> => (await kvOf(etcd).get(key))?.value.toString() ?? null;
    const remove = (key: string) => kvOf(etcd).commit({ guards: [], writes: [{ delete: key }] });
    /** The log, oldest first. */
    const events = async (): Promise<EventWire[]> => {
      // An event's key sorts before older ones' (event-id.ts): read in key order, reversed.
      return (await kvOf(etcd).range(keys.eventsPrefix())).reverse().map((kv) => JSON.parse(kv.value.toString()) as EventWire);
    };
    const names = async () => (await events()).map((e) => `${e.EventName}:${e.ComponentNodeInfo?.Name ?? e.ComponentServerInfo?.Name ?? e.ComponentNVMeSSDInfo?.ID}`);
    const start = async () => {
      controller = startMembershipEvents({ store: new MembershipEventsStore(etcd, state), inventory: new InventoryReader(state), events: log, logger: silentLogger() });
      await controller.ready;
    };
    const stop = async () => {
      await controller?.stop();
      controller = undefined;
    };
    /** Waits until the log has `count` events, then a little longer to catch extra ones. */
    const settle = async (count: number) => {
      await waitUntil(async () => (await events()).length >= count, `${count} events`);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal((await events()).length, count, (await names()).join(', '));
    };

    test('a joining server: ServerJoined, then its nodes Active, then its devices Added', async () => {
      await start();
      a = await joinServer(etcd, { server: { name: 'srv-a', hostname: 'host-a' }, nodes: [{ name: 'a0', managedDeviceSerials: ['DA1'], journalDeviceSerial: 'JA' }] });
      await reportInventory(etcd, a.server.UUID, { devices: [{ serial: 'DA1', controller: 'nvme1' }, { serial: 'JA' }, { serial: 'LOOSE' }] });
      await settle(5);
      const all = await events();
      assert.deepEqual(all.map((e) => e.EventName).sort(), ['NVMeSSDAdded', 'NVMeSSDAdded', 'NVMeSSDAdded', 'NodeEnteredActiveState', 'ServerJoined']);
      const joined = all.find((e) => e.EventName === 'ServerJoined')!;
      assert.equal(joined.Type, 'Server');
      assert.equal(joined.Severity, 'Info');
      assert.equal(joined.EventCode, 5001);
      assert.deepEqual(joined.ComponentServerInfo, { ID: a.server.UUID, Name: 'srv-a' });
      const active = all.find((e) => e.EventName === 'NodeEnteredActiveState')!;
      assert.equal(active.Type, 'Node');
      assert.equal(active.Severity, 'Info');
      assert.equal(active.ReportingService, 'CM');
      assert.deepEqual(active.ComponentNodeInfo, { ID: a.nodes[0]!.UUID, Name: 'a0' });
      assert.equal(active.AssociatedEventID, '');
      const added = all.find((e) => e.ComponentNVMeSSDInfo?.ID === 'DA1')!;
      assert.deepEqual(added.ComponentNVMeSSDInfo, { ID: 'DA1', Name: 'nvme1' });
      assert.equal(added.Type, 'NVMeSSD');
    });

    test('presence deleted: exactly one NodeEnteredInactiveState', async () => {
      await markAbsent(etcd, a.server.UUID);
      await settle(6);
      const inactive = (await events()).at(-1)!;
      assert.equal(inactive.EventName, 'NodeEnteredInactiveState');
      assert.equal(inactive.Severity, 'Medium');
      assert.equal(inactive.EventCode, 2002);
      assert.deepEqual(inactive.ComponentNodeInfo, { ID: a.nodes[0]!.UUID, Name: 'a0' });
      const reported = JSON.parse((await raw(membershipKeys.node(a.nodes[0]!.UUID)))!) as ReportedNodeState;
      assert.equal(reported.state, 'Inactive');
      assert.equal(reported.eventID, inactive.ID, 'the reported state names its event');
    });

    test('a restarted controller does not repeat events', async () => {
      await stop();
      await start();
      await settle(6);
      await stop();
      await start();
      await settle(6);
    });

    test('a change while no controller runs is reported once by the next one, linked to the previous event', async () => {
      await stop();
      await markPresent(etcd, a.server.UUID, [a.nodes[0]!.UUID], 'host-a');
      await start();
      await settle(7);
      const [inactive, active] = (await events()).slice(-2);
      assert.equal(active!.EventName, 'NodeEnteredActiveState');
      assert.equal(active!.AssociatedEventID, inactive!.ID);
    });

    test('devices going away: Failed when a node uses them (data or journal), Removed otherwise; back: Added', async () => {
      await reportInventory(etcd, a.server.UUID, { devices: [{ serial: 'DA1', controller: 'nvme1', present: false }, { serial: 'JA', present: false }, { serial: 'LOOSE', present: false }] });
      await settle(10);
      const last3 = (await events()).slice(-3);
      const bySerial = new Map(last3.map((e) => [e.ComponentNVMeSSDInfo!.ID, e]));
      assert.equal(bySerial.get('DA1')!.EventName, 'NVMeSSDFailed');
      assert.equal(bySerial.get('DA1')!.Severity, 'High');
      assert.match(bySerial.get('DA1')!.Description, /data device of node a0/);
      assert.equal(bySerial.get('JA')!.EventName, 'NVMeSSDFailed');
      assert.match(bySerial.get('JA')!.Description, /journal device/);
      assert.equal(bySerial.get('LOOSE')!.EventName, 'NVMeSSDRemoved');
      assert.equal(bySerial.get('LOOSE')!.Severity, 'Low');
      await reportInventory(etcd, a.server.UUID, { devices: [{ serial: 'DA1', controller: 'nvme1' }] });
      await settle(11);
      const back = (await events()).at(-1)!;
      assert.equal(back.EventName, 'NVMeSSDAdded');
      assert.equal(back.AssociatedEventID, bySerial.get('DA1')!.ID);
      // A device first seen already gone is remembered silently.
      await reportInventory(etcd, a.server.UUID, { devices: [{ serial: 'GHOST', present: false }] });
      await waitUntil(async () => (await raw(membershipKeys.device('GHOST'))) !== null, 'GHOST remembered');
      await settle(11);
    });

    test('a node first seen Inactive is remembered silently; its presence then reports Active', async () => {
      b = await joinServer(etcd, { server: { name: 'srv-b' }, nodes: [{ name: 'b0' }, { name: 'b1' }], present: false });
      await settle(12); // ServerJoined only
      await waitUntil(async () => (await raw(membershipKeys.node(b.nodes[1]!.UUID))) !== null, 'b1 remembered');
      await markPresent(etcd, b.server.UUID, [b.nodes[0]!.UUID]);
      await settle(13);
      assert.equal((await names()).at(-1), 'NodeEnteredActiveState:b0');
    });

    test('a deleted node loses its reported state; a deleted server too', async () => {
      await remove(keys.node(b.nodes[1]!.UUID));
      await waitUntil(async () => (await raw(membershipKeys.node(b.nodes[1]!.UUID))) === null, 'b1 forgotten');
      await remove(keys.server(b.server.UUID));
      await waitUntil(async () => (await raw(membershipKeys.server(b.server.UUID))) === null, 'srv-b forgotten');
      await settle(13);
    });

    test('event log disabled: the state is remembered, nothing is recorded, nothing replays later', async () => {
      await putRecord(etcd, keys.featureFlag('event-log'), { name: 'event-log', enabled: false });
      await markAbsent(etcd, b.server.UUID);
      await waitUntil(async () => {
        const value = await raw(membershipKeys.node(b.nodes[0]!.UUID));
        return value !== null && (JSON.parse(value) as ReportedNodeState).state === 'Inactive';
      }, 'b0 Inactive remembered');
      await putRecord(etcd, keys.featureFlag('event-log'), { name: 'event-log', enabled: true });
      await stop();
      await start();
      await settle(13);
    });

    test('a deposed leader (fenced write refused) writes nothing and stops', async () => {
      await stop();
      await markPresent(etcd, b.server.UUID, [b.nodes[0]!.UUID]);
      const deposed = startMembershipEvents({
        store: new MembershipEventsStore(etcd, state, async () => {
          throw new StrataError('NOT_LEADER', 'leadership term ended before the write');
        }),
        inventory: new InventoryReader(state),
        events: log,
        logger: silentLogger(),
      });
      await deposed.ready;
      await deposed.stop();
      await settle(13);
      // The next leader reports it.
      await start();
      await settle(14);
      assert.equal((await names()).at(-1), 'NodeEnteredActiveState:b0');
    });
  });
}

membershipEventCases('etcd', startEtcdWithClient);
membershipEventCases('the in-memory etcd', async () => ({ client: new MemoryEtcd(), close: async () => {} }));
