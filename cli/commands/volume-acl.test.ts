// `volumes acl add|remove` under If-Match: a 412 (another writer changed the volume) reads it
// again and applies the change once more; a second 412 is the answer, as is any other failure.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ApiClient } from '../api-client.js';
import { ApiError } from '../errors.js';
import type { Printer } from '../output.js';
import { changeAcl, type Volume } from './volumes.js';

const HOST = 'nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001';

/** A volume server whose PUTs answer `puts` in turn (an error to throw, or 'ok'); GETs answer the next ETag. */
function server(puts: readonly (Error | 'ok')[]) {
  let etag = 0;
  const sent: string[] = [];
  const notes: string[] = [];
  const volume = (): Volume => ({ UUID: 'u1', name: 'v1', projectName: 'p', ETag: String(++etag), acl: { values: ['ALLOW_NONE'] } }) as unknown as Volume;
  const client = {
    get: async () => volume(),
    put: async (_path: string, _body: unknown, ifMatch: string) => {
      sent.push(ifMatch);
      const answer = puts[sent.length - 1];
      if (answer !== 'ok') throw answer;
      return {};
    },
  } as unknown as ApiClient;
  const print = { note: (text: string) => notes.push(text) } as unknown as Printer;
  return { context: { client, print }, sent, notes };
}

const preconditionFailed = () => new ApiError('ETag mismatch', 412, 9, undefined);

describe('volumes acl add|remove', () => {
  it('reads the volume again after a 412 and puts the change with the new ETag', async () => {
    const { context, sent, notes } = server([preconditionFailed(), 'ok']);
    const after = await changeAcl(context, { kind: 'uuid', UUID: 'u1' }, 'add', HOST);
    assert.deepEqual(sent, ['1', '2']);
    assert.equal(after.ETag, '3');
    assert.equal(notes.length, 1);
    assert.match(notes[0]!, /changed meanwhile \(ETag 1\); reading it again/);
  });

  it('answers the second 412, and any other failure at once', async () => {
    const twice = server([preconditionFailed(), preconditionFailed(), 'ok']);
    await assert.rejects(changeAcl(twice.context, { kind: 'uuid', UUID: 'u1' }, 'add', HOST), (err: Error) => err instanceof ApiError && err.status === 412);
    assert.deepEqual(twice.sent, ['1', '2']);
    const refused = server([new ApiError('forbidden', 403, 7, undefined)]);
    await assert.rejects(changeAcl(refused.context, { kind: 'uuid', UUID: 'u1' }, 'add', HOST), (err: Error) => err instanceof ApiError && err.status === 403);
    assert.deepEqual(refused.sent, ['1']);
  });
});
