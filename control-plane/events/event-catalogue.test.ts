// The catalogue is documented row by row, and the pure helpers (ids, times, wire) behave.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { packageRoot } from '../../lib/paths.js';
import { catalogued, eventCatalogue, eventCodeOf } from './event-catalogue.js';
import { isEventId, newEventId, nowNs, nsOfEventId, rfc3339Nano } from './event-id.js';
import { timeBoundKey } from './event-store.js';
import { EVENT_FIELDS, toEventWire } from './event-wire.js';
import { parseIsoTimeNs } from './events-schema.js';

describe('event catalogue', () => {
  test('every entry is documented in docs/events.md with its code, type, severity and reporting service', () => {
    const doc = readFileSync(join(packageRoot, 'docs/events.md'), 'utf8').split('\n');
    for (const [name, entry] of Object.entries(eventCatalogue)) {
      const row = doc.find((line) => line.startsWith(`| ${name} |`));
      assert.ok(row, `docs/events.md has a row for ${name}`);
      const cells = row.split('|').map((c) => c.trim());
      assert.equal(cells[2], String(entry.code), `${name} code`);
      assert.equal(cells[3], entry.type, `${name} type`);
      assert.equal(cells[4], entry.severity, `${name} severity`);
      assert.equal(cells[5], entry.reportingService, `${name} reporting service`);
    }
  });

  test('docs/events.md says of each event what emits it, or "not yet": checked against the sources', () => {
    const doc = readFileSync(join(packageRoot, 'docs/events.md'), 'utf8').split('\n');
    // Every source that could record an event: product code, not tests or test support.
    const sources = ['control-plane', 'agent', 'lib'].flatMap((dir) =>
      (readdirSync(join(packageRoot, dir), { recursive: true }) as string[])
        .filter((f) => f.endsWith('.ts') && !/(\.test|\.e2e)\.ts$|(^|\/)testing\/|fixtures|test-support|test-tokens|event-catalogue\.ts$/.test(f))
        .map((f) => ({ path: `${dir}/${f}`, text: readFileSync(join(packageRoot, dir, f), 'utf8') })),
    );
    assert.ok(sources.length > 50, 'the sources were found');
    for (const name of Object.keys(eventCatalogue)) {
      const cells = doc.find((line) => line.startsWith(`| ${name} |`))!.split('|').map((c) => c.trim());
      const emittedBy = cells[8] ?? '';
      const recorders = sources.filter((s) => s.text.includes(`'${name}'`)).map((s) => s.path);
      if (/^\*\*not yet\b/.test(emittedBy)) {
        assert.deepEqual(recorders, [], `${name} is marked "not yet" in docs/events.md but is recorded by these`);
      } else {
        const file = /^`([^`]+)`$/.exec(emittedBy)?.[1];
        assert.ok(file, `${name}: the Emitted by cell names a file or says not yet (got ${JSON.stringify(emittedBy)})`);
        assert.ok(recorders.includes(file), `${name}: ${file} records it (recorded by: ${recorders.join(', ') || 'nothing'})`);
      }
    }
  });

  test('codes and names are unique; codes sit in their type block', () => {
    const codes = Object.values(eventCatalogue).map((e) => e.code);
    assert.equal(new Set(codes).size, codes.length);
    const blocks: Record<string, number> = { Cluster: 1, Node: 2, Volume: 3, NVMeSSD: 4, Server: 5, DataIntegrity: 6, ClusterEncryption: 7 };
    for (const [name, entry] of Object.entries(eventCatalogue)) assert.equal(Math.floor(entry.code / 1000), blocks[entry.type], name);
    assert.equal(eventCodeOf('NodeEnteredActiveState'), 2001);
    assert.equal(eventCodeOf('NoSuchEvent'), 0);
    assert.equal(eventCodeOf('toString'), 0, 'no prototype lookups');
  });

  test('catalogued() fills type, severity and reporting service', () => {
    const event = catalogued('VolumeFailed', { component: { kind: 'volume', projectName: 'p', volumes: [{ ID: 'u', Name: 'v' }] }, description: 'd' });
    assert.deepEqual(event, { type: 'Volume', severity: 'High', eventName: 'VolumeFailed', reportingService: 'CM', description: 'd', component: { kind: 'volume', projectName: 'p', volumes: [{ ID: 'u', Name: 'v' }] } });
    assert.equal(catalogued('VolumeFailed', { component: { kind: 'cluster', ID: 'c', Name: 'n' }, description: '', severity: 'Critical' }).severity, 'Critical');
  });
});

describe('event ids and times', () => {
  test('ids sort newest first, are unique, and carry their time', () => {
    const a = nowNs();
    const b = nowNs();
    assert.ok(b > a, 'the clock is strictly increasing');
    const [idA, idB] = [newEventId(a), newEventId(b)];
    assert.ok(isEventId(idA) && isEventId(idB));
    assert.ok(idB < idA, 'the newer id sorts first');
    assert.equal(nsOfEventId(idA), a);
    assert.notEqual(newEventId(a), newEventId(a), 'same nanosecond, different ids');
    assert.ok(!isEventId('12345') && !isEventId(`${idA}x`) && !isEventId('../../cluster'));
  });

  test('time bounds split keys exactly at a nanosecond', () => {
    const t = 1_700_000_000_123_456_789n;
    const key = (ns: bigint) => `/strata/events/${newEventId(ns)}`;
    assert.ok(key(t) < timeBoundKey(t), 'an event at t is at or after t');
    assert.ok(key(t + 1n) < timeBoundKey(t));
    assert.ok(key(t - 1n) >= timeBoundKey(t), 'an event before t sorts after the bound');
  });

  test('RFC 3339 with nine fractional digits, UTC', () => {
    assert.equal(rfc3339Nano(1_700_000_000_123_456_789n), '2023-11-14T22:13:20.123456789Z');
    assert.equal(rfc3339Nano(1_700_000_000_000_000_000n), '2023-11-14T22:13:20.000000000Z');
  });

  test('ISO-8601 input: fractions, offsets, dates; invalid is undefined', () => {
    assert.equal(parseIsoTimeNs('2023-11-14T22:13:20.123456789Z'), 1_700_000_000_123_456_789n);
    assert.equal(parseIsoTimeNs('2023-11-14T22:13:20Z'), 1_700_000_000_000_000_000n);
    assert.equal(parseIsoTimeNs('2023-11-14T22:13:20'), 1_700_000_000_000_000_000n, 'no offset = UTC');
    assert.equal(parseIsoTimeNs('2023-11-15T00:13:20.5+02:00'), 1_700_000_000_500_000_000n);
    assert.equal(parseIsoTimeNs('2023-11-14T17:13:20-0500'), 1_700_000_000_000_000_000n);
    assert.equal(parseIsoTimeNs('2023-11-14'), 1_699_920_000_000_000_000n);
    for (const bad of ['', 'yesterday', '2023-02-30T00:00:00Z', '2023-13-01', '2023-11-14T25:00:00Z', '1700000000', '2023-11-14T22:13:20.1234567891Z', '2023-11-14T22:13:20+25:00']) {
      assert.equal(parseIsoTimeNs(bad), undefined, bad);
    }
  });

  test('the wire event has exactly 17 fields, one component set', () => {
    const wire = toEventWire(catalogued('NodeEnteredActiveState', { component: { kind: 'node', ID: 'n1', Name: 'node-1' }, description: 'up' }), 'id', 1_700_000_000_000_000_000n);
    assert.equal(EVENT_FIELDS.length, 17);
    assert.deepEqual(Object.keys(wire).sort(), [...EVENT_FIELDS].sort());
    assert.deepEqual(wire.ComponentNodeInfo, { ID: 'n1', Name: 'node-1' });
    assert.equal(Object.values(wire).filter((v) => v !== null && typeof v === 'object').length, 1);
    assert.equal(wire.EventCode, 2001);
    assert.equal(wire.AssociatedEventID, '');
    assert.equal(wire.CauseCode, 0);
    const integrity = toEventWire({ type: 'DataIntegrity', severity: 'High', eventName: 'DataIntegrityErrorDetected', reportingService: 'NM', description: '', component: { kind: 'dataIntegrity', NodeUUID: 'n', ServerUUID: 's', SSDs: [{ ID: 'S1', Name: 'nvme0' }] } }, 'id', 0n);
    assert.deepEqual(integrity.ComponentDataIntegrityInfo, { NodeUUID: 'n', ServerUUID: 's', SSDs: [{ ID: 'S1', Name: 'nvme0' }] });
  });
});
