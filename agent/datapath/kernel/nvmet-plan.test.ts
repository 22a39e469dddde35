import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { volumeNqnPrefix } from '../../../lib/contract/nqn.js';
import { describeOp, emptyTree, serialOfVolume, STRATA_MODEL, type DesiredExport, type NvmetOp, type NvmetTree } from './nvmet-model.js';
import { planNvmet, type Ownership, type PlanInput } from './nvmet-plan.js';
import { simulateOps, type SimulateOptions } from './nvmet-simulator.js';

const CLUSTER_NQN = 'nqn.2024-01.io.strata:cluster-1';
const PREFIX = volumeNqnPrefix(CLUSTER_NQN);
const V1 = '11111111-1111-4111-8111-111111111111';
const V2 = '22222222-2222-4222-8222-222222222222';
const V3 = '33333333-3333-4333-8333-333333333333';
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000002';
const H3 = 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000003';

function exportOf(volumeUUID: string, overrides: Partial<Omit<DesiredExport, 'namespace' | 'port'>> & { namespace?: Partial<DesiredExport['namespace']>; port?: Partial<DesiredExport['port']> } = {}): DesiredExport {
  const index = [V1, V2, V3].indexOf(volumeUUID) + 1;
  const { namespace, port, ...rest } = overrides;
  return {
    volumeUUID,
    nqn: `${PREFIX}${volumeUUID}`,
    serial: serialOfVolume(volumeUUID),
    model: STRATA_MODEL,
    cntlidMin: 1001,
    cntlidMax: 2000,
    allowAnyHost: false,
    allowedHosts: [H1],
    ...rest,
    namespace: { nsid: index, devicePath: `/pool/volumes/${volumeUUID}.raw`, uuid: volumeUUID, bufferedIo: false, anaGroupId: 1, ...namespace },
    port: { id: 20000 + index, trtype: 'tcp', adrfam: 'ipv4', traddr: '0.0.0.0', trsvcid: String(20000 + index), anaState: 'optimized', ...port },
  };
}

function owned(hosts: string[] = []): Ownership {
  return { subsystemPrefix: PREFIX, portIdMin: 20000, portIdMax: 39999, hosts: new Set(hosts) };
}

const modes: { name: string; sim: SimulateOptions }[] = [
  { name: 'plain directory', sim: { strict: true } },
  { name: 'kernel defaults', sim: { strict: true, kernelDefaults: true } },
];

/** Plans, applies through the strict kernel model, and checks that a re-plan is empty. */
function converge(input: PlanInput, sim: SimulateOptions = { strict: true }): { ops: readonly NvmetOp[]; tree: NvmetTree; plan: ReturnType<typeof planNvmet> } {
  const plan = planNvmet(input);
  const tree = simulateOps(input.observed, plan.ops, sim);
  const hosts = new Set([...input.owned.hosts, ...plan.createdHosts].filter((h) => !plan.removedHosts.includes(h)));
  const again = planNvmet({ ...input, observed: tree, owned: { ...input.owned, hosts }, pendingRelink: new Set(), pendingRevalidate: new Set() });
  assert.deepEqual(again.ops.map(describeOp), [], 'a second plan over the result must be empty');
  return { ops: plan.ops, tree, plan };
}

/** A tree where the desired exports are already in place (as the kernel would show them). */
function established(desired: DesiredExport[], sim: SimulateOptions, hosts: string[] = []): { tree: NvmetTree; owned: Ownership } {
  const { tree, plan } = converge({ desired, observed: emptyTree(), owned: owned(hosts) }, sim);
  return { tree, owned: owned([...hosts, ...plan.createdHosts]) };
}

const ops = (list: readonly NvmetOp[]) => list.map(describeOp);

describe('planNvmet', () => {
  it('creates a volume in the kernel’s order: hosts, subsystem + attributes, namespace (enable last), ACL, port + ANA, link', () => {
    const d = exportOf(V1, { allowedHosts: [H1, H2] });
    const { plan } = converge({ desired: [d], observed: emptyTree(), owned: owned() });
    const nqn = d.nqn;
    assert.deepEqual(ops(plan.ops), [
      `mkdir hosts/${H1}`,
      `mkdir hosts/${H2}`,
      `mkdir subsystems/${nqn}`,
      `write "${d.serial}" to subsystems/${nqn}/attr_serial`,
      `write "Strata Volume" to subsystems/${nqn}/attr_model`,
      `write "1001" to subsystems/${nqn}/attr_cntlid_min`,
      `write "2000" to subsystems/${nqn}/attr_cntlid_max`,
      `mkdir subsystems/${nqn}/namespaces/1`,
      `write "${d.namespace.devicePath}" to subsystems/${nqn}/namespaces/1/device_path`,
      `write "${V1}" to subsystems/${nqn}/namespaces/1/device_uuid`,
      `write "${V1}" to subsystems/${nqn}/namespaces/1/device_nguid`,
      `write "0" to subsystems/${nqn}/namespaces/1/buffered_io`,
      `write "1" to subsystems/${nqn}/namespaces/1/ana_grpid`,
      `write "1" to subsystems/${nqn}/namespaces/1/enable`,
      `write "0" to subsystems/${nqn}/attr_allow_any_host`,
      `link subsystems/${nqn}/allowed_hosts/${H1} -> hosts/${H1}`,
      `link subsystems/${nqn}/allowed_hosts/${H2} -> hosts/${H2}`,
      `mkdir ports/20001`,
      `write "tcp" to ports/20001/addr_trtype`,
      `write "ipv4" to ports/20001/addr_adrfam`,
      `write "0.0.0.0" to ports/20001/addr_traddr`,
      `write "20001" to ports/20001/addr_trsvcid`,
      `write "optimized" to ports/20001/ana_groups/1/ana_state`,
      `link ports/20001/subsystems/${nqn} -> subsystems/${nqn}`,
    ]);
    assert.deepEqual(plan.createdHosts, [H1, H2]);
    assert.ok(plan.ops.filter((o) => o.op !== 'mkdir' || !o.path.startsWith('hosts/')).every((o) => o.volume === V1), 'volume operations carry the volume');
  });

  it('on a real kernel too, a new object gets its ACL and ANA state written explicitly, never left to kernel defaults', () => {
    const d = exportOf(V1, { allowedHosts: [] });
    const { plan } = converge({ desired: [d], observed: emptyTree(), owned: owned() }, { strict: true, kernelDefaults: true });
    const list = ops(plan.ops);
    assert.ok(list.includes(`write "0" to subsystems/${d.nqn}/attr_allow_any_host`), 'ALLOW_NONE is written, not assumed');
    assert.ok(list.includes('write "optimized" to ports/20001/ana_groups/1/ana_state'));
    assert.ok(!list.some((o) => o.includes('allowed_hosts')));
  });

  for (const mode of modes) {
    describe(`(${mode.name})`, () => {
      const table: { name: string; before: DesiredExport[]; after: DesiredExport[]; pendingRelink?: string[]; pendingRevalidate?: string[]; expect: string[] }[] = [
        { name: 'nothing changed: no operation', before: [exportOf(V1)], after: [exportOf(V1)], expect: [] },
        {
          name: 'a host gains access: link it, nobody is disconnected',
          before: [exportOf(V1)],
          after: [exportOf(V1, { allowedHosts: [H1, H2] })],
          expect: [`mkdir hosts/${H2}`, `link subsystems/${PREFIX}${V1}/allowed_hosts/${H2} -> hosts/${H2}`],
        },
        {
          name: 'a host loses access: cut the port link to drop its connections, unlink it, relink the port, then remove its entry',
          before: [exportOf(V1, { allowedHosts: [H1, H2] })],
          after: [exportOf(V1)],
          expect: [
            `unlink ports/20001/subsystems/${PREFIX}${V1}`,
            `unlink subsystems/${PREFIX}${V1}/allowed_hosts/${H2}`,
            `link ports/20001/subsystems/${PREFIX}${V1} -> subsystems/${PREFIX}${V1}`,
            `rmdir hosts/${H2}`,
          ],
        },
        {
          name: 'ALLOW_ANY → a host list: the port link cut, allow_any_host=0 before linking, the port relinked',
          before: [exportOf(V1, { allowAnyHost: true, allowedHosts: [] })],
          after: [exportOf(V1)],
          expect: [
            `mkdir hosts/${H1}`,
            `unlink ports/20001/subsystems/${PREFIX}${V1}`,
            `write "0" to subsystems/${PREFIX}${V1}/attr_allow_any_host`,
            `link subsystems/${PREFIX}${V1}/allowed_hosts/${H1} -> hosts/${H1}`,
            `link ports/20001/subsystems/${PREFIX}${V1} -> subsystems/${PREFIX}${V1}`,
          ],
        },
        {
          name: 'a host list → ALLOW_ANY: unlink hosts before allow_any_host=1, nobody loses access',
          before: [exportOf(V1)],
          after: [exportOf(V1, { allowAnyHost: true, allowedHosts: [] })],
          expect: [
            `unlink subsystems/${PREFIX}${V1}/allowed_hosts/${H1}`,
            `write "1" to subsystems/${PREFIX}${V1}/attr_allow_any_host`,
            `rmdir hosts/${H1}`,
          ],
        },
        {
          name: 'ALLOW_ANY → ALLOW_NONE: everyone loses access',
          before: [exportOf(V1, { allowAnyHost: true, allowedHosts: [] })],
          after: [exportOf(V1, { allowedHosts: [] })],
          expect: [
            `unlink ports/20001/subsystems/${PREFIX}${V1}`,
            `write "0" to subsystems/${PREFIX}${V1}/attr_allow_any_host`,
            `link ports/20001/subsystems/${PREFIX}${V1} -> subsystems/${PREFIX}${V1}`,
          ],
        },
        {
          // A replica's export moving to a new primary: the new primary, admitted while the link is
          // down, cannot connect before the cut that drops the old primary's connections.
          name: 'one host replaces another: the port link cut first, the ACL swapped, the link back',
          before: [exportOf(V1, { allowedHosts: [H2] })],
          after: [exportOf(V1)],
          expect: [
            `mkdir hosts/${H1}`,
            `unlink ports/20001/subsystems/${PREFIX}${V1}`,
            `unlink subsystems/${PREFIX}${V1}/allowed_hosts/${H2}`,
            `link subsystems/${PREFIX}${V1}/allowed_hosts/${H1} -> hosts/${H1}`,
            `link ports/20001/subsystems/${PREFIX}${V1} -> subsystems/${PREFIX}${V1}`,
            `rmdir hosts/${H2}`,
          ],
        },
        {
          name: 'an interrupted revocation (pending relink) is finished even though the ACL already matches',
          before: [exportOf(V1)],
          after: [exportOf(V1)],
          pendingRelink: [`${PREFIX}${V1}`],
          expect: [`unlink ports/20001/subsystems/${PREFIX}${V1}`, `link ports/20001/subsystems/${PREFIX}${V1} -> subsystems/${PREFIX}${V1}`],
        },
        {
          name: 'compression flips buffered_io: disable, change, enable',
          before: [exportOf(V1)],
          after: [exportOf(V1, { namespace: { bufferedIo: true, devicePath: `/pool/volumes/${V1}.zst` } })],
          expect: [
            `write "0" to subsystems/${PREFIX}${V1}/namespaces/1/enable`,
            `write "/pool/volumes/${V1}.zst" to subsystems/${PREFIX}${V1}/namespaces/1/device_path`,
            `write "1" to subsystems/${PREFIX}${V1}/namespaces/1/buffered_io`,
            `write "1" to subsystems/${PREFIX}${V1}/namespaces/1/enable`,
          ],
        },
        {
          name: 'a grown backing: revalidate_size only, no disable',
          before: [exportOf(V1)],
          after: [exportOf(V1)],
          pendingRevalidate: [`${PREFIX}${V1}`],
          expect: [`write "1" to subsystems/${PREFIX}${V1}/namespaces/1/revalidate_size`],
        },
        {
          name: 'ANA flip: only the port group state',
          before: [exportOf(V1)],
          after: [exportOf(V1, { port: { anaState: 'inaccessible' } })],
          expect: [`write "inaccessible" to ports/20001/ana_groups/1/ana_state`],
        },
        {
          name: 'listen address change: unlink, change, relink',
          before: [exportOf(V1)],
          after: [exportOf(V1, { port: { traddr: '10.0.0.5' } })],
          expect: [
            `unlink ports/20001/subsystems/${PREFIX}${V1}`,
            `write "10.0.0.5" to ports/20001/addr_traddr`,
            `link ports/20001/subsystems/${PREFIX}${V1} -> subsystems/${PREFIX}${V1}`,
          ],
        },
        {
          name: 'controller-ID window moved above the current one: max first, then min',
          before: [exportOf(V1)],
          after: [exportOf(V1, { cntlidMin: 3001, cntlidMax: 4000 })],
          expect: [`write "4000" to subsystems/${PREFIX}${V1}/attr_cntlid_max`, `write "3001" to subsystems/${PREFIX}${V1}/attr_cntlid_min`],
        },
        {
          name: 'controller-ID window moved below: min first, then max',
          before: [exportOf(V1)],
          after: [exportOf(V1, { cntlidMin: 1, cntlidMax: 1000 })],
          expect: [`write "1" to subsystems/${PREFIX}${V1}/attr_cntlid_min`, `write "1000" to subsystems/${PREFIX}${V1}/attr_cntlid_max`],
        },
        {
          name: 'a volume moves to another port: unlink, remove the old port, build the new one',
          before: [exportOf(V1)],
          after: [exportOf(V1, { port: { id: 20009, trsvcid: '20009' } })],
          expect: [
            `unlink ports/20001/subsystems/${PREFIX}${V1}`,
            `rmdir ports/20001`,
            `mkdir ports/20009`,
            `write "tcp" to ports/20009/addr_trtype`,
            `write "ipv4" to ports/20009/addr_adrfam`,
            `write "0.0.0.0" to ports/20009/addr_traddr`,
            `write "20009" to ports/20009/addr_trsvcid`,
            `write "optimized" to ports/20009/ana_groups/1/ana_state`,
            `link ports/20009/subsystems/${PREFIX}${V1} -> subsystems/${PREFIX}${V1}`,
          ],
        },
        {
          name: 'a volume is unassigned: teardown in reverse order',
          before: [exportOf(V1), exportOf(V2, { allowedHosts: [H1] })],
          after: [exportOf(V2, { allowedHosts: [H1] })],
          expect: [
            `unlink ports/20001/subsystems/${PREFIX}${V1}`,
            `rmdir ports/20001`,
            `unlink subsystems/${PREFIX}${V1}/allowed_hosts/${H1}`,
            `write "0" to subsystems/${PREFIX}${V1}/namespaces/1/enable`,
            `rmdir subsystems/${PREFIX}${V1}/namespaces/1`,
            `rmdir subsystems/${PREFIX}${V1}`,
          ],
        },
        {
          name: 'a freed port taken by a new volume in the same pass',
          before: [exportOf(V1)],
          after: [exportOf(V2, { port: { id: 20001, trsvcid: '20001' } })],
          expect: [
            `unlink ports/20001/subsystems/${PREFIX}${V1}`,
            `unlink subsystems/${PREFIX}${V1}/allowed_hosts/${H1}`,
            `write "0" to subsystems/${PREFIX}${V1}/namespaces/1/enable`,
            `rmdir subsystems/${PREFIX}${V1}/namespaces/1`,
            `rmdir subsystems/${PREFIX}${V1}`,
            `mkdir subsystems/${PREFIX}${V2}`,
          ],
        },
      ];
      for (const row of table) {
        it(row.name, () => {
          const { tree, owned: own } = established(row.before, mode.sim);
          const input: PlanInput = {
            desired: row.after,
            observed: tree,
            owned: own,
            pendingRelink: new Set(row.pendingRelink ?? []),
            pendingRevalidate: new Set(row.pendingRevalidate ?? []),
          };
          const { plan } = converge(input, mode.sim);
          if (row.name.startsWith('a freed port')) {
            // Only the head is fixed; the rest is the new volume's creation, checked by converge().
            assert.deepEqual(ops(plan.ops).slice(0, row.expect.length), row.expect);
            assert.ok(!ops(plan.ops).includes('rmdir ports/20001'), 'the port is reused, not removed');
          } else {
            assert.deepEqual(ops(plan.ops), row.expect);
          }
          for (const n of row.pendingRelink ?? []) assert.ok(plan.relinked.includes(n));
          for (const n of row.pendingRevalidate ?? []) assert.ok(plan.revalidated.includes(n));
        });
      }
    });
  }

  it('leaves everything that is not Strata’s alone', () => {
    const foreignNqn = 'nqn.2014-08.org.example:disk1';
    const foreignHost = 'nqn.2014-08.org.example:host';
    const foreign = simulateOps(
      emptyTree(),
      [
        { op: 'mkdir', path: `hosts/${foreignHost}` },
        { op: 'mkdir', path: `subsystems/${foreignNqn}` },
        { op: 'write', path: `subsystems/${foreignNqn}/attr_allow_any_host`, value: '0' },
        { op: 'symlink', path: `subsystems/${foreignNqn}/allowed_hosts/${foreignHost}`, target: `hosts/${foreignHost}` },
        { op: 'mkdir', path: `subsystems/${foreignNqn}/namespaces/7` },
        { op: 'write', path: `subsystems/${foreignNqn}/namespaces/7/device_path`, value: '/dev/sdz' },
        { op: 'write', path: `subsystems/${foreignNqn}/namespaces/7/enable`, value: '1' },
        { op: 'mkdir', path: 'ports/1' },
        { op: 'write', path: 'ports/1/addr_trtype', value: 'tcp' },
        { op: 'write', path: 'ports/1/addr_adrfam', value: 'ipv4' },
        { op: 'write', path: 'ports/1/addr_traddr', value: '0.0.0.0' },
        { op: 'write', path: 'ports/1/addr_trsvcid', value: '4420' },
        { op: 'symlink', path: `ports/1/subsystems/${foreignNqn}`, target: `subsystems/${foreignNqn}` },
      ],
      { strict: true },
    );
    assert.deepEqual(ops(planNvmet({ desired: [], observed: foreign, owned: owned() }).ops), []);
    // A Strata volume next to them, then removed again: the foreign objects survive both.
    const { tree } = converge({ desired: [exportOf(V1, { allowedHosts: [foreignHost, H1] })], observed: foreign, owned: owned() });
    const { tree: after, plan } = converge({ desired: [], observed: tree, owned: owned([H1]) });
    assert.ok(!plan.ops.some((o) => o.path.includes(foreignNqn) || o.path === `hosts/${foreignHost}` || o.path.startsWith('ports/1/') || o.path === 'ports/1'));
    assert.deepEqual([...after.hosts], [foreignHost], 'the foreign host entry (not Strata’s) stays; H1 (Strata’s) went');
    assert.deepEqual([...after.subsystems.keys()], [foreignNqn]);
  });

  it('does not remove a Strata host entry another subsystem still links', () => {
    const foreignNqn = 'nqn.2014-08.org.example:disk1';
    const { tree } = established([exportOf(V1)], { strict: true });
    const withForeign = simulateOps(tree, [
      { op: 'mkdir', path: `subsystems/${foreignNqn}` },
      { op: 'write', path: `subsystems/${foreignNqn}/attr_allow_any_host`, value: '0' },
      { op: 'symlink', path: `subsystems/${foreignNqn}/allowed_hosts/${H1}`, target: `hosts/${H1}` },
    ]);
    const { plan } = converge({ desired: [], observed: withForeign, owned: owned([H1]) });
    assert.ok(!ops(plan.ops).includes(`rmdir hosts/${H1}`));
  });

  it('keeps the subsystem, links and port of a volume that could not be prepared', () => {
    const { tree, owned: own } = established([exportOf(V1), exportOf(V2)], { strict: true });
    const plan = planNvmet({ desired: [exportOf(V2)], observed: tree, owned: own, keep: new Set([`${PREFIX}${V1}`]) });
    assert.deepEqual(ops(plan.ops), []);
  });

  it('unlinks a Strata subsystem from a port it is not desired on, even a foreign one, but leaves foreign links on a Strata port it drops', () => {
    const foreignNqn = 'nqn.2014-08.org.example:disk1';
    const { tree, owned: own } = established([exportOf(V1)], { strict: true });
    const odd = simulateOps(tree, [
      { op: 'mkdir', path: 'ports/7' },
      { op: 'write', path: 'ports/7/addr_trtype', value: 'tcp' },
      { op: 'write', path: 'ports/7/addr_adrfam', value: 'ipv4' },
      { op: 'write', path: 'ports/7/addr_traddr', value: '127.0.0.1' },
      { op: 'write', path: 'ports/7/addr_trsvcid', value: '4420' },
      { op: 'symlink', path: `ports/7/subsystems/${PREFIX}${V1}`, target: `subsystems/${PREFIX}${V1}` },
      { op: 'mkdir', path: `subsystems/${foreignNqn}` },
      { op: 'symlink', path: `ports/20001/subsystems/${foreignNqn}`, target: `subsystems/${foreignNqn}` },
    ]);
    const plan = planNvmet({ desired: [], observed: odd, owned: own });
    const list = ops(plan.ops);
    assert.ok(list.includes(`unlink ports/7/subsystems/${PREFIX}${V1}`));
    assert.ok(list.includes(`unlink ports/20001/subsystems/${PREFIX}${V1}`));
    assert.ok(!list.includes('rmdir ports/20001'), 'a foreign link keeps the Strata port');
    assert.ok(!list.includes('rmdir ports/7'));
    assert.ok(!list.some((o) => o.includes(foreignNqn)));
    simulateOps(odd, plan.ops);
  });

  it('removes a stale namespace of a Strata subsystem', () => {
    const { tree, owned: own } = established([exportOf(V1)], { strict: true });
    const { plan } = converge({ desired: [exportOf(V1, { namespace: { nsid: 9 } })], observed: tree, owned: own });
    assert.deepEqual(ops(plan.ops).slice(0, 2), [
      `write "0" to subsystems/${PREFIX}${V1}/namespaces/1/enable`,
      `rmdir subsystems/${PREFIX}${V1}/namespaces/1`,
    ]);
  });

  it('TLS on volume ports: the port is disabled to change addr_tsas/addr_treq and linked again; off writes "none"; a kernel without them (6.1) is left alone', () => {
    const nqn = `${PREFIX}${V1}`;
    const { tree, owned: own } = established([exportOf(V1)], { strict: true });
    assert.equal(tree.ports.get(20001)?.attrs['addr_tsas'], undefined, 'no attribute written while TLS was never wanted');
    const on = converge({ desired: [exportOf(V1, { port: { tls: true } })], observed: tree, owned: own });
    assert.deepEqual(ops(on.plan.ops), [
      `unlink ports/20001/subsystems/${nqn}`,
      'write "tls1.3" to ports/20001/addr_tsas',
      'write "required" to ports/20001/addr_treq',
      `link ports/20001/subsystems/${nqn} -> subsystems/${nqn}`,
    ]);
    const off = converge({ desired: [exportOf(V1)], observed: on.tree, owned: own });
    assert.deepEqual(ops(off.plan.ops), [`unlink ports/20001/subsystems/${nqn}`, 'write "none" to ports/20001/addr_tsas', `link ports/20001/subsystems/${nqn} -> subsystems/${nqn}`]);
    // A new port gets TLS before its first link: no host ever reaches it in clear.
    const fresh = converge({ desired: [exportOf(V2, { port: { tls: true } })], observed: emptyTree(), owned: owned() });
    const names = ops(fresh.plan.ops);
    assert.ok(names.indexOf('write "tls1.3" to ports/20002/addr_tsas') > names.indexOf('write "tcp" to ports/20002/addr_trtype'));
    assert.ok(names.indexOf('write "tls1.3" to ports/20002/addr_tsas') < names.findIndex((o) => o.startsWith('link ports/20002/subsystems/')));
  });

  it('repairs what was deleted behind its back (a link, an attribute, a whole port)', () => {
    const { tree, owned: own } = established([exportOf(V1), exportOf(V2)], { strict: true });
    const damaged = simulateOps(tree, [
      { op: 'unlink', path: `ports/20002/subsystems/${PREFIX}${V2}` },
      { op: 'rmdir', path: 'ports/20002' },
      { op: 'write', path: `subsystems/${PREFIX}${V1}/namespaces/1/enable`, value: '0' },
    ]);
    const { plan } = converge({ desired: [exportOf(V1), exportOf(V2)], observed: damaged, owned: own });
    assert.ok(ops(plan.ops).includes(`write "1" to subsystems/${PREFIX}${V1}/namespaces/1/enable`));
    assert.ok(ops(plan.ops).includes('mkdir ports/20002'));
  });

  it('converges from any state to any state, never disturbing a host that keeps access (randomized)', () => {
    let seed = 42;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const pick = <T,>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
    const randomExport = (v: string, i: number): DesiredExport => {
      const acl = pick(['any', 'none', 'list']);
      const hosts = [H1, H2, H3].filter(() => random() < 0.5);
      const port = pick([20000 + i, 20010 + i]);
      return exportOf(v, {
        allowAnyHost: acl === 'any',
        allowedHosts: acl === 'list' ? hosts : [],
        cntlidMin: pick([1, 1001, 2001]),
        cntlidMax: pick([3000, 1000 + 3000]),
        namespace: { nsid: pick([i, i + 10]), bufferedIo: random() < 0.5, devicePath: pick(['/a', '/b']) + v },
        port: { id: port, trsvcid: String(port), traddr: pick(['0.0.0.0', '127.0.0.1']), anaState: pick(['optimized', 'inaccessible'] as const) },
      });
    };
    for (let round = 0; round < 300; round++) {
      const sim = round % 2 === 0 ? { strict: true } : { strict: true, kernelDefaults: true };
      const before = [V1, V2, V3].filter(() => random() < 0.7).map((v, i) => randomExport(v, i + 1));
      const after = [V1, V2, V3].filter(() => random() < 0.7).map((v, i) => randomExport(v, i + 1));
      const { tree, owned: own } = established(before, sim);
      const { plan } = converge({ desired: after, observed: tree, owned: own }, sim);
      for (const d of after) {
        const old = before.find((b) => b.volumeUUID === d.volumeUUID);
        if (!old || old.port.id !== d.port.id || old.port.traddr !== d.port.traddr) continue;
        const lost = (old.allowAnyHost && !d.allowAnyHost) || (!d.allowAnyHost && old.allowedHosts.some((h) => !d.allowedHosts.includes(h)));
        const cycled = plan.ops.some((o) => o.op === 'unlink' && o.path === `ports/${d.port.id}/subsystems/${d.nqn}`);
        assert.equal(cycled, lost, `round ${round}: ${d.volumeUUID} port link cycled=${cycled} but lost=${lost}`);
      }
    }
  });
});
