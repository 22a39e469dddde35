// Snapshot retention against a real etcd, with an injected clock.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { SnapshotRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { expiryOf, startSnapshotRetention, type SnapshotRetention } from './snapshot-retention.js';
import { SnapshotStore, WatchedSnapshots } from './snapshot-store.js';
import { WatchCache } from '../watch-cache/watch-cache.js';
import { CollectingEvents, TestClones, changeVolume, putVolume, setSnapshotState, volumeRecord } from '../../test/kits/snapshot-test-fixtures.js';

describe('snapshot retention', () => {
  let testEtcd: TestEtcd;
  let etcd: Etcd3;
  let state: WatchCache;
  before(async () => {
    testEtcd = await startEtcd();
    etcd = createEtcdClient([testEtcd.endpoint]);
    state = new WatchCache(etcd, silentLogger('retention-test'));
    await state.start();
  });
  after(async () => {
    await state?.stop();
    etcd?.close();
    await testEtcd?.stop();
  });

  /** A clock the test moves forward. */
  const clock = () => {
    let offset = 0;
    return { now: () => Date.now() + offset, advance: (ms: number) => (offset += ms) };
  };

  /** What the API writes on create (record and name index), in the given state. */
  const putSnapshot = async (overrides: Partial<SnapshotRecord> = {}): Promise<SnapshotRecord> => {
    const UUID = randomUUID();
    const record: SnapshotRecord = {
      UUID, name: `snap-${UUID.slice(0, 8)}`, projectName: 'default', description: '', sourceVolumeUUID: randomUUID(), sourceVolumeName: 'vol',
      sizeBytes: '1073741824', compression: false, sectorSize: 4096, labels: [], state: 'Available', failureReason: '', retentionSeconds: 60,
      creationTime: new Date().toISOString(), ...overrides,
    };
    await etcd.if(keys.snapshot(UUID), 'Create', '==', 0)
      .then(etcd.put(keys.snapshot(UUID)).value(JSON.stringify(record)), etcd.put(keys.snapshotName(record.projectName, record.name)).value(JSON.stringify({ UUID })))
      .commit();
    return record;
  };
  const stateOf = async (uuid: string) => (JSON.parse((await etcd.get(keys.snapshot(uuid)).string()) ?? 'null') as SnapshotRecord | null)?.state;
  const nameIndex = (s: SnapshotRecord) => etcd.get(keys.snapshotName(s.projectName, s.name)).string();

  const run = (events: CollectingEvents, now: () => number, options: { cloneRecheckMs?: number } = {}): SnapshotRetention =>
    startSnapshotRetention({ store: new SnapshotStore(etcd), watched: new WatchedSnapshots(state), logger: silentLogger('retention-test'), events, clones: new TestClones(etcd), now, maxSleepMs: 25, ...options });

  test('expiryOf: creationTime + retention; none for 0 or an unreadable time', () => {
    assert.equal(expiryOf({ creationTime: '2024-01-01T00:00:00.000Z', retentionSeconds: 60 }), Date.parse('2024-01-01T00:01:00.000Z'));
    assert.equal(expiryOf({ creationTime: '2024-01-01T00:00:00.000Z', retentionSeconds: 0 }), undefined);
    assert.equal(expiryOf({ creationTime: 'garbage', retentionSeconds: 60 }), undefined);
  });

  test('an Available snapshot goes Deleting once its retention has passed, frees its name, and says so', async () => {
    const events = new CollectingEvents();
    const time = clock();
    const snapshot = await putSnapshot({ retentionSeconds: 3600 });
    const forever = await putSnapshot({ retentionSeconds: 0 });
    const retention = run(events, time.now);
    try {
      await sleep(200);
      assert.equal(await stateOf(snapshot.UUID), 'Available', 'not expired yet');
      time.advance(3601_000);
      await waitUntil(async () => (await stateOf(snapshot.UUID)) === 'Deleting', 'the expired snapshot to be Deleting', 5000);
      assert.equal(await nameIndex(snapshot), null, 'the name is free at once');
      const expired = events.named('SnapshotExpired');
      assert.equal(expired.length, 1);
      assert.equal(expired[0]!.reportingService, 'CM');
      assert.equal(expired[0]!.type, 'Volume');
      assert.match(expired[0]!.description, new RegExp(`${snapshot.UUID}.*3600s`));
      assert.deepEqual(expired[0]!.component, { kind: 'volume', projectName: 'default', volumes: [{ ID: snapshot.sourceVolumeUUID, Name: 'vol' }] });
      time.advance(100 * 365 * 86_400_000);
      await sleep(200);
      assert.equal(await stateOf(forever.UUID), 'Available', 'retention 0 keeps it forever');
    } finally {
      await retention.stop();
    }
  });

  test('snapshots created or made Available after start are watched; Creating ones wait for Available', async () => {
    const events = new CollectingEvents();
    const time = clock();
    const retention = run(events, time.now);
    try {
      await sleep(100);
      const past = new Date(Date.now() - 120_000).toISOString();
      const expiredAlready = await putSnapshot({ retentionSeconds: 60, creationTime: past });
      const creating = await putSnapshot({ retentionSeconds: 60, creationTime: past, state: 'Creating' });
      await waitUntil(async () => (await stateOf(expiredAlready.UUID)) === 'Deleting', 'a new, already expired snapshot to be Deleting', 5000);
      await sleep(200);
      assert.equal(await stateOf(creating.UUID), 'Creating', 'Creating is never expired');
      await setSnapshotState(etcd, creating.UUID, 'Available');
      await waitUntil(async () => (await stateOf(creating.UUID)) === 'Deleting', 'the snapshot to expire once Available', 5000);
      const failed = await putSnapshot({ retentionSeconds: 60, creationTime: past, state: 'Failed' });
      await sleep(200);
      assert.equal(await stateOf(failed.UUID), 'Failed', 'Failed ones are left for the user');
    } finally {
      await retention.stop();
    }
  });

  test('a snapshot with live clones is kept, with one event saying why, until the clones are gone', async () => {
    const events = new CollectingEvents();
    const time = clock();
    const snapshot = await putSnapshot({ retentionSeconds: 60 });
    const clone = await putVolume(etcd, volumeRecord({ sourceSnapshotUUID: snapshot.UUID, sourceSnapshotName: snapshot.name }));
    const retention = run(events, time.now, { cloneRecheckMs: 10_000 });
    try {
      time.advance(61_000);
      await waitUntil(() => events.named('SnapshotExpiryDeferred').length === 1, 'the deferral event', 5000);
      const deferred = events.named('SnapshotExpiryDeferred')[0]!;
      assert.equal(deferred.severity, 'Low');
      assert.match(deferred.description, /1 volume\(s\) cloned from it/);
      // Looked at again after the recheck interval: still kept, no second event.
      time.advance(11_000);
      await sleep(200);
      assert.equal(await stateOf(snapshot.UUID), 'Available');
      assert.equal(events.named('SnapshotExpiryDeferred').length, 1, 'one event per deferral, not per look');
      assert.notEqual(await nameIndex(snapshot), null);

      await changeVolume(etcd, clone, { state: 'Deleting' });
      await sleep(200);
      assert.equal(await stateOf(snapshot.UUID), 'Available', 'not before the next recheck');
      time.advance(11_000);
      await waitUntil(async () => (await stateOf(snapshot.UUID)) === 'Deleting', 'the snapshot to expire once its clones are gone', 5000);
      assert.equal(events.named('SnapshotExpired').length, 1);
    } finally {
      await retention.stop();
    }
  });

  test('two instances at once (a leadership hand-over): one transition, one event', async () => {
    const events = new CollectingEvents();
    const time = clock();
    const snapshots = await Promise.all(Array.from({ length: 5 }, () => putSnapshot({ retentionSeconds: 30 })));
    const a = run(events, time.now);
    const b = run(events, time.now);
    try {
      await sleep(100);
      time.advance(31_000);
      for (const s of snapshots) await waitUntil(async () => (await stateOf(s.UUID)) === 'Deleting', `${s.name} Deleting`, 5000);
      await sleep(200);
      assert.equal(events.named('SnapshotExpired').length, snapshots.length);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  test('after stop nothing is expired', async () => {
    const events = new CollectingEvents();
    const time = clock();
    const snapshot = await putSnapshot({ retentionSeconds: 60 });
    const retention = run(events, time.now);
    await sleep(100);
    await retention.stop();
    time.advance(120_000);
    await sleep(200);
    assert.equal(await stateOf(snapshot.UUID), 'Available');
    assert.equal(events.events.length, 0);
  });
});
