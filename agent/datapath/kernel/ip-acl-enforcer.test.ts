// The IP ACL steps of a pass (enforce before the exports change, release after) on the real nft
// in a private network namespace: per-volume failures, ports of other volumes left alone until
// they are gone, nothing changed when nothing differs, and only volumes with an IP ACL failing
// when nftables cannot be used.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { createNetns, type TestNetns } from '../../../test/helpers/netns.js';
import { IpAclEnforcer, type WantedIpAcl } from './ip-acl-enforcer.js';
import { ipAclOf, type IpAcl, type IpAclChange } from './ip-acl.js';
import { NftablesDriver, type IpAclDriver } from './nftables.js';

const V1 = '11111111-1111-4111-8111-111111111111';
const V2 = '22222222-2222-4222-8222-222222222222';
const V3 = '33333333-3333-4333-8333-333333333333';
const want = (entries: [number, string, string[]][]): Map<number, WantedIpAcl> =>
  new Map(entries.map(([port, volumeUUID, ipAcl]) => [port, { volumeUUID, acl: ipAclOf(ipAcl) as IpAcl }]));

describe('IP ACL enforcement without nftables', () => {
  it('fails only the volumes that have an IP ACL, with the reason', async () => {
    const enforcer = new IpAclEnforcer(new NftablesDriver({ command: ['/nonexistent/nft'] }), silentLogger());
    const result = await enforcer.enforce(want([[20001, V1, ['10.0.0.1']], [20002, V2, ['ALLOW_ANY']], [20003, V3, ['ALLOW_NONE']]]));
    assert.deepEqual([...result.failed.keys()].sort(), [V1, V3]);
    assert.match(result.failed.get(V1)!, /^the IP ACL cannot be enforced: nftables cannot be used on this server: the nft command is not installed/);
  });
});

describe('IP ACL enforcement: what an incremental pass reads', () => {
  it('reads no table when the last enforce left exactly what is wanted; reads it when told to check, when the wanted ACLs differ, and after a failure', async () => {
    let table = new Map<number, { restricted: boolean; v4: string[]; v6: string[] }>();
    let reads = 0;
    let refuse = false;
    const counting: IpAclDriver = {
      read: async () => {
        reads += 1;
        return { present: table.size > 0, intact: true, ports: new Map(table) };
      },
      apply: async (changes: readonly IpAclChange[]) => {
        if (refuse) throw new Error('injected');
        for (const c of changes) {
          if (c.kind === 'create') table = new Map([...c.ports].map(([port, r]) => [port, { restricted: r.restricted, v4: [...r.v4], v6: [...r.v6] }]));
          else if (c.kind === 'delete') table = new Map();
          else {
            const cur = table.get(c.port) ?? { restricted: false, v4: [], v6: [] };
            const next = (was: string[], remove: readonly string[], add: readonly string[]) => [...new Set([...was.filter((a) => !remove.includes(a)), ...add])].sort();
            table.set(c.port, { restricted: (cur.restricted && !c.remove.restricted) || c.add.restricted, v4: next(cur.v4, c.remove.v4, c.add.v4), v6: next(cur.v6, c.remove.v6, c.add.v6) });
          }
        }
      },
    };
    const enforcer = new IpAclEnforcer(counting, silentLogger());
    const wanted = want([[20001, V1, ['10.0.0.1']]]);
    await enforcer.enforce(wanted, { check: false });
    const afterFirst = reads;
    assert.ok(afterFirst >= 1, 'nothing known yet: the table is read');
    assert.deepEqual(await enforcer.enforce(want([[20001, V1, ['10.0.0.1']]]), { check: false }), { failed: new Map(), changes: 0 });
    assert.equal(reads, afterFirst, 'the same ports and ACLs: no read');
    await enforcer.enforce(wanted, { check: true });
    assert.equal(reads, afterFirst + 1, 'a full pass checks');
    await enforcer.enforceAdminEndpoints(new Map());
    const afterAdmin = reads;
    await enforcer.enforce(wanted, { check: false });
    assert.equal(reads, afterAdmin, 'the admin endpoints\' resync changed nothing: still no read');
    await enforcer.enforce(want([[20001, V1, ['10.0.0.2']]]), { check: false });
    assert.ok(reads > afterFirst + 1, 'another ACL: read and applied');
    assert.deepEqual(table.get(20001)?.v4, ['10.0.0.2']);
    refuse = true;
    const failed = await enforcer.enforce(want([[20001, V1, ['10.0.0.3']]]), { check: false });
    assert.equal(failed.failed.size, 1);
    refuse = false;
    const beforeRetry = reads;
    await enforcer.enforce(want([[20001, V1, ['10.0.0.3']]]), { check: false });
    assert.ok(reads > beforeRetry, 'after a failure nothing is trusted');
  });
});

const netns = await createNetns();

describe('IP ACL enforcement (real nft, private network namespace)', { skip: typeof netns === 'string' ? netns : false }, () => {
  const ns = netns as TestNetns;
  const driver = new NftablesDriver({ command: ns.nft });
  after(() => ns.remove());

  it('applies every wanted ACL at once, then changes nothing while nothing differs', async () => {
    const enforcer = new IpAclEnforcer(driver, silentLogger());
    const wanted = want([[20001, V1, ['10.0.0.1', '2001:db8::1']], [20002, V2, []], [20003, V3, ['ALLOW_NONE']]]);
    const first = await enforcer.enforce(wanted);
    assert.deepEqual([first.failed.size, first.changes], [0, 1]);
    assert.deepEqual((await driver.read()).ports, new Map([[20001, { restricted: true, v4: ['10.0.0.1'], v6: ['2001:db8::1'] }], [20003, { restricted: true, v4: [], v6: [] }]]));
    const again = await new IpAclEnforcer(driver, silentLogger()).enforce(wanted);
    assert.deepEqual([again.failed.size, again.changes], [0, 0], 'a new process with the table in place changes nothing');
  });

  it('leaves ports of volumes no longer wanted as they are until their export is gone', async () => {
    const enforcer = new IpAclEnforcer(driver, silentLogger());
    await enforcer.enforce(want([[20001, V1, ['10.0.0.1']], [20003, V3, ['ALLOW_NONE']]]));
    // V3 unassigned: its port is still in the kernel target during the pass.
    await enforcer.enforce(want([[20001, V1, ['10.0.0.1']]]));
    assert.ok((await driver.read()).ports.has(20003), 'kept while its export may still be up');
    await enforcer.release(new Set([20001]), new Set([20001, 20003]));
    assert.ok((await driver.read()).ports.has(20003), 'kept while its port exists');
    await enforcer.release(new Set([20001]), new Set([20001]));
    assert.deepEqual([...(await driver.read()).ports.keys()], [20001]);
    await enforcer.enforce(want([[20001, V1, ['ALLOW_ANY']]]));
    assert.equal((await driver.read()).present, false, 'nothing restricted: no table');
  });

  it('charges a refused change to its own volume only', async () => {
    const refusing: IpAclDriver = {
      read: () => driver.read(),
      apply: async (changes: readonly IpAclChange[]) => {
        if (changes.some((c) => c.kind === 'port' && c.port === 20002)) throw new Error('nft refused the change: Error: injected');
        await driver.apply(changes);
      },
    };
    const enforcer = new IpAclEnforcer(refusing, silentLogger());
    assert.equal((await enforcer.enforce(want([[20001, V1, ['10.0.0.1']]]))).failed.size, 0);
    const result = await enforcer.enforce(want([[20001, V1, ['10.0.0.9']], [20002, V2, ['10.0.0.2']], [20003, V3, ['10.0.0.3']]]));
    assert.deepEqual([...result.failed], [[V2, 'the IP ACL cannot be enforced: nft refused the change: Error: injected']]);
    const ports = (await driver.read()).ports;
    assert.deepEqual([ports.get(20001)?.v4, ports.get(20003)?.v4, ports.has(20002)], [['10.0.0.9'], ['10.0.0.3'], false]);
    await new IpAclEnforcer(driver, silentLogger()).enforce(new Map());
  });

  it('keeps admin endpoints (ports outside the volume range) through volume passes, and drops admin-range entries no endpoint wants', async () => {
    const range = { min: 20000, max: 20999 };
    const enforcer = new IpAclEnforcer(driver, silentLogger(), range);
    // Left from an endpoint deleted while no agent ran.
    await new IpAclEnforcer(driver, silentLogger(), range).enforceAdminEndpoints(new Map([[2200, ipAclOf(['10.1.1.1']) as IpAcl]]));
    assert.deepEqual((await enforcer.enforceAdminEndpoints(new Map([[22, ipAclOf(['10.0.0.9']) as IpAcl]]))).size, 0);
    await enforcer.enforce(want([[20001, V1, ['10.0.0.1']]]));
    await enforcer.release(new Set([20001]), new Set([20001]));
    assert.deepEqual((await driver.read()).ports, new Map([[22, { restricted: true, v4: ['10.0.0.9'], v6: [] }], [20001, { restricted: true, v4: ['10.0.0.1'], v6: [] }]]));
    // A fresh process's first volume pass (before the admin endpoints are read) removes nothing of
    // the volume range and drops the admin range only for ports no endpoint has.
    const restarted = new IpAclEnforcer(driver, silentLogger(), range);
    await restarted.enforceAdminEndpoints(new Map([[22, ipAclOf(['10.0.0.9']) as IpAcl]]));
    await restarted.enforce(want([]));
    await restarted.release(new Set(), new Set([20001]));
    assert.deepEqual([...(await driver.read()).ports.keys()], [22, 20001]);
    await restarted.enforceAdminEndpoints(new Map());
    await restarted.release(new Set(), new Set());
    assert.equal((await driver.read()).present, false, 'nothing left: no table');
  });

  it('repairs a table deleted or changed behind its back', async () => {
    const enforcer = new IpAclEnforcer(driver, silentLogger());
    const wanted = want([[20001, V1, ['10.0.0.1']]]);
    await enforcer.enforce(wanted);
    await ns.run('nft', ['delete', 'table', 'inet', 'strata']);
    assert.deepEqual([(await enforcer.enforce(wanted)).changes, (await driver.read()).ports.get(20001)?.v4], [1, ['10.0.0.1']]);
    await ns.run('nft', ['add', 'element', 'inet', 'strata', 'allowed_v4', '{ 10.6.6.6 . 20001 }']);
    assert.equal((await enforcer.enforce(wanted)).changes, 1);
    assert.deepEqual((await driver.read()).ports.get(20001)?.v4, ['10.0.0.1'], 'a foreign address is taken out again');
    await enforcer.enforce(new Map());
  });
});
