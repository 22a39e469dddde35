// Sizes, durations, endpoints and volume references as the CLI reads them (no daemons).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { controlPlaneSettings } from '../control-plane/config.js';
import { DEFAULT_API_PORT, normalizeEndpoint, resolveConnection } from './connection.js';
import { UsageError } from './errors.js';
import { parseResourceRef } from './resource-ref.js';
import { formatSize, parseDurationMs, parseSize } from './units.js';

const GiB = 1024n ** 3n;

describe('cli units', () => {
  it('parses bytes and binary units, case-insensitive, with an optional space', () => {
    for (const text of ['1073741824', '1073741824b', '1073741824B', '1GiB', '1 gib', '1gib', '1G', '1024MiB', '1048576 KiB']) {
      assert.equal(parseSize(text), GiB, text);
    }
    assert.equal(parseSize('1.5GiB'), (3n * GiB) / 2n);
    assert.equal(parseSize('2TiB'), 2n * 1024n * GiB);
  });

  it('reads decimal units as powers of 1000, as the API does (one parser: lib/contract/size.ts)', () => {
    assert.equal(parseSize('10GB'), 10_000_000_000n);
    assert.equal(parseSize('1gb'), 1_000_000_000n);
    assert.equal(parseSize('1.5 KB'), 1500n);
  });

  it('refuses unknown units, zero, fractions of a byte and garbage with a usage error', () => {
    for (const text of ['10XB', '0', '0GiB', '1.5', '1.3B', '-1GiB', 'GiB', '', 'ten', '99999999PiB']) {
      assert.throws(() => parseSize(text), UsageError, text);
    }
  });

  it('prints sizes in the largest binary unit', () => {
    assert.equal(formatSize(String(GiB)), '1 GiB');
    assert.equal(formatSize(10n * GiB), '10 GiB');
    assert.equal(formatSize((3n * GiB) / 2n), '1.5 GiB');
    assert.equal(formatSize('512'), '512 B');
    assert.equal(formatSize('1000001536'), '953.68 MiB');
    assert.equal(formatSize('not-a-number'), 'not-a-number');
  });

  it('parses durations (a bare number is seconds)', () => {
    assert.equal(parseDurationMs('90', 'x'), 90_000);
    assert.equal(parseDurationMs('500ms', 'x'), 500);
    assert.equal(parseDurationMs('5m', 'x'), 300_000);
    assert.equal(parseDurationMs('1.5h', 'x'), 5_400_000);
    assert.throws(() => parseDurationMs('soon', 'x'), UsageError);
    assert.throws(() => parseDurationMs('0s', 'x'), UsageError);
  });

  it('defaults to the control plane\'s default API port and normalizes endpoints', () => {
    assert.equal(DEFAULT_API_PORT, controlPlaneSettings.apiPort.default);
    assert.equal(normalizeEndpoint('127.0.0.1:8080'), 'https://127.0.0.1:8080', 'host:port means https now that the API is HTTPS by default');
    assert.equal(normalizeEndpoint('https://cp.example:8443/'), 'https://cp.example:8443');
    assert.equal(normalizeEndpoint('http://cp:8080/api/v2/'), 'http://cp:8080');
    assert.throws(() => normalizeEndpoint('ftp://cp'), UsageError);
    assert.throws(() => normalizeEndpoint('http://cp:8080/?token=x'), UsageError);
  });

  it('takes the token from --token, --token-file, STRATA_TOKEN, then the default file', () => {
    const env = { HOME: '/nonexistent-home', STRATA_TOKEN: 'env-token' };
    assert.equal(resolveConnection({ token: 'flag-token' }, env).token, 'flag-token');
    assert.equal(resolveConnection({}, env).token, 'env-token');
    assert.equal(resolveConnection({}, { ...env, STRATA_ENDPOINT: 'http://cp:9000' }).endpoint, 'http://cp:9000');
    assert.equal(resolveConnection({}, env).endpoint, `https://127.0.0.1:${DEFAULT_API_PORT}`);
    assert.throws(() => resolveConnection({}, { HOME: '/nonexistent-home' }), /no API token/);
    assert.throws(() => resolveConnection({ tokenFile: '/nonexistent-home/token' }, env), /cannot read the token file/);
    assert.throws(() => resolveConnection({ token: 'a', tokenFile: 'b' }, env), /not both/);
  });

  it('reads a volume as UUID, project/name, or a name in the default project', () => {
    assert.deepEqual(parseResourceRef('6D8A4C57-1A2B-4C3D-8E9F-0A1B2C3D4E5F', 'volume'), { kind: 'uuid', UUID: '6d8a4c57-1a2b-4c3d-8e9f-0a1b2c3d4e5f' });
    assert.deepEqual(parseResourceRef('p1/vol-1', 'volume'), { kind: 'name', projectName: 'p1', name: 'vol-1' });
    assert.deepEqual(parseResourceRef('vol-1', 'volume'), { kind: 'name', projectName: 'default', name: 'vol-1' });
    for (const bad of ['', '/x', 'p/', 'a/b/c']) assert.throws(() => parseResourceRef(bad, 'volume'), UsageError, bad);
  });
});
