// Snapshots as a domain, without etcd: the product's service, store and watched state on the
// in-memory etcd (test/fakes/memory-etcd.ts). snapshots.test.ts is the integration layer (HTTP,
// real etcd); here a concurrent writer can be let in between a read and its commit at will.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { keys } from '../../lib/etcd/keys.js';
import type { StrataError } from '../../lib/errors.js';
import type { ProjectRecord, SnapshotRecord } from '../../lib/records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { refuses, watchedStateForEachTest } from '../../test/fakes/domain-helpers.js';
import { putVolume, removeVolume, volumeUsage } from '../../test/kits/api-test-kit.js';
import { CollectingEvents } from '../../test/kits/snapshot-test-fixtures.js';
import { WatchedProjectDirectory } from '../projects/project-directory.js';
import { parseCreateSnapshot } from './snapshot-schema.js';
import { SnapshotService } from './snapshot-service.js';
import { SnapshotStore } from './snapshot-store.js';

/** A volume snapshots can be taken of: Available and placed on one node. */
const placed = (overrides: Parameters<typeof putVolume>[1]) =>
  ({ placement: { nodeList: [randomUUID()], primaryNodeUUID: '', nsid: 7, port: 20007 }, ...overrides }) satisfies Parameters<typeof putVolume>[1];

describe('snapshot service on the in-memory etcd', () => {
  const watchedState = watchedStateForEachTest();

  async function world() {
    const kv = new MemoryEtcd();
    const project: ProjectRecord = { UUID: randomUUID(), name: 'default', description: '', defaultPolicies: [], builtIn: true, createdAt: '' };
    await kv.put(keys.project('default'), project);
    await kv.put(keys.cluster(), { UUID: 'cluster-1' });
    const cache = await watchedState(kv);
    const store = new SnapshotStore(kv);
    const events = new CollectingEvents();
    const service = new SnapshotService({ store, projects: new WatchedProjectDirectory(cache), clones: volumeUsage(kv, cache), events });
    const snapshot = (name: string, sourceVolumeUUID: string) => service.create('default', parseCreateSnapshot({ name, sourceVolumeUUID }));
    return { kv, cache, store, events, service, snapshot };
  }

  test('create: Creating, the source volume fields, the name index and an event; a taken name is ALREADY_EXISTS', async () => {
    const { kv, cache, events, snapshot } = await world();
    const volume = await putVolume(kv, placed({ projectName: 'default', sizeBytes: '4096000' }));
    await cache.sync();
    const created = await snapshot('s1', volume.UUID);
    assert.equal(created.state, 'Creating');
    const stored = JSON.parse((await kv.get(keys.snapshot(created.UUID)))!.value.toString()) as SnapshotRecord;
    assert.deepEqual([stored.sourceVolumeUUID, stored.sourceVolumeName, stored.sizeBytes], [volume.UUID, volume.name, '4096000']);
    assert.deepEqual(JSON.parse((await kv.get(keys.snapshotName('default', 's1')))!.value.toString()), { UUID: created.UUID });
    assert.deepEqual(events.named('SnapshotCreated').length, 1);
    await refuses(snapshot('s1', volume.UUID), 'ALREADY_EXISTS');
    await refuses(snapshot('s2', randomUUID()), 'NOT_FOUND');
  });

  test('concurrent creates of one name: exactly one wins', async () => {
    const { kv, cache, snapshot } = await world();
    const volume = await putVolume(kv, placed({ projectName: 'default' }));
    await cache.sync();
    const results = await Promise.allSettled(Array.from({ length: 8 }, () => snapshot('same', volume.UUID)));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    for (const r of results) if (r.status === 'rejected') assert.equal((r.reason as StrataError).code, 'ALREADY_EXISTS');
  });

  test('a volume changed between the read and the commit: the create reads it again and snapshots what it is now', async () => {
    const { kv, cache, snapshot } = await world();
    const volume = await putVolume(kv, placed({ projectName: 'default', sizeBytes: '4096000' }));
    await cache.sync();
    let races = 0;
    kv.interleave = async () => {
      races++;
      if (races === 1) await kv.put(keys.volume(volume.UUID), { ...volume, sizeBytes: '8192000' });
    };
    const created = await snapshot('grown', volume.UUID);
    assert.equal(races, 2, 'refused once (the volume moved), then committed');
    assert.equal(JSON.parse((await kv.get(keys.snapshot(created.UUID)))!.value.toString()).sizeBytes, '8192000');
  });

  test('delete: refused while a live clone uses it; then Deleting, its name free at once, an event recorded', async () => {
    const { kv, cache, events, service, snapshot } = await world();
    const volume = await putVolume(kv, placed({ projectName: 'default' }));
    await cache.sync();
    const created = await snapshot('cloned', volume.UUID);
    await kv.put(keys.snapshot(created.UUID), { ...JSON.parse((await kv.get(keys.snapshot(created.UUID)))!.value.toString()), state: 'Available' });
    const clone = await putVolume(kv, { projectName: 'default', sourceSnapshotUUID: created.UUID });
    await refuses(service.delete('default', { UUID: created.UUID }), 'INVALID_STATE', /clone/);
    await removeVolume(kv, clone);
    await service.delete('default', { UUID: created.UUID });
    assert.equal(JSON.parse((await kv.get(keys.snapshot(created.UUID)))!.value.toString()).state, 'Deleting');
    assert.equal(await kv.get(keys.snapshotName('default', 'cloned')), null);
    assert.equal(events.named('SnapshotDeleteRequested').length, 1);
    await snapshot('cloned', volume.UUID).catch((err: StrataError) => assert.fail(`the name is free again: ${err.message}`));
  });
});
