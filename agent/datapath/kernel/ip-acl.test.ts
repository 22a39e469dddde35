// IP ACLs as firewall state: what an assignment's ipAcl asks for, and the smallest change from
// one table to another.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ABSENT_TABLE, canonicalAddress, ipAclOf, planIpAcls, portsThatDiffer, wantedTable, type IpAcl, type IpAclTable, type ObservedIpAcls } from './ip-acl.js';

const acl = (v4: string[] = [], v6: string[] = [], restricted = true): IpAcl => ({ restricted, v4, v6 });
const present = (ports: IpAclTable, intact = true): ObservedIpAcls => ({ present: true, intact, ports });

describe('ipAclOf', () => {
  it('reads the pseudo entries like the API: empty and ALLOW_ANY restrict nothing, ALLOW_NONE allows no one', () => {
    assert.deepEqual(ipAclOf([]), acl([], [], false));
    assert.deepEqual(ipAclOf(['ALLOW_ANY']), acl([], [], false));
    assert.deepEqual(ipAclOf(['ALLOW_NONE']), acl());
    assert.match(String(ipAclOf(['ALLOW_ANY', '10.0.0.1'])), /must stand alone/);
    assert.match(String(ipAclOf(['ALLOW_NONE', 'ALLOW_ANY'])), /must stand alone/);
  });

  it('sorts, deduplicates and canonicalizes addresses; IPv4-mapped IPv6 allows the IPv4 address', () => {
    assert.deepEqual(ipAclOf(['10.0.0.2', '10.0.0.1', '10.0.0.2', '2001:DB8:0:0::1', '::ffff:192.0.2.9', '::1']), acl(['10.0.0.1', '10.0.0.2', '192.0.2.9'], ['2001:db8::1', '::1']));
  });

  it('refuses what is not a plain address', () => {
    for (const bad of ['10.0.0.0/24', '2001:db8::/64', 'fe80::1%eth0', 'host.example', '010.0.0.1', '', '1.2.3.4 ', '256.1.1.1']) {
      assert.match(String(ipAclOf([bad])), /invalid address in the IP ACL/, bad);
    }
  });

  it('gives IPv6 addresses the form nft prints', () => {
    assert.deepEqual(canonicalAddress('2001:0db8:0000:0000:0000:0000:0000:0001'), { family: 6, text: '2001:db8::1' });
    assert.deepEqual(canonicalAddress('2001:db8:0:1:0:0:0:1'), { family: 6, text: '2001:db8:0:1::1' });
    assert.deepEqual(canonicalAddress('2001:db8:1:1:1:1:0:1'), { family: 6, text: '2001:db8:1:1:1:1:0:1' });
    assert.deepEqual(canonicalAddress('::FFFF:10.1.2.3'), { family: 4, text: '10.1.2.3' });
  });
});

describe('planIpAcls', () => {
  const table = (entries: [number, IpAcl][]): IpAclTable => new Map(entries);

  it('does nothing when nothing is restricted and there is no table, and drops a table no longer needed', () => {
    assert.deepEqual(planIpAcls(new Map(), ABSENT_TABLE), []);
    assert.deepEqual(planIpAcls(table([[20001, acl([], [], false)]]), ABSENT_TABLE), []);
    assert.deepEqual(planIpAcls(new Map(), present(new Map())), [{ kind: 'delete' }]);
    assert.deepEqual(planIpAcls(new Map(), present(table([[20001, acl(['10.0.0.1'])]]))), [{ kind: 'delete' }]);
  });

  it('creates a missing table and rebuilds one that is not exactly ours, with every entry', () => {
    const want = table([[20001, acl(['10.0.0.1'])], [20002, acl()]]);
    assert.deepEqual(planIpAcls(want, ABSENT_TABLE), [{ kind: 'create', replace: false, ports: want }]);
    assert.deepEqual(planIpAcls(want, present(want, false)), [{ kind: 'create', replace: true, ports: want }]);
  });

  it('changes only the elements that differ, port by port', () => {
    const have = present(table([[20001, acl(['10.0.0.1', '10.0.0.2'])], [20002, acl([], ['2001:db8::1'])], [20003, acl(['10.9.9.9'])]]));
    const want = table([[20001, acl(['10.0.0.2', '10.0.0.3'])], [20002, acl([], ['2001:db8::1'])], [20004, acl()]]);
    assert.deepEqual(planIpAcls(want, have), [
      { kind: 'port', port: 20001, add: { restricted: false, v4: ['10.0.0.3'], v6: [] }, remove: { restricted: false, v4: ['10.0.0.1'], v6: [] } },
      { kind: 'port', port: 20003, add: { restricted: false, v4: [], v6: [] }, remove: { restricted: true, v4: ['10.9.9.9'], v6: [] } },
      { kind: 'port', port: 20004, add: { restricted: true, v4: [], v6: [] }, remove: { restricted: false, v4: [], v6: [] } },
    ]);
    assert.deepEqual(planIpAcls(want, present(want)), []);
    assert.deepEqual([...portsThatDiffer(want, have.ports)].sort(), [20001, 20003, 20004]);
  });

  it('drops leftover elements of a port that is not restricted', () => {
    const have = present(table([[20001, acl(['10.0.0.1'])], [20002, acl(['10.0.0.5'], [], false)]]));
    assert.deepEqual(planIpAcls(table([[20001, acl(['10.0.0.1'])]]), have), [
      { kind: 'port', port: 20002, add: { restricted: false, v4: [], v6: [] }, remove: { restricted: false, v4: ['10.0.0.5'], v6: [] } },
    ]);
  });
});

describe('wantedTable', () => {
  it('takes wanted ports from their ACLs and keeps every other port as it is unless told otherwise', () => {
    const observed = new Map([[20001, acl(['10.0.0.1'])], [20002, acl(['10.0.0.2'])], [20003, acl(['10.0.0.3'])]]);
    const wanted = new Map([[20001, acl([], [], false)], [20004, acl(['10.0.0.4'])]]);
    assert.deepEqual(wantedTable(wanted, observed), new Map([[20002, acl(['10.0.0.2'])], [20003, acl(['10.0.0.3'])], [20004, acl(['10.0.0.4'])]]));
    assert.deepEqual(wantedTable(wanted, observed, (p) => p !== 20003), new Map([[20002, acl(['10.0.0.2'])], [20004, acl(['10.0.0.4'])]]));
  });
});
