// The shared contracts: ACLs, NQNs, UUIDs and sizes read the same in the control plane, the
// agent and the CLI (no daemons).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { accessOf, aclAdmits, ALLOW_ANY, ALLOW_NONE, DEFAULT_ACL, DEFAULT_IP_ACL, mixesPseudoValues } from './acl.js';
import { hostNqnProblem, volumeNqnPrefix, volumeSubsystemNQN } from './nqn.js';
import { formatSize, MAX_SIZE_BYTES, parseSize } from './size.js';
import { isCanonicalUuid, isUuid } from './uuid.js';
import { isUnlimited, sameLimits, UNLIMITED, volumeQosLimits } from './qos.js';

const GiB = 1024n ** 3n;
const HOST = 'nqn.2014-08.org.nvmexpress:uuid:6d8a4c57-1a2b-4c3d-8e9f-0a1b2c3d4e5f';

describe('lib/contract', () => {
  it('ACLs: pseudo-values stand alone; an empty list means its default', () => {
    assert.deepEqual(DEFAULT_ACL, [ALLOW_NONE]);
    assert.deepEqual(DEFAULT_IP_ACL, [ALLOW_ANY]);
    assert.equal(accessOf([], ALLOW_NONE), 'none');
    assert.equal(accessOf([], ALLOW_ANY), 'any');
    assert.equal(accessOf([ALLOW_ANY], ALLOW_NONE), 'any');
    assert.equal(accessOf([ALLOW_NONE], ALLOW_ANY), 'none');
    assert.deepEqual(accessOf([HOST], ALLOW_NONE), [HOST]);
    for (const mixed of [[ALLOW_ANY, HOST], [HOST, ALLOW_NONE], [ALLOW_ANY, ALLOW_NONE], [ALLOW_ANY, ALLOW_ANY]]) {
      assert.equal(mixesPseudoValues(mixed), true, String(mixed));
      assert.equal(accessOf(mixed, ALLOW_NONE), undefined, String(mixed));
    }
    assert.equal(aclAdmits([ALLOW_ANY], HOST), true);
    assert.equal(aclAdmits([ALLOW_NONE], HOST), false);
    assert.equal(aclAdmits([HOST], HOST), true);
    assert.equal(aclAdmits(['nqn.2014-08.org.example:other'], HOST), false);
  });

  it('NQNs: a volume subsystem NQN is <cluster subsystemNQN>:vol:<volume UUID>; host NQNs are checked', () => {
    const cluster = 'nqn.2024-01.io.strata:cluster:0b9d6a3e-0000-4000-8000-000000000001';
    const volume = '6d8a4c57-1a2b-4c3d-8e9f-0a1b2c3d4e5f';
    assert.equal(volumeSubsystemNQN(cluster, volume), `${cluster}:vol:${volume}`);
    assert.ok(volumeSubsystemNQN(cluster, volume).startsWith(volumeNqnPrefix(cluster)));
    assert.equal(hostNqnProblem(HOST), null);
    assert.equal(hostNqnProblem('nqn.2014-08.org.example:host-1'), null);
    for (const bad of ['not-an-nqn', 'nqn.2014-13.org.example', 'nqn.2014-08.org.nvmexpress:uuid:h1', `nqn.2014-08.org.example:${'x'.repeat(220)}`]) {
      assert.notEqual(hostNqnProblem(bad), null, bad);
    }
  });

  it('UUIDs: either case reads; the canonical form is lower case', () => {
    assert.equal(isUuid('6D8A4C57-1A2B-4C3D-8E9F-0A1B2C3D4E5F'), true);
    assert.equal(isUuid('6d8a4c57-1a2b-4c3d-8e9f-0a1b2c3d4e5'), false);
    assert.equal(isUuid(42), false);
    assert.equal(isCanonicalUuid('6d8a4c57-1a2b-4c3d-8e9f-0a1b2c3d4e5f'), true);
    assert.equal(isCanonicalUuid('6D8A4C57-1A2B-4C3D-8E9F-0A1B2C3D4E5F'), false);
  });

  it('sizes: one parser; GB is 10^9, GiB 2^30; fractions only when asked for', () => {
    for (const form of ['1073741824', '1073741824b', '1 gib', '1GiB', '1gib', '1G', 1073741824]) assert.equal(parseSize(form), GiB, String(form));
    assert.equal(parseSize('1GB'), 1_000_000_000n);
    assert.equal(parseSize('10 tb'), 10n * 1000n ** 4n);
    assert.throws(() => parseSize('1.5GiB'), /whole number/);
    assert.equal(parseSize('1.5GiB', { fractions: true }), (3n * GiB) / 2n);
    assert.throws(() => parseSize('1.3B', { fractions: true }), /not a whole number of bytes/);
    assert.throws(() => parseSize('0'), /must be positive/);
    assert.throws(() => parseSize('10XB'), /unknown size unit "xb"/);
    assert.throws(() => parseSize(String(MAX_SIZE_BYTES + 1n)), /too large/);
    assert.equal(formatSize(GiB), '1 GiB');
    assert.equal(formatSize('1000001536'), '953.68 MiB');
  });
  it('QoS: a policy and a size give the server\'s four limits; MB/s and GB are decimal; per-GB never rounds a set limit to unlimited', () => {
    assert.equal(isUnlimited(UNLIMITED), true);
    assert.deepEqual(volumeQosLimits({ kind: 'limitIOPS', write: 200, read: 2000 }, GiB), { readIops: 2000, writeIops: 200, readBytesPerSecond: 0, writeBytesPerSecond: 0 });
    assert.deepEqual(volumeQosLimits({ kind: 'limitBw', write: 20, read: 0 }, GiB), { readIops: 0, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 20_000_000 });
    // 10 GiB = 10.737 GB: 100 IOPS per GB gives 1073.
    assert.deepEqual(volumeQosLimits({ kind: 'limitIOPSPerGB', write: 100, read: 0 }, 10n * GiB), { readIops: 0, writeIops: 1073, readBytesPerSecond: 0, writeBytesPerSecond: 0 });
    assert.equal(volumeQosLimits({ kind: 'limitIOPSPerGB', write: 1, read: 1 }, 1024n * 1024n).writeIops, 1);
    assert.equal(sameLimits(volumeQosLimits({ kind: 'limitIOPS', write: 1, read: 2 }, GiB), { readIops: 2, writeIops: 1, readBytesPerSecond: 0, writeBytesPerSecond: 0 }), true);
    assert.equal(isUnlimited(volumeQosLimits({ kind: 'limitBw', write: 0, read: 0 }, GiB)), true);
  });
});
