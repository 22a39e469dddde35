// Snapshot wire input without etcd: retentionTime forms, the create body, the by-name query
// rules (GET Name, DELETE name) and the list query.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { StrataError } from '../../lib/errors.js';
import {
  MAX_LIST_LIMIT,
  MAX_RETENTION_SECONDS,
  formatRetention,
  parseCreateSnapshot,
  parseDeleteAddress,
  parseGetAddress,
  parseListQuery,
  parseProjectParam,
  parseRetention,
} from './snapshot-schema.js';

const invalid = (fn: () => unknown, pattern?: RegExp) =>
  assert.throws(fn, (err: unknown) => err instanceof StrataError && err.httpStatus === 400 && (pattern === undefined || pattern.test(err.message)));

describe('retentionTime', () => {
  test('accepts the wire duration, Go-style durations with days and weeks, and seconds', () => {
    const cases: [unknown, number][] = [
      ['86400s', 86_400],
      ['24h', 86_400],
      ['30m', 1800],
      ['7d', 604_800],
      ['2w', 1_209_600],
      ['1h30m', 5400],
      ['1h 30m 15s', 5415],
      ['1d12h', 129_600],
      ['90', 90],
      [' 90 ', 90],
      [3600, 3600],
      ['3600s', 3600],
      ['24H', 86_400],
      ['1.5h', 5400],
      ['1.5s', 2],
      ['0.1s', 1],
      ['1500ms', 2],
      ['2 days', 172_800],
      ['1 hour', 3600],
      [{ seconds: 10 }, 10],
      [{ seconds: '10', nanos: 500_000_000 }, 11],
      [12.2, 13],
    ];
    for (const [input, seconds] of cases) assert.equal(parseRetention(input), seconds, JSON.stringify(input));
  });

  test('"", 0, "0s", null and absence mean keep forever', () => {
    for (const input of ['', 0, '0', '0s', '0h', null, undefined, '   ']) assert.equal(parseRetention(input), 0, JSON.stringify(input));
  });

  test('rejects negatives, unknown units, other types and absurd lengths', () => {
    for (const input of ['-5s', -1, '5x', 'abc', 's', '5 5', '1e3', true, false, [], ['1h'], { days: 1 }, { seconds: 'x' }, '1h-30m', `${'9'.repeat(400)}s`, '9'.repeat(400), '36501d', MAX_RETENTION_SECONDS + 1]) {
      assert.throws(() => parseRetention(input), Error, JSON.stringify(input));
    }
    assert.equal(parseRetention({}), 0, '{} is a Duration with nothing set');
    assert.equal(parseRetention('36500d'), MAX_RETENTION_SECONDS);
  });

  test('formats as "<seconds>s"', () => {
    assert.equal(formatRetention(0), '0s');
    assert.equal(formatRetention(86_400), '86400s');
  });
});

// Identifiers are typed (issue 17): UUIDs in these tests are UUIDs.
const U = '5d2c7a10-0000-4000-8000-000000000001';
const V = '5d2c7a10-0000-4000-8000-000000000002';
const O = '5d2c7a10-0000-4000-8000-000000000003';

describe('create body', () => {
  test('keeps what it needs, defaults the rest, ignores unknown keys and projectName', () => {
    assert.deepEqual(parseCreateSnapshot({ name: 's1', sourceVolumeUUID: U, projectName: 'other', extra: { x: 1 } }), {
      name: 's1', sourceVolumeUUID: U, retentionSeconds: 0, description: '',
    });
    assert.deepEqual(parseCreateSnapshot({ name: 's1', sourceVolumeName: 'v', sourceVolumeUUID: '', retentionTime: '1h', description: 'd', labels: null }), {
      name: 's1', sourceVolumeName: 'v', retentionSeconds: 3600, description: 'd',
    });
    assert.deepEqual(parseCreateSnapshot({ name: 's1', sourceVolumeName: 'v', description: null, retentionTime: null }), {
      name: 's1', sourceVolumeName: 'v', retentionSeconds: 0, description: '',
    });
  });

  test('400 listing every bad field', () => {
    invalid(() => parseCreateSnapshot({}), /name is required; sourceVolumeUUID or sourceVolumeName is required/);
    invalid(() => parseCreateSnapshot({ name: 's' }), /sourceVolumeUUID or sourceVolumeName/);
    invalid(() => parseCreateSnapshot({ name: 's', sourceVolumeUUID: '', sourceVolumeName: '' }), /sourceVolumeUUID or sourceVolumeName/);
    invalid(() => parseCreateSnapshot({ sourceVolumeUUID: U }), /name is required/);
    invalid(() => parseCreateSnapshot({ name: 'bad name', sourceVolumeUUID: U }), /name must be 1 to 253/);
    invalid(() => parseCreateSnapshot({ name: '', sourceVolumeUUID: U }), /name/);
    invalid(() => parseCreateSnapshot({ name: 'x'.repeat(254), sourceVolumeUUID: U }), /name/);
    invalid(() => parseCreateSnapshot({ name: 5, sourceVolumeUUID: U }), /name must be a string/);
    invalid(() => parseCreateSnapshot({ name: 's', sourceVolumeUUID: 7 }), /sourceVolumeUUID must be a string/);
    invalid(() => parseCreateSnapshot({ name: 's', sourceVolumeUUID: 'u' }), /sourceVolumeUUID must be a UUID/);
    invalid(() => parseCreateSnapshot({ name: 's', sourceVolumeName: 'v'.repeat(1_000_000) }), /sourceVolumeName must be 1 to 253/);
    invalid(() => parseCreateSnapshot({ name: 's', sourceVolumeUUID: U, retentionTime: 'forever' }), /retentionTime must be a duration/);
    invalid(() => parseCreateSnapshot({ name: 's', sourceVolumeUUID: U, description: 'é'.repeat(513) }), /description must be at most 1024 bytes/);
    const err = (() => {
      try {
        parseCreateSnapshot({ name: 'a b', sourceVolumeName: [], retentionTime: true });
      } catch (e) {
        return e as StrataError;
      }
      return undefined;
    })();
    assert.ok(err);
    assert.match(err.message, /name .*; sourceVolumeName .*; retentionTime /);
    assert.equal(err.details.length, 3);
  });

  test('the project path parameter follows the name rules', () => {
    assert.equal(parseProjectParam('default'), 'default');
    invalid(() => parseProjectParam('a/b'));
    invalid(() => parseProjectParam(''));
    invalid(() => parseProjectParam(undefined));
  });
});

describe('by-name addressing', () => {
  test('GET reads Name (capital N); a lower-case name gets a hint', () => {
    assert.deepEqual(parseGetAddress(undefined, { Name: 's1' }), { name: 's1' });
    assert.deepEqual(parseGetAddress(U, {}), { UUID: U });
    assert.deepEqual(parseGetAddress(U, { Name: 's1' }), { UUID: U, name: 's1' });
    assert.deepEqual(parseGetAddress(U, { name: 's1' }), { UUID: U }, 'unknown query names are ignored');
    invalid(() => parseGetAddress(undefined, { name: 's1' }), /Name=<name> \(capital N\)/);
    invalid(() => parseGetAddress(undefined, {}), /UUID in the path/);
    invalid(() => parseGetAddress(undefined, { Name: '' }), /UUID in the path/);
    invalid(() => parseGetAddress(undefined, { Name: ['a', 'b'] }), /more than once/);
  });

  test('DELETE reads name (lower-case n); a capital Name gets a hint', () => {
    assert.deepEqual(parseDeleteAddress(undefined, { name: 's1' }), { name: 's1' });
    assert.deepEqual(parseDeleteAddress(U, {}), { UUID: U });
    assert.deepEqual(parseDeleteAddress(U, { name: 's1' }), { UUID: U, name: 's1' });
    invalid(() => parseDeleteAddress(undefined, { Name: 's1' }), /name=<name> \(lower-case n\)/);
    invalid(() => parseDeleteAddress(undefined, {}), /UUID in the path/);
  });
});

describe('list query', () => {
  test('filters, showAll, limit and offsetUUID', () => {
    assert.deepEqual(parseListQuery({}), { showAll: false, limit: MAX_LIST_LIMIT });
    assert.deepEqual(parseListQuery({ name: 'a', sourceVolumeUUID: V, sourceVolumeName: 'vn', UUID: U, showAll: 'true', limit: '5', offsetUUID: O, other: 'x' }), {
      showAll: true, limit: 5, UUID: U, name: 'a', sourceVolumeUUID: V, sourceVolumeName: 'vn', offsetUUID: O,
    });
    // Identifiers are typed (issue 17): a filter UUID must be a UUID, a name a name.
    for (const query of [{ UUID: 'u' }, { sourceVolumeUUID: 'v' }, { offsetUUID: 'o' }, { name: 'a b' }, { sourceVolumeName: 'x'.repeat(254) }]) invalid(() => parseListQuery(query));
    assert.equal(parseListQuery({ Name: 'a' }).name, 'a');
    assert.equal(parseListQuery({ Name: 'a', name: 'a' }).name, 'a');
    assert.equal(parseListQuery({ limit: '0' }).limit, MAX_LIST_LIMIT);
    assert.equal(parseListQuery({ limit: '5000' }).limit, MAX_LIST_LIMIT);
    assert.equal(parseListQuery({ limit: '' }).limit, MAX_LIST_LIMIT);
    invalid(() => parseListQuery({ Name: 'a', name: 'b' }), /must agree/);
    for (const limit of ['-1', 'ten', '1.5']) invalid(() => parseListQuery({ limit }), /limit/);
    invalid(() => parseListQuery({ showAll: 'maybe' }), /showAll/);
  });
});
