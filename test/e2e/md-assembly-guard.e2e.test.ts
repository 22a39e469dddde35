// udev's incremental md assembly against replicated volumes' devices, on the kernel with udevd
// running (agent/datapath/replication/md-assembly-guard.ts). A copy's node keeps a loop device over
// its backing, which carries the volume's md superblock; a primary connects the replicas' legs over
// NVMe/TCP. Without the agent's rule (and without `AUTO -all` in mdadm.conf) udev's
// `mdadm --incremental` makes an array of its own over such a device; with the rule it leaves
// them alone, and the agent's own assembly over the same devices still works.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { labKernelLabel, repoRoot, startGuest, type Guest } from './lab/index.js';

const skip =
  process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : process.env['STRATA_E2E_KERNEL_SUITE'] === 'bookworm' ? 'the platform kernel (6.12) only: udev and mdadm are the userland’s' : false;

const VOLUME = '7d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b';
/** block-stack.ts's mdNameOf(VOLUME). */
const ARRAY_NAME = `strata-${VOLUME.replace(/-/g, '').slice(0, 24)}`;
const REPLICATION_NQN = `nqn.2016-01.com.lightbitslabs:uuid:11111111-2222-4333-8444-555555555555:vol:${VOLUME}:rep:node-b`;
const GUARD_MODULE = join(repoRoot, 'dist', 'agent', 'datapath', 'replication', 'md-assembly-guard.js');
const RUNNER_MODULE = join(repoRoot, 'dist', 'agent', 'datapath', 'pool', 'storage-pool.js');

describe(`e2e: udev's incremental md assembly leaves replicated volumes' devices to the agent (${labKernelLabel()})`, { timeout: 300_000, skip }, () => {
  let guest: Guest | undefined;
  const g = (): Guest => {
    assert.ok(guest, 'the guest did not start');
    return guest;
  };
  const sh = async (command: string) => (await g().runOk(['sh', '-c', command], { timeoutMs: 60_000 })).stdout;
  /** Arrays the kernel has (md127, md_…), none when it is empty. */
  const arrays = async () => (await sh('ls /sys/block | grep "^md" || true')).split('\n').filter(Boolean);
  const stopArrays = () => sh('for m in $(ls /sys/block | grep "^md"); do mdadm --stop /dev/$m; done; udevadm settle');

  before(async () => {
    guest = await startGuest({ name: 'md-guard', udev: true, memoryMiB: 768 });
    // Two legs of a replicated volume's array, both superblocks counting both legs (as a live
    // copy's does), the array stopped again: what a copy's node holds between promotions.
    await sh(
      `truncate -s 96M /tmp/local.img /tmp/copy.img && A=$(losetup -f --show /tmp/local.img) && B=$(losetup -f --show /tmp/copy.img) && ` +
        `mdadm --create /dev/md/t --run --level=1 --raid-devices=2 --metadata=1.2 --bitmap=internal --homehost='<none>' --name=${ARRAY_NAME} --assume-clean $A $B && ` +
        `mdadm --stop /dev/md/t && losetup -D && udevadm settle`,
    );
    await stopArrays();
  }, { timeout: 180_000 });

  after(async () => {
    await guest?.stop();
  }, { timeout: 60_000 });

  it('without the rule, udev assembles an array over a loop device of a copy (the hazard)', { timeout: 60_000 }, async (t) => {
    if (/^\s*AUTO\b/m.test(await sh('cat /etc/mdadm/mdadm.conf /etc/mdadm.conf 2>/dev/null || true'))) {
      t.skip('mdadm.conf has an AUTO line: udev assembles nothing on its own here');
      return;
    }
    const loop = (await sh('losetup -f --show /tmp/copy.img; udevadm settle')).trim();
    assert.match(loop, /^\/dev\/loop\d+$/);
    const made = await arrays();
    const holders = await sh(`ls /sys/block/${loop.slice('/dev/'.length)}/holders`);
    await stopArrays();
    await sh('losetup -D; udevadm settle');
    assert.ok(made.length > 0, 'udev assembled nothing: the hazard this suite guards against is not there to show');
    assert.match(holders, /^md/m);
  });

  it("with the agent's rule, a loop device over a copy and a replica's NVMe/TCP leg stay free; the agent's assembly still works", { timeout: 120_000 }, async () => {
    const install = `import(${JSON.stringify(GUARD_MODULE)}).then(async (m) => { const { runCommand } = await import(${JSON.stringify(RUNNER_MODULE)}); const logger = { info() {}, warn() {}, error() {}, debug() {} }; console.log(await m.installMdAssemblyGuard({ run: runCommand, logger })); })`;
    const installed = await g().runOk(['node', '--input-type=module', '-e', install], { timeoutMs: 60_000 });
    assert.equal(installed.stdout.trim(), 'written');
    await sh('udevadm settle');

    // The copy's loop device: attached (a change event), then every event again.
    const loop = (await sh('losetup -f --show /tmp/copy.img; udevadm settle')).trim();
    assert.deepEqual(await arrays(), []);
    assert.match(await sh(`udevadm info ${loop}`), /SYSTEMD_READY=0/);
    await sh(`udevadm trigger --action=change ${loop}; udevadm settle`);
    assert.deepEqual(await arrays(), []);
    await sh('losetup -D; udevadm settle');

    // A replica's leg as a primary sees it: the copy exported by nvmet on a replication
    // subsystem, connected over NVMe/TCP (loopback), beside the primary's own loop device.
    const C = '/sys/kernel/config/nvmet';
    await sh(
      `modprobe nvmet-tcp && modprobe nvme-tcp && mkdir ${C}/subsystems/${REPLICATION_NQN} && echo 1 > ${C}/subsystems/${REPLICATION_NQN}/attr_allow_any_host && ` +
        // Exported through a loop device: a file on the guest's tmpfs reports a 1-byte block size.
        `E=$(losetup -f --show /tmp/copy.img) && mkdir ${C}/subsystems/${REPLICATION_NQN}/namespaces/1 && echo $E > ${C}/subsystems/${REPLICATION_NQN}/namespaces/1/device_path && ` +
        `echo 1 > ${C}/subsystems/${REPLICATION_NQN}/namespaces/1/enable && mkdir ${C}/ports/1 && echo tcp > ${C}/ports/1/addr_trtype && ` +
        `echo ipv4 > ${C}/ports/1/addr_adrfam && echo 127.0.0.1 > ${C}/ports/1/addr_traddr && echo 4421 > ${C}/ports/1/addr_trsvcid && ` +
        `ln -s ${C}/subsystems/${REPLICATION_NQN} ${C}/ports/1/subsystems/ && nvme connect -t tcp -a 127.0.0.1 -s 4421 -n ${REPLICATION_NQN} && udevadm settle`,
    );
    // The namespace's block device: the subsystem's head with native multipath (nvme0n1; the
    // controller's own nvme0c0n1 is hidden), else the controller's namespace.
    const leg =
      (await sh(`for s in /sys/class/nvme-subsystem/*; do if [ "$(cat $s/subsysnqn)" = "${REPLICATION_NQN}" ]; then ls $s | grep -m1 -E '^nvme[0-9]+n1$'; fi; done`)).trim() ||
      (await sh(`for d in /sys/class/nvme/nvme*; do if [ "$(cat $d/subsysnqn)" = "${REPLICATION_NQN}" ]; then ls $d | grep -m1 -E '^nvme[0-9]+n1$'; fi; done`)).trim();
    assert.match(leg, /^nvme\d+n1$/, 'the leg did not appear');
    // The namespace may be probed while its size is still 0 (the multipath head gets its
    // capacity from the first live path without an event): a change event, as any later one
    // (a writer closing it, a rescan), has udev read its superblock.
    assert.notEqual((await sh(`blockdev --getsize64 /dev/${leg}`)).trim(), '0');
    await sh(`udevadm trigger --action=change /dev/${leg}; udevadm settle`);
    const local = (await sh('losetup -f --show /tmp/local.img; udevadm settle')).trim();
    assert.deepEqual(await arrays(), [], 'udev assembled an array over the leg or the local loop device');
    const legInfo = await sh(`udevadm info /dev/${leg}`);
    assert.match(legInfo, /ID_FS_TYPE=linux_raid_member/);
    assert.match(legInfo, /SYSTEMD_READY=0/);

    // The agent's assembly (here through mdadm) over the same devices: both legs, running.
    await sh(`mdadm --assemble /dev/md/${ARRAY_NAME} --run ${local} /dev/${leg}`);
    const mdstat = await sh('cat /proc/mdstat');
    assert.match(mdstat, /active raid1/);
    assert.match(mdstat, /\[2\/2\] \[UU\]/);
    await stopArrays();
    await sh(`nvme disconnect -n ${REPLICATION_NQN}; losetup -D; udevadm settle`);
  });
});
