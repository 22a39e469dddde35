// Following keys of a PrefixMirror from a read (real etcd): what changed between the read and
// the subscription arrives at once, each later change once, a reload that changed nothing brings
// nothing, and a corrupt record is kept (as corrupt, not absent).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from './client.js';
import { followKeys, readKeys, recordOf, seenAfter } from './mirror-follower.js';
import { PrefixMirror } from './prefix-mirror.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';

const PREFIX = '/follow/';
const MINE = '/follow/a/';

describe('followKeys (real etcd)', () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let mirror: PrefixMirror;

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    mirror = new PrefixMirror(client, [PREFIX], silentLogger(), { everyRevision: true, keepCorrupt: true });
  });
  after(async () => {
    await mirror?.stop();
    client?.close();
    await etcd?.stop();
  });

  it('reports what changed since a read, then every change once, nothing for an empty reload', async () => {
    await client.put(`${MINE}1`).value('{"n":1}');
    await client.put(`${MINE}2`).value('{"n":2}');
    await client.put('/follow/b/1').value('{"n":1}');
    await mirror.catchUp();
    const read = readKeys(mirror, PREFIX, MINE);
    assert.deepEqual(read.entries.map(([key]) => key).sort(), [`${MINE}1`, `${MINE}2`]);

    // Between the read and the subscription.
    await client.put(`${MINE}3`).value('{"n":3}');
    await client.delete().key(`${MINE}1`);
    await client.put('/follow/b/2').value('{"n":2}');
    await mirror.catchUp();

    const events: string[] = [];
    const stop = followKeys(mirror, PREFIX, MINE, seenAfter(mirror, PREFIX, MINE, read.revision, read), {
      put: (key, entry) => events.push(`put ${key} ${JSON.stringify(entry.record)}`),
      delete: (key, revision) => {
        assert.ok(revision > read.revision);
        events.push(`delete ${key}`);
      },
    });
    assert.deepEqual(events.sort(), [`delete ${MINE}1`, `put ${MINE}3 {"n":3}`], 'what changed since the read, at once');

    events.length = 0;
    await client.put(`${MINE}2`).value('{"n":22}');
    await client.put(`${MINE}4`).value('not json');
    await waitUntil(() => events.length === 2, 'two changes');
    assert.deepEqual(events, [`put ${MINE}2 {"n":22}`, `put ${MINE}4 null`]);
    assert.throws(() => recordOf(mirror.get(PREFIX, `${MINE}4`)), /corrupt/, 'kept as corrupt');

    events.length = 0;
    await mirror.resync();
    assert.deepEqual(events, [], 'a reload that changed nothing');
    stop();
    await client.put(`${MINE}5`).value('{}');
    await mirror.catchUp();
    assert.deepEqual(events, [], 'nothing after stop');
  });

  it('without the read, treats the keys not written since the revision as seen', async () => {
    const revision = mirror.revision;
    await client.put(`${MINE}6`).value('{"n":6}');
    await mirror.catchUp();
    const events: string[] = [];
    const stop = followKeys(mirror, PREFIX, MINE, seenAfter(mirror, PREFIX, MINE, revision, undefined), {
      put: (key) => events.push(`put ${key}`),
      delete: (key) => events.push(`delete ${key}`),
    });
    stop();
    assert.deepEqual(events, [`put ${MINE}6`]);
  });
});
