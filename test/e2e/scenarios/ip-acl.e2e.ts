// IP ACLs on the real kernel: the agent (dist/agent/main.js) runs in a QEMU guest booting
// Debian's 6.1 kernel, against an etcd and a fake control plane on this host, and enforces each
// volume's IP ACL with nftables on the volume's port. The initiator in the same guest connects
// from two source addresses: 127.0.0.1 (to 127.0.0.1) and 10.0.2.15 (to the guest's own eth0
// address), so one can be allowed while the other is not. The same two source addresses prove
// an admin endpoint (a port outside the volume range, in the same nftables table).
//
// Not a *.test.ts (host runs must not boot QEMU): run it with
//   node --test --test-reporter=spec dist/test/e2e/ip-acl.e2e.test.js
// STRATA_E2E=0 skips it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { ALLOW_ANY } from '../../../lib/contract/acl.js';
import { createEtcdClient } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { VolumeAssignment } from '../../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../helpers/etcd.js';
import { waitUntil } from '../../helpers/wait.js';
import { labKernelLabel, script, sha256, startGuest, StepTimer, type Guest } from '../lab/index.js';
import { startFakeControlPlane, type FakeControlPlane } from '../../kits/datapath/fake-control-plane.js';
import { controllersOf, guestAgent, nvmeConnect, type GuestAgent } from '../../kits/datapath/guest-agent.js';
import { testAssignment } from '../../kits/datapath/test-assignment.js';
import { testCluster, volumeNqn } from '../../kits/datapath/test-cluster.js';
import { GUEST_AGENT_LEASE_ARGS } from '../guest-agent.js';

const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : false;
const CLUSTER = testCluster('ac', 'e2e-ipacl');
const V1 = '11111111-1111-4111-8111-1111111111ac';
const NQN1 = volumeNqn(CLUSTER, V1);
const PORT = 20001;
/** An admin endpoint's port: outside the agent's volume port range. */
const ADMIN_PORT = 2222;
const HOST = 'nqn.2014-08.org.nvmexpress:uuid:e2e00000-0000-4000-8000-0000000000ac';
/** The guest's eth0 address: a connection to it comes from it. */
const GUEST_IP = '10.0.2.15';
const LOOPBACK = '127.0.0.1';
const MiB = 1024 * 1024;

describe(`IP ACLs on the real kernel (QEMU guest, ${labKernelLabel()}, nftables)`, { timeout: 900_000, skip }, () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let plane: FakeControlPlane;
  let guest: Guest | undefined;
  let agent: GuestAgent;
  let agentLog = '';
  let node = '';
  const { step, timings } = new StepTimer();

  const g = (): Guest => {
    assert.ok(guest, 'the guest did not start');
    return guest;
  };
  const sh = async (command: string, timeoutMs = 30_000) => (await g().runOk(['sh', '-c', command], { timeoutMs })).stdout;
  const put = (generation: number, ipAcl: string[]) => {
    const a: VolumeAssignment = testAssignment({
      volumeUUID: V1,
      nodeUUID: node,
      subsystemNQN: NQN1,
      nsid: 1,
      port: PORT,
      sizeBytes: String(64 * MiB),
      acl: [ALLOW_ANY],
      generation,
      ipAcl,
    });
    return client.put(keys.assignment(node, V1)).value(JSON.stringify(a));
  };
  const served = (generation: number) => plane.waitServed(V1, generation);
  const connect = (traddr: string) => nvmeConnect(g(), { nqn: NQN1, traddr, port: PORT, hostnqn: HOST });
  const live = async (traddr: string) => (await controllersOf(g(), NQN1)).filter((c) => c.traddr === traddr && c.state === 'live');
  /** The table as nft shows it in the guest: its handle and the allowed (address, port) pairs. */
  const table = async () => {
    const out = await g().run(['nft', '-j', 'list', 'table', 'inet', 'strata']);
    if (out.code !== 0) return undefined;
    const items = (JSON.parse(out.stdout) as { nftables: Record<string, Record<string, unknown>>[] }).nftables;
    const handle = items.find((i) => i['table'])?.['table']?.['handle'];
    const elems = (name: string) => (items.find((i) => i['set']?.['name'] === name)?.['set']?.['elem'] as unknown[] | undefined) ?? [];
    return { handle, restricted: elems('restricted_ports'), allowed: elems('allowed_v4').map((e) => (e as { concat: [string, number] }).concat.join(' ')) };
  };

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    await client.put(keys.cluster()).value(JSON.stringify(CLUSTER));
    plane = await startFakeControlPlane(client, CLUSTER.UUID);
    guest = await step('boot', () => startGuest({ name: 'ipacl', nvmeDrives: [{ serial: 'STRATA-IPACL-A', sizeMiB: 512 }], memoryMiB: 1536, cpus: 2 }));
    agent = guestAgent(guest, {
      etcdPort: etcd.clientPort,
      controlPlanePort: plane.port,
      args: [
        '--state-dir', '/tmp/agent-state',
        '--pool-dir', '/mnt/pool',
        '--data-devices', 'STRATA-IPACL-A',
        '--volume-listen-address', '0.0.0.0',
        '--hostname', 'ipacl-guest',
        '--reconcile-interval-seconds', '5',
        '--log-level', 'debug',
      ...GUEST_AGENT_LEASE_ARGS,
      ],
    });
    agentLog = agent.start();
    const identity = await waitUntil(async () => (await g().run(['cat', '/tmp/agent-state/identity.json'])).stdout || false, 'the agent’s identity in the guest', 180_000, 250).catch(
      async (err: Error) => {
        throw new Error(`${err.message}; agent log:\n${(await g().run(['tail', '-n', '30', agentLog])).stdout}`);
      },
    );
    node = (JSON.parse(identity) as { nodeUUIDs: string[] }).nodeUUIDs[0] as string;
  }, { timeout: 360_000 });

  after(async () => {
    if (guest) {
      await g().run(['nvme', 'disconnect-all']).catch(() => undefined);
      await agent.signal('TERM').catch(() => undefined);
      await guest.stop();
    }
    plane?.kill();
    client?.close();
    await etcd?.stop();
    console.log(`# IP ACLs on the real kernel: ${timings.join(', ')}`);
  }, { timeout: 60_000 });

  it('refuses a source address outside the IP ACL and admits it once added', { timeout: 300_000 }, async () => {
    await put(1, [GUEST_IP]);
    await step('export with an IP ACL', () => served(1));
    assert.deepEqual(await table().then((t) => [t?.restricted, t?.allowed]), [[PORT], [`${GUEST_IP} ${PORT}`]]);

    const refused = await step('refused connect', () => connect(LOOPBACK));
    assert.notEqual(refused.code, 0, `127.0.0.1 is not in the IP ACL: ${refused.stdout} ${refused.stderr}`);
    assert.match(refused.stderr + refused.stdout, /refused/i);
    assert.deepEqual(await live(LOOPBACK), []);
    const allowed = await connect(GUEST_IP);
    assert.equal(allowed.code, 0, `10.0.2.15 is in the IP ACL: ${allowed.stderr}`);
    assert.equal((await live(GUEST_IP)).length, 1);

    await put(2, [GUEST_IP, LOOPBACK]);
    await step('add an address', () => served(2));
    const admitted = await connect(LOOPBACK);
    assert.equal(admitted.code, 0, `127.0.0.1 was added: ${admitted.stderr}`);
    assert.equal((await live(LOOPBACK)).length, 1);

    // I/O through the volume (both paths are one multipath namespace).
    const ns = (await g().runOk(['sh', script('nvme-ns-by-uuid.sh'), V1, '20'])).stdout.trim();
    const pattern = randomBytes(MiB);
    await g().runOk(['dd', `of=${ns}`, 'bs=1M', 'count=1', 'iflag=fullblock', 'oflag=direct', 'status=none'], { input: pattern });
    const back = await g().runOk(['dd', `if=${ns}`, 'bs=1M', 'count=1', 'iflag=direct', 'status=none']);
    assert.equal(sha256(back.stdoutBytes), sha256(pattern));
  });

  it('drops the connection of an address removed from the IP ACL at once, and only that one', { timeout: 180_000 }, async () => {
    const [kept] = await live(GUEST_IP);
    assert.ok(kept);
    assert.equal((await live(LOOPBACK)).length, 1);
    await put(3, [GUEST_IP]);
    await step('revoke an address (Served)', () => served(3));
    // The initiator's TCP connections to 127.0.0.1 are reset at their next segment (at the
    // latest the next keep-alive).
    await step('revoked connections reset', () =>
      waitUntil(async () => (await sh(`ss -Htn state established dst ${LOOPBACK} dport = :${PORT}`)).trim() === '', 'the 127.0.0.1 connections to be reset', 60_000, 100),
    );
    // Its next segment is answered with a reset; reconnects are refused; with ctrl-loss-tmo 2
    // the initiator gives the controller up.
    await step('revoked controller gone', () => waitUntil(async () => (await live(LOOPBACK)).length === 0, 'the 127.0.0.1 controller to drop', 60_000, 250));
    assert.deepEqual((await live(GUEST_IP)).map((c) => c.name), [kept.name], 'the allowed connection was not disturbed');
    assert.notEqual((await connect(LOOPBACK)).code, 0, 'and 127.0.0.1 is refused again');
    const ns = (await g().runOk(['sh', script('nvme-ns-by-uuid.sh'), V1, '20'])).stdout.trim();
    await g().runOk(['dd', `if=${ns}`, 'bs=1M', 'count=1', 'iflag=direct', 'status=none'], { timeoutMs: 60_000 });
  });

  it('restarts with the table in place without changing it, and repairs it when deleted', { timeout: 240_000 }, async () => {
    const before = await table();
    const [kept] = await live(GUEST_IP);
    assert.ok(before && kept);
    await agent.signal('KILL');
    const reportsBefore = plane.reports.length;
    agentLog = agent.start();
    await step('restart', () => waitUntil(() => plane.reports.slice(reportsBefore).some((r) => r.sequence === '1'), 'the first report of the new agent process', 90_000, 250));
    assert.equal(plane.latest(V1)?.state, 'VOLUME_SERVED');
    const lines = await sh(`cat ${agentLog}`);
    assert.ok(!/nftables IP ACLs applied/.test(lines), 'no nftables change after the restart');
    assert.ok(!/configfs operation applied/.test(lines), 'no configfs operation after the restart');
    assert.deepEqual(await table(), before, 'the same table, untouched');
    assert.deepEqual((await live(GUEST_IP)).map((c) => c.name), [kept.name], 'the connection survived the restart');

    await sh('nft delete table inet strata');
    await step('repair', () => waitUntil(async () => (await table())?.allowed.join() === `${GUEST_IP} ${PORT}`, 'the table to be recreated', 60_000, 250));
    assert.match(await sh(`cat ${agentLog}`), /nftables IP ACLs applied/);
    assert.notEqual((await connect(LOOPBACK)).code, 0, '127.0.0.1 is refused again after the repair');
    assert.deepEqual((await live(GUEST_IP)).map((c) => c.name), [kept.name]);
  });

  it('takes its rules away with the volume', { timeout: 180_000 }, async () => {
    await g().runOk(['nvme', 'disconnect', '-n', NQN1]);
    const reportsBeforeV1 = plane.reports.length;
    await client.delete().key(keys.assignment(node, V1));
    await step('teardown', () => plane.waitAbsent(V1, reportsBeforeV1));
    assert.equal(await table(), undefined, 'no volume restricted: no table');
    assert.doesNotMatch(await sh('nft list tables'), /strata/);
  });

  it('enforces an admin endpoint: its port is reachable from an allowed address and reset from another; updates and deletion apply within seconds', { timeout: 180_000 }, async () => {
    // An administrative service in the guest on ADMIN_PORT (outside the volume port range).
    void g().run(['sh', '-c', 'echo $$ > /tmp/probe.pid; exec python3 "$0" serve "$1"', script('tcp-probe.py'), String(ADMIN_PORT)], { timeoutMs: 900_000 }).catch(() => undefined);
    const reach = async (source: string) => (await g().runOk(['python3', script('tcp-probe.py'), 'connect', source, source, String(ADMIN_PORT)])).stdout.trim();
    await waitUntil(async () => (await reach(LOOPBACK)) === 'open' && (await reach(GUEST_IP)) === 'open', 'the service reachable from both addresses', 30_000, 250);
    const endpoint = (ips: string[]) => client.put(keys.adminEndpoint(ADMIN_PORT)).value(JSON.stringify({ port: ADMIN_PORT, ips, createdAt: new Date().toISOString() }));
    const allowedOf = async () => (await table())?.allowed.filter((a) => a.endsWith(` ${ADMIN_PORT}`)) ?? [];

    await endpoint([GUEST_IP]);
    const applied = await step('admin endpoint applied', () => waitUntil(async () => (await allowedOf()).join() === `${GUEST_IP} ${ADMIN_PORT}`, 'the admin endpoint in nftables', 10_000, 100));
    assert.ok(applied);
    assert.ok((await table())?.restricted.includes(ADMIN_PORT));
    assert.equal(await reach(GUEST_IP), 'open', `${GUEST_IP} is allowed`);
    assert.equal(await reach(LOOPBACK), 'refused', `${LOOPBACK} is not`);

    await endpoint([LOOPBACK]);
    await step('admin endpoint updated', () => waitUntil(async () => (await allowedOf()).join() === `${LOOPBACK} ${ADMIN_PORT}`, 'the update in nftables', 10_000, 100));
    assert.equal(await reach(LOOPBACK), 'open');
    assert.equal(await reach(GUEST_IP), 'refused');

    await client.delete().key(keys.adminEndpoint(ADMIN_PORT));
    await step('admin endpoint deleted', () => waitUntil(async () => (await table()) === undefined, 'the entry gone (and with it the table: nothing else restricted)', 10_000, 100));
    assert.equal(await reach(LOOPBACK), 'open');
    assert.equal(await reach(GUEST_IP), 'open');
    await sh('kill "$(cat /tmp/probe.pid)"');
  });
});
