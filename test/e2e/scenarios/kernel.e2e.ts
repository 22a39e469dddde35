// The data path on the real kernel: the agent (dist/agent/main.js, the production path: default
// configfs root, modprobe, configfs-mount check, FilePool on btrfs) runs in a QEMU guest booting
// Debian's 6.1 kernel, against an etcd and a fake control plane on this host (10.0.2.2 from the
// guest). The test writes assignments as the active cluster manager would and checks, from an
// NVMe/TCP initiator in the same guest: identity (serial, model, UUID, controller-ID window),
// ACL, ANA, online resize, revocation (the revoked host is dropped, others are not disturbed),
// restart after kill -9 with zero operations, and teardown.
//
// Not a *.test.ts (host runs must not boot QEMU): run it with
//   node --test --test-reporter=spec dist/test/e2e/datapath.e2e.test.js
// (test/e2e/datapath.e2e.test.ts imports it). STRATA_E2E=0 skips it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { ALLOW_ANY } from '../../../lib/contract/acl.js';
import { volumeSubsystemNQN } from '../../../lib/contract/nqn.js';
import { createEtcdClient } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { ClusterRecord, VolumeAssignment } from '../../../lib/records.js';
import { testAssignment } from '../../kits/datapath/test-assignment.js';
import { startEtcd, type TestEtcd } from '../../helpers/etcd.js';
import { waitUntil } from '../../helpers/wait.js';
import { labKernelLabel, nvmeHostArgs, repoRoot, script, sha256, startGuest, StepTimer, type Guest } from '../lab/index.js';
import { startFakeControlPlane, type FakeControlPlane } from '../../kits/datapath/fake-control-plane.js';
import { GUEST_AGENT_LEASE_ARGS } from '../guest-agent.js';

const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : false;
const CLUSTER: ClusterRecord = {
  UUID: 'c0ffee00-0000-4000-8000-0000000000e2',
  clusterName: 'e2e',
  subsystemNQN: 'nqn.2016-01.io.strata:cluster:c0ffeee2',
  supportedMaxReplicas: 3,
  createdAt: new Date().toISOString(),
  bootstrappedBy: 'e2e',
};
const V1 = '11111111-1111-4111-8111-111111111111';
const V2 = '22222222-2222-4222-8222-222222222222';
const NQN1 = volumeSubsystemNQN(CLUSTER.subsystemNQN, V1);
const NQN2 = volumeSubsystemNQN(CLUSTER.subsystemNQN, V2);
const H1 = 'nqn.2014-08.org.nvmexpress:uuid:e2e00000-0000-4000-8000-000000000001';
const H2 = 'nqn.2014-08.org.nvmexpress:uuid:e2e00000-0000-4000-8000-000000000002';
const MiB = 1024 * 1024;
// One data device: md raid1 over it (the lab's initramfs has no raid0 module).
const POOL_SERIALS = ['STRATA-DP-A'];
const MD_SERIALS = { data: ['STRATA-MD-C', 'STRATA-MD-D', 'STRATA-MD-E'], journal: 'STRATA-MD-J', foreign: 'STRATA-MD-F' };

interface Controller {
  name: string;
  serial: string;
  model: string;
  cntlid: number;
  state: string;
  hostnqn: string;
}

describe(`data path on the real kernel (QEMU guest, ${labKernelLabel()}, nvmet)`, { timeout: 900_000, skip }, () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let plane: FakeControlPlane;
  let guest: Guest | undefined;
  let node = '';
  let agentRun = 0;
  const { step, timings } = new StepTimer();

  const g = (): Guest => {
    assert.ok(guest, 'the guest did not start');
    return guest;
  };
  const sh = async (command: string, timeoutMs = 30_000) => (await g().runOk(['sh', '-c', command], { timeoutMs })).stdout;
  const put = (a: VolumeAssignment) => client.put(keys.assignment(a.nodeUUID, a.volumeUUID)).value(JSON.stringify(a));
  const assignment = (volumeUUID: string, index: number, overrides: Partial<VolumeAssignment> = {}): VolumeAssignment =>
    testAssignment({ volumeUUID, nodeUUID: node, subsystemNQN: volumeSubsystemNQN(CLUSTER.subsystemNQN, volumeUUID), nsid: index, port: 20000 + index, sizeBytes: String(64 * MiB), acl: [H1], ...overrides });
  const served = (volumeUUID: string, generation: number) => plane.waitServed(volumeUUID, generation);

  /** Starts the agent in the guest as a background job; its PID goes to /tmp/agent.pid. */
  function startAgentInGuest(): string {
    agentRun += 1;
    const log = `/tmp/agent.${agentRun}.log`;
    const args = [
      '--etcd-endpoints', `${g().hostAddressFromGuest}:${etcd.clientPort}`,
      '--control-plane-endpoints', `${g().hostAddressFromGuest}:${plane.port}`,
      '--state-dir', '/tmp/agent-state',
      '--pool-dir', '/mnt/pool',
      '--data-devices', POOL_SERIALS.join(','),
      '--volume-listen-address', '127.0.0.1',
      '--hostname', 'dp-guest',
      '--reconcile-interval-seconds', '5',
      '--log-level', 'debug',
      ...GUEST_AGENT_LEASE_ARGS,
    ];
    void g()
      .run(['sh', '-c', 'echo $$ > /tmp/agent.pid; exec node "$0" "$@" > "$LOG" 2>&1', `${repoRoot}/dist/agent/main.js`, ...args], {
        timeoutMs: 900_000,
        env: { LOG: log },
      })
      .catch(() => undefined);
    return log;
  }
  const signalAgent = (signal: 'TERM' | 'KILL') => sh(`kill -${signal} "$(cat /tmp/agent.pid)"`);

  /** The initiator's controllers of a subsystem. */
  async function controllers(nqn: string): Promise<Controller[]> {
    const out = await sh(
      `for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = "${nqn}" ] || continue; ` +
        `echo "\${c##*/}|$(cat $c/serial)|$(cat $c/model)|$(cat $c/cntlid)|$(cat $c/state)|$(cat $c/hostnqn)"; done`,
    );
    return out
      .trim()
      .split('\n')
      .filter((l) => l)
      .map((l) => {
        const [name, serial, model, cntlid, state, hostnqn] = l.split('|');
        return { name: name!, serial: serial!.trim(), model: model!.trim(), cntlid: Number(cntlid), state: state!, hostnqn: hostnqn! };
      });
  }
  const connect = (nqn: string, port: number, hostnqn: string) =>
    g().run(
      ['nvme', 'connect', '-t', 'tcp', '-a', '127.0.0.1', '-s', String(port), '-n', nqn, ...nvmeHostArgs(hostnqn), '--ctrl-loss-tmo', '2', '--reconnect-delay', '1'],
      { timeoutMs: 30_000 },
    );

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    await client.put(keys.cluster()).value(JSON.stringify(CLUSTER));
    plane = await startFakeControlPlane(client, CLUSTER.UUID);
    const drives = [
      ...POOL_SERIALS.map((serial) => ({ serial, sizeMiB: 512 })),
      ...[...MD_SERIALS.data, MD_SERIALS.journal, MD_SERIALS.foreign].map((serial) => ({ serial, sizeMiB: 160 })),
    ];
    guest = await step('boot', () => startGuest({ name: 'datapath', nvmeDrives: drives, memoryMiB: 1536, cpus: 2 }));
    startAgentInGuest();
    const identity = await waitUntil(
      async () => (await g().run(['cat', '/tmp/agent-state/identity.json'])).stdout || false,
      'the agent’s identity in the guest',
      60_000,
      250,
    );
    node = (JSON.parse(identity) as { nodeUUIDs: string[] }).nodeUUIDs[0] as string;
  }, { timeout: 240_000 });

  after(async () => {
    if (guest) {
      await g().run(['nvme', 'disconnect-all']).catch(() => undefined);
      await signalAgent('TERM').catch(() => undefined);
      await guest.stop();
    }
    plane?.kill();
    client?.close();
    await etcd?.stop();
    console.log(`# data path on the real kernel: ${timings.join(', ')}`);
  }, { timeout: 60_000 });

  it('serves assigned volumes with their identity, ACL and ANA state; resizes online', { timeout: 300_000 }, async () => {
    // The node's pool: md over its data device, btrfs, mounted at <poolDir>/<node>.
    assert.match(await sh('cat /proc/mdstat'), /raid1/);
    await put(assignment(V1, 1));
    await put(assignment(V2, 2, { acl: [ALLOW_ANY], compression: true, sizeBytes: String(32 * MiB), cntlidMin: 1001, cntlidMax: 2000 }));
    await step('export two volumes', async () => {
      await served(V1, 1);
      await served(V2, 1);
    });

    // What the agent wrote, as the kernel shows it.
    const configfs = await sh(
      `cd /sys/kernel/config/nvmet && cat subsystems/${NQN1}/attr_serial subsystems/${NQN1}/attr_model subsystems/${NQN1}/namespaces/1/device_path ` +
        `subsystems/${NQN1}/namespaces/1/buffered_io subsystems/${NQN2}/namespaces/2/buffered_io subsystems/${NQN2}/attr_allow_any_host ports/20001/addr_traddr`,
    );
    assert.deepEqual(configfs.trim().split('\n'), [
      '11111111111141118111',
      'Strata Volume',
      `/dev/mapper/strata-${V1}`,
      '0',
      '0',
      '1',
      '127.0.0.1',
    ]);
    // Each namespace is on the volume's device-mapper device, linear onto a loop device over its
    // file: direct I/O for a NOCOW backing, buffered for a compressed one (as buffered_io=1 was).
    const loopOf = async (volume: string) => (await sh(`d=$(dmsetup table strata-${volume} | awk '$3 == "linear" {print $4}'); basename $(readlink -f /sys/dev/block/$d)`)).trim();
    const [loop1, loop2] = [await loopOf(V1), await loopOf(V2)];
    assert.match(loop1, /^loop\d+$/);
    assert.deepEqual((await sh(`cat /sys/block/${loop1}/loop/backing_file /sys/block/${loop1}/loop/dio /sys/block/${loop2}/loop/backing_file /sys/block/${loop2}/loop/dio`)).trim().split('\n'), [
      `/mnt/pool/${node}/volumes/${V1}.raw`,
      '1',
      `/mnt/pool/${node}/volumes/${V2}.zst`,
      '0',
    ]);
    assert.match((await sh(`lsattr -d /mnt/pool/${node}/volumes/${V1}.raw`)).split(' ')[0] ?? '', /C/, 'uncompressed backing is NOCOW');
    assert.match(await sh(`btrfs property get /mnt/pool/${node}/volumes/${V2}.zst compression`), /zstd/);

    // ACL: H1 may connect to V1, H2 may not; V2 takes anyone.
    assert.equal((await step('connect', () => connect(NQN1, 20001, H1))).code, 0);
    const refused = await connect(NQN1, 20001, H2);
    assert.notEqual(refused.code, 0, 'H2 is not in V1’s ACL');
    assert.equal((await connect(NQN2, 20002, H2)).code, 0);
    const [c1] = await controllers(NQN1);
    assert.ok(c1);
    assert.deepEqual([c1.serial, c1.model, c1.state, c1.hostnqn], ['11111111111141118111', 'Strata Volume', 'live', H1]);
    assert.ok(c1.cntlid >= 1 && c1.cntlid <= 1000, `cntlid ${c1.cntlid} in V1's window`);
    const [c2] = await controllers(NQN2);
    assert.ok(c2 && c2.cntlid >= 1001 && c2.cntlid <= 2000, `cntlid ${c2?.cntlid} in V2's window`);

    const ns1 = (await g().runOk(['sh', script('nvme-ns-by-uuid.sh'), V1, '20'])).stdout.trim();
    const block1 = ns1.slice('/dev/'.length);
    assert.equal((await sh(`cat /sys/block/${block1}/size`)).trim(), String((64 * MiB) / 512));
    assert.equal((await sh(`cat /sys/block/${block1}/queue/logical_block_size`)).trim(), '4096', 'the loop device\'s 4 KiB blocks');
    const pattern = randomBytes(MiB);
    await g().runOk(['dd', `of=${ns1}`, 'bs=1M', 'count=1', 'iflag=fullblock', 'oflag=direct', 'status=none'], { input: pattern });
    const back = await g().runOk(['dd', `if=${ns1}`, 'bs=1M', 'count=1', 'iflag=direct', 'status=none']);
    assert.equal(sha256(back.stdoutBytes), sha256(pattern));

    // Connected hosts come from the volume port's TCP connections (addresses only on 6.1).
    await waitUntil(() => plane.latest(V1)?.connected_hosts.some((h) => h.address === '127.0.0.1'), 'V1 connected hosts reported', 30_000, 200);

    // Online resize: the backing grows, revalidate_size tells the kernel, the host sees it.
    await put(assignment(V1, 1, { generation: 2, sizeBytes: String(128 * MiB) }));
    await step('resize', async () => {
      await served(V1, 2);
      await waitUntil(async () => (await sh(`cat /sys/block/${block1}/size`)).trim() === String((128 * MiB) / 512), 'the host to see 128 MiB', 30_000, 250);
    });
    assert.equal((await controllers(NQN1))[0]?.name, c1.name, 'resizing did not reconnect');
    const again = await g().runOk(['dd', `if=${ns1}`, 'bs=1M', 'count=1', 'iflag=direct', 'status=none']);
    assert.equal(sha256(again.stdoutBytes), sha256(pattern), 'data intact after the resize');

    // ANA: V2's path turns inaccessible on this node.
    await put(assignment(V2, 2, { generation: 2, acl: [ALLOW_ANY], compression: true, sizeBytes: String(32 * MiB), cntlidMin: 1001, cntlidMax: 2000, anaState: 'inaccessible' }));
    await served(V2, 2);
    await waitUntil(
      async () => (await sh(`cat /sys/class/nvme/${c2.name}/nvme*c*n*/ana_state 2>/dev/null || true`)).trim() === 'inaccessible',
      'the host to see V2’s path inaccessible',
      30_000,
      250,
    );
  });

  it('revokes a host by dropping its connections, without disturbing anyone else', { timeout: 180_000 }, async () => {
    const [c2] = await controllers(NQN2);
    assert.ok(c2);
    await put(assignment(V1, 1, { generation: 3, sizeBytes: String(128 * MiB), acl: [H2] }));
    await step('revoke', async () => {
      await served(V1, 3);
      // With ctrl-loss-tmo 2 the initiator gives up reconnecting (refused) and removes it.
      await waitUntil(async () => (await controllers(NQN1)).every((c) => c.hostnqn !== H1 || c.state !== 'live'), 'H1’s controller to drop', 30_000, 250);
    });
    // nvme-cli refuses a connect as "already connected" while any controller with the same
    // address and subsystem exists, whatever its host NQN: wait until the initiator has given
    // H1's controller up (ctrl-loss-tmo 2), not merely seen it leave 'live'.
    await waitUntil(async () => (await controllers(NQN1)).every((c) => c.hostnqn !== H1), 'the initiator to remove H1’s controller', 30_000, 250);
    const admitted = await connect(NQN1, 20001, H2);
    assert.equal(admitted.code, 0, `H2 now may connect: ${admitted.stderr}`);
    const still = (await controllers(NQN2))[0];
    assert.deepEqual([still?.name, still?.state], [c2.name, 'live'], 'V2’s host was not disturbed');
  });

  it('restarts after kill -9 with zero operations and no disconnect', { timeout: 180_000 }, async () => {
    const before = [...(await controllers(NQN1)), ...(await controllers(NQN2))].filter((c) => c.state === 'live').map((c) => c.name).sort();
    assert.ok(before.length >= 2);
    await signalAgent('KILL');
    const reportsBefore = plane.reports.length;
    const log = startAgentInGuest();
    await step('restart', () =>
      waitUntil(() => plane.reports.slice(reportsBefore).some((r) => r.sequence === '1'), 'the first report of the new agent process', 90_000, 250),
    );
    assert.equal(plane.latest(V1)?.state, 'VOLUME_SERVED');
    assert.equal(plane.latest(V2)?.state, 'VOLUME_SERVED');
    const lines = await sh(`cat ${log}`);
    assert.ok(!/configfs operation applied/.test(lines), 'no configfs operation after the restart');
    const now = [...(await controllers(NQN1)), ...(await controllers(NQN2))].filter((c) => c.state === 'live').map((c) => c.name).sort();
    assert.deepEqual(now, before, 'every connection survived the restart');
  });

  it('tears down an unassigned volume and keeps serving when the agent stops', { timeout: 180_000 }, async () => {
    await g().runOk(['nvme', 'disconnect', '-n', NQN2]);
    const reportsBeforeV2 = plane.reports.length;
    await client.delete().key(keys.assignment(node, V2));
    await step('teardown', () => plane.waitAbsent(V2, reportsBeforeV2));
    const left = await sh('ls /sys/kernel/config/nvmet/subsystems /sys/kernel/config/nvmet/ports');
    assert.ok(!left.includes(NQN2) && !/\b20002\b/.test(left), left);
    assert.equal((await g().run(['ls', `/mnt/pool/${node}/volumes/${V2}.zst`])).code, 2, 'the backing is gone');
    assert.equal((await g().run(['dmsetup', 'table', `strata-${V2}`])).code, 1, 'its device-mapper device is gone');
    assert.doesNotMatch(await sh('cat /sys/block/loop*/loop/backing_file 2>/dev/null || true'), new RegExp(V2), 'and its loop device');
    await signalAgent('TERM');
    await waitUntil(async () => (await g().run(['sh', '-c', 'kill -0 "$(cat /tmp/agent.pid)"'])).code !== 0, 'the agent to exit', 30_000, 250);
    assert.equal((await controllers(NQN1)).filter((c) => c.state === 'live').length, 1, 'V1 is still served by the kernel');
  });

  it('brings up an md raid5 + write journal + btrfs pool, assembles it again, and refuses foreign devices', { timeout: 180_000 }, async () => {
    const mountPoint = '/mnt/md-test';
    const prepare = async (data: string[], journal: string, ec: boolean, nodeUUID = 'abcdef01-0000-4000-8000-000000000000'): Promise<Record<string, unknown>> => {
      const code = [
        `import { prepareBtrfsMdPool } from '${repoRoot}/dist/agent/datapath/pool/btrfs-md-pool.js';`,
        `import { runCommand } from '${repoRoot}/dist/agent/datapath/pool/storage-pool.js';`,
        `import { createLogger } from '${repoRoot}/dist/lib/logger.js';`,
        'const [nodeUUID, data, journal, ec, mountPoint] = process.argv.slice(1);',
        'try {',
        "  const r = await prepareBtrfsMdPool({ nodeUUID, devices: { dataSerials: data.split(','), journalSerial: journal, ec: ec === 'true' },",
        "    mountPoint, sysfsRoot: '/sys', mountsPath: '/proc/self/mounts', run: runCommand, logger: createLogger('e2e', 'silent') });",
        '  console.log(JSON.stringify(r));',
        '} catch (err) { console.log(JSON.stringify({ error: err.message })); }',
      ].join('\n');
      const out = await g().runOk(['node', '--input-type=module', '-e', code, nodeUUID, data.join(','), journal, String(ec), mountPoint], { timeoutMs: 120_000 });
      return JSON.parse(out.stdout) as Record<string, unknown>;
    };
    const created = await step('md raid5 create', () => prepare(MD_SERIALS.data, MD_SERIALS.journal, true));
    assert.equal(created['error'], undefined, String(created['error']));
    assert.deepEqual([created['level'], created['created'], created['mounted']], ['raid5', true, true]);
    const mdstat = await sh('cat /proc/mdstat');
    assert.match(mdstat, /raid5/);
    assert.match(mdstat, /\(J\)/, 'the journal device is the write journal');
    // 120 s: the new raid5 resyncs and writes its journal meanwhile, so the sync and the stop wait
    // for md under emulation (over 30 s once on an otherwise idle 2-core host).
    await sh(`echo kept > ${mountPoint}/marker && sync && umount ${mountPoint} && mdadm --stop ${String(created['mdDevice'])}`, 120_000);
    const assembled = await step('md assemble', () => prepare(MD_SERIALS.data, MD_SERIALS.journal, true));
    assert.deepEqual([assembled['created'], assembled['mounted']], [false, true], JSON.stringify(assembled));
    assert.equal((await sh(`cat ${mountPoint}/marker`)).trim(), 'kept');
    const again = await prepare(MD_SERIALS.data, MD_SERIALS.journal, true);
    assert.deepEqual([again['created'], again['mounted']], [false, false], 'idempotent while up');
    const foreign = (await g().runOk(['sh', script('nvme-ns-by-serial.sh'), MD_SERIALS.foreign])).stdout.trim();
    await sh(`mkfs.ext4 -q -F ${foreign}`);
    const refused = await prepare([MD_SERIALS.foreign], '', false, 'abcdef02-0000-4000-8000-000000000000');
    assert.match(String(refused['error']), /holds data \(ext4\)/);
    const mixed = await prepare([MD_SERIALS.data[0]!, MD_SERIALS.foreign], '', false, 'abcdef03-0000-4000-8000-000000000000');
    assert.match(String(mixed['error']), /refusing to touch them|holds data/);
    await sh(`umount ${mountPoint} && mdadm --stop ${String(assembled['mdDevice'])}`, 120_000);
  });
});
