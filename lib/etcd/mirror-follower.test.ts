// Following keys of a PrefixMirror from a read (real etcd): what changed between the read and
// the subscription arrives at once, each later change once, a reload that changed nothing brings
// nothing, and a corrupt record is kept (as corrupt, not absent).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { followKeys, readKeys, recordOf, seenAfter } from './mirror-follower.js';
import { PrefixMirror } from './prefix-mirror.js';
import { etcdForSuite } from '../../test/helpers/etcd.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';

describe('followKeys (real etcd)', () => {
  const PREFIX = '/follow/';
  const MINE = '/follow/a/';
  let mirror: PrefixMirror;
  // Registered first, so it runs before the suite's etcd stops.
  after(() => mirror?.stop());
  const suite = etcdForSuite();
  const put = (key: string, value: string) => suite.client.put(key).value(value);
  before(() => {
    mirror = new PrefixMirror(suite.client, [PREFIX], silentLogger(), { everyRevision: true, keepCorrupt: true });
  });

  it('reports what changed since a read, then every change once, nothing for an empty reload', async () => {
    await put(`${MINE}1`, '{"n":1}');
    await put(`${MINE}2`, '{"n":2}');
    await put('/follow/b/1', '{"n":1}');
    await mirror.catchUp();
    const read = readKeys(mirror, PREFIX, MINE);
    assert.deepEqual(read.entries.map(([key]) => key).sort(), [`${MINE}1`, `${MINE}2`]);

    // Between the read and the subscription.
    await put(`${MINE}3`, '{"n":3}');
    await suite.client.delete().key(`${MINE}1`);
    await put('/follow/b/2', '{"n":2}');
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
    await put(`${MINE}2`, '{"n":22}');
    await put(`${MINE}4`, 'not json');
    await waitUntil(() => events.length === 2, 'two changes');
    assert.deepEqual(events, [`put ${MINE}2 {"n":22}`, `put ${MINE}4 null`]);
    assert.throws(() => recordOf(mirror.get(PREFIX, `${MINE}4`)), /corrupt/, 'kept as corrupt');

    events.length = 0;
    await mirror.resync();
    assert.deepEqual(events, [], 'a reload that changed nothing');
    stop();
    await put(`${MINE}5`, '{}');
    await mirror.catchUp();
    assert.deepEqual(events, [], 'nothing after stop');
  });

  it('without the read, treats the keys not written since the revision as seen', async () => {
    const revision = mirror.revision;
    await put(`${MINE}6`, '{"n":6}');
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
