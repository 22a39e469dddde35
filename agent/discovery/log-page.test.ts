import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeRecord, ServerRecord, VolumeAssignment } from '../../lib/records.js';
import { testAssignment } from '../../test/kits/datapath/test-assignment.js';
import { buildDiscoveryView, parseEndpoint, type ClusterPathState } from './cluster-paths.js';
import { HostLogs } from './host-logs.js';
import { decodeDiscoveryLog, encodeDiscoveryLog, entriesForHost, entriesKey, makeDiscoveryView, type VolumePath } from './log-page.js';

const CLUSTER_NQN = 'nqn.2016-01.io.strata:cluster:test';
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000002';
const H3 = 'nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000003';
const nqn = (v: string) => `${CLUSTER_NQN}:vol:${v}`;
const path = (volumeUUID: string, acl: string[], traddr: string, port: number, nodeUUID = 'n1'): VolumePath => ({ volumeUUID, nodeUUID, subsystemNQN: nqn(volumeUUID), acl, traddr, port });

describe('discovery log page', () => {
  const view = makeDiscoveryView(
    CLUSTER_NQN,
    [
      path('v1', [H1], '10.0.0.1', 20001),
      path('v1', [H1], '10.0.0.2', 20001, 'n2'),
      path('v2', ['ALLOW_ANY'], '10.0.0.1', 20002),
      path('v3', ['ALLOW_NONE'], '10.0.0.1', 20003),
      path('v4', [H1, H2], 'fd00::1', 20004),
      path('v5', [], '10.0.0.1', 20005),
    ],
    [{ traddr: '10.0.0.2', port: 8009 }],
  );
  const summary = (host: string) => entriesForHost(view, host).map((e) => `${e.subtype} ${e.subnqn.replace(`${CLUSTER_NQN}:vol:`, '')} ${e.traddr}:${e.trsvcid}`);

  it('lists every path of each volume whose ACL admits the host, then referrals', () => {
    assert.deepEqual(summary(H1), [
      '2 v1 10.0.0.1:20001',
      '2 v1 10.0.0.2:20001',
      '2 v2 10.0.0.1:20002',
      '2 v4 fd00::1:20004',
      '1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.2:8009',
    ]);
    assert.deepEqual(summary(H2), ['2 v2 10.0.0.1:20002', '2 v4 fd00::1:20004', '1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.2:8009']);
    assert.deepEqual(summary(H3), ['2 v2 10.0.0.1:20002', '1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.2:8009'], 'ALLOW_ANY only');
  });

  it('with TLS required, volume entries say TREQ required and TSAS TLS 1.3; referrals stay plain; the page changes', () => {
    const tls = makeDiscoveryView(CLUSTER_NQN, [path('v1', [H1], '10.0.0.1', 20001)], [{ traddr: '10.0.0.2', port: 8009 }], true);
    const entries = entriesForHost(tls, H1);
    const page = encodeDiscoveryLog(1n, entries);
    const [volume, referral] = [page.subarray(1024, 2048), page.subarray(2048, 3072)];
    assert.deepEqual([volume[3], volume[768]], [0x01, 0x02]);
    assert.deepEqual([referral[3], referral[768]], [0x00, 0x00]);
    const plain = entriesForHost(makeDiscoveryView(CLUSTER_NQN, [path('v1', [H1], '10.0.0.1', 20001)], [{ traddr: '10.0.0.2', port: 8009 }]), H1);
    assert.notEqual(entriesKey(entries), entriesKey(plain));
  });

  it('gives a host in no ACL no volume at all (ALLOW_NONE and empty ACLs admit nobody)', () => {
    const closed = makeDiscoveryView(CLUSTER_NQN, [path('v3', ['ALLOW_NONE'], '10.0.0.1', 20003), path('v5', [], '10.0.0.1', 20005)], []);
    assert.deepEqual(entriesForHost(closed, H1), []);
  });

  it('encodes header and entries in the NVMe over Fabrics layout', () => {
    const entries = entriesForHost(view, H1);
    const page = encodeDiscoveryLog(42n, entries);
    assert.equal(page.length, 1024 + 5 * 1024);
    assert.equal(page.readBigUInt64LE(0), 42n);
    assert.equal(page.readBigUInt64LE(8), 5n);
    const first = page.subarray(1024, 2048);
    assert.deepEqual([first[0], first[1], first[2], first[3], first.readUInt16LE(4), first.readUInt16LE(6), first.readUInt16LE(8)], [3, 1, 2, 0, 20001, 0xffff, 32]);
    assert.equal(first.subarray(32, 37).toString(), '20001');
    assert.equal(first[37], 0, 'TRSVCID NUL-padded');
    const v4 = page.subarray(1024 + 3 * 1024, 1024 + 4 * 1024);
    assert.equal(v4[1], 2, 'IPv6 address family');
    const decoded = decodeDiscoveryLog(page);
    assert.deepEqual(decoded.entries.map((e) => [e.subtype, e.traddr, e.trsvcid, e.subnqn]), entries.map((e) => [e.subtype, e.traddr, e.trsvcid, e.subnqn]));
    assert.equal(decoded.entries[4]!.subnqn, 'nqn.2014-08.org.nvmexpress.discovery');
  });

  it('parses discovery endpoints', () => {
    assert.deepEqual(parseEndpoint('10.0.0.1:8009'), { traddr: '10.0.0.1', port: 8009 });
    assert.deepEqual(parseEndpoint('[fd00::2]:8009'), { traddr: 'fd00::2', port: 8009 });
    assert.equal(parseEndpoint(''), undefined);
    assert.equal(parseEndpoint('storage-1:8009'), undefined, 'a host name is no transport address');
  });
});

describe('which paths are listed', () => {
  const node = (UUID: string, serverUUID: string, discoveryEndpoint = ''): NodeRecord => ({
    UUID, serverUUID, name: UUID, hostname: UUID, nvmeEndpoint: '', discoveryEndpoint, failureDomains: [], maxNvmeDevices: 1, managedDeviceSerials: [], journalDeviceSerial: '', ec: false, createdAt: '',
  });
  const server = (UUID: string, address: string): ServerRecord => ({ UUID, name: UUID, hostname: UUID, nodeUUIDs: [], endpoints: [address], createdAt: '' });
  const assignment = (volumeUUID: string, nodeUUID: string, overrides: Partial<VolumeAssignment> = {}) =>
    testAssignment({ volumeUUID, nodeUUID, subsystemNQN: nqn(volumeUUID), nsid: 1, port: 20001, acl: [H1], ...overrides });
  const state = (overrides: Partial<ClusterPathState> & { served?: Record<string, number> } = {}): ClusterPathState => ({
    cluster: { UUID: 'c', clusterName: 'c', subsystemNQN: CLUSTER_NQN, supportedMaxReplicas: 3, createdAt: '', bootstrappedBy: '' },
    servers: new Map([['s1', server('s1', '10.0.0.1')], ['s2', server('s2', '10.0.0.2')], ['s3', server('s3', '10.0.0.3')]]),
    nodes: [node('n1', 's1', '10.0.0.1:8009'), node('n2', 's2', '10.0.0.2:8009'), node('n3', 's3', '10.0.0.3:8009')],
    presentServers: new Set(['s1', 's2']),
    assignments: [assignment('v1', 'n1'), assignment('v1', 'n2', { anaState: 'inaccessible', role: 'replica' }), assignment('v1', 'n3')],
    status: (v, n) => {
      const generation = (overrides.served ?? { 'v1/n1': 1, 'v1/n2': 1, 'v1/n3': 1 })[`${v}/${n}`];
      return generation === undefined ? undefined : { state: 'Served', generation };
    },
    localServerUUID: 's1',
    ...overrides,
  });
  const paths = (s: ClusterPathState) => entriesForHost(buildDiscoveryView(s), H1).map((e) => `${e.subtype} ${e.traddr}:${e.trsvcid}`);

  it('lists Served paths on Active nodes and refers to the other Active nodes', () => {
    assert.deepEqual(paths(state()), ['2 10.0.0.1:20001', '2 10.0.0.2:20001', '1 10.0.0.2:8009'], 'n3 is Inactive; n1 is this node (no referral to itself)');
  });

  it('leaves out a path until its node serves the assignment’s generation', () => {
    assert.deepEqual(paths(state({ served: { 'v1/n1': 1 } })), ['2 10.0.0.1:20001', '1 10.0.0.2:8009'], 'n2 has not reported it Served');
    assert.deepEqual(
      paths(state({ assignments: [assignment('v1', 'n1', { generation: 2 }), assignment('v1', 'n2', { generation: 2 })], served: { 'v1/n1': 2, 'v1/n2': 1 } })),
      ['2 10.0.0.1:20001', '1 10.0.0.2:8009'],
      'n2 still serves generation 1 (its ACL may not admit the host yet)',
    );
    const failed: ClusterPathState = { ...state(), status: () => ({ state: 'Failed', generation: 1 }) };
    assert.deepEqual(paths(failed), ['1 10.0.0.2:8009']);
  });

  it('uses each node’s own assignment ACL', () => {
    const s = state({ assignments: [assignment('v1', 'n1', { acl: [H2] }), assignment('v1', 'n2')] });
    assert.deepEqual(paths(s), ['2 10.0.0.2:20001', '1 10.0.0.2:8009']);
  });

  it('accepts only the cluster’s subsystemNQN besides the well-known one', () => {
    assert.equal(buildDiscoveryView(state()).clusterSubsystemNQN, CLUSTER_NQN);
    assert.equal(buildDiscoveryView(state({ cluster: undefined })).clusterSubsystemNQN, '');
  });
});

describe('per-host log pages', () => {
  const v = (acl: string[]) => makeDiscoveryView(CLUSTER_NQN, [path('v1', acl, '10.0.0.1', 20001)], []);

  it('changes a host’s genctr only when its own entries change, and tells only its connections', () => {
    const logs = new HostLogs();
    logs.setView(v([H1]));
    const told: string[] = [];
    const h1 = logs.attach(H1, () => told.push('h1'));
    const h2 = logs.attach(H2, () => told.push('h2'));
    const h1b = logs.attach(H1, () => told.push('h1b'));
    const [g1, g2] = [h1.genctr(), h2.genctr()];
    assert.notEqual(g1, g2);
    assert.equal(decodeDiscoveryLog(h1.page()).entries.length, 1);
    assert.equal(decodeDiscoveryLog(h2.page()).entries.length, 0);

    logs.setView(v([H1]));
    assert.deepEqual(told, [], 'an equal view changes nothing');
    logs.setView(v([H1, H2]));
    assert.deepEqual(told, ['h2']);
    assert.equal(h1.genctr(), g1);
    assert.ok(h2.genctr() > g2);
    assert.equal(decodeDiscoveryLog(h2.page()).genctr, h2.genctr());
    logs.setView(v([]));
    assert.deepEqual(told, ['h2', 'h1', 'h1b', 'h2']);

    h1.detach();
    h1b.detach();
    h2.detach();
    assert.equal(logs.hostCount, 0, 'hosts without connections are forgotten');
  });
});
