// NodePools against a real etcd (node records, cluster record), a fake sysfs, and a command
// runner that plays md, blkid, mkfs/mount and btrfs the way the 6.1 kernel and mdadm 4.2 behave
// (sequences read off a QEMU guest; pool.e2e.ts runs the real ones): bring-up, the pool report,
// adding a device (raid1 → raid0 → reshape as a parity-less raid4 → filesystem resize), an agent
// restart mid-grow, the raid4 → raid0 level change made only before mounting (never online), and
// servers without a kernel target.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../../lib/etcd/client.js';
import { ClusterStore } from '../../../lib/etcd/cluster-store.js';
import { NodeStore } from '../../../lib/etcd/node-store.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { ClusterRecord, NodeRecord } from '../../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../../test/helpers/etcd.js';
import { createFakeSysfs, type FakeSysfs } from '../../../test/helpers/sysfs-fixture.js';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { arrayNameOf } from './btrfs-md-pool.js';
import { NodePools, PoolUnavailable } from './node-pools.js';
import type { NodePoolStatus } from './pool-report.js';
import type { CommandRunner } from './storage-pool.js';

const MiB = 1024n * 1024n;
const DEVICE = 512n * MiB;
const NODE = 'abcdef01-2345-4678-8901-234567890abc';
const NAME = arrayNameOf(NODE);
const CLUSTER: ClusterRecord = { UUID: 'c1c1c1c1-0000-4000-8000-000000000000', clusterName: 't', subsystemNQN: 'nqn.2016-01.io.strata:cluster:t', supportedMaxReplicas: 3, createdAt: '', bootstrappedBy: '' };

interface FakeArray {
  level: string;
  raidDisks: number;
  members: { block: string; slot: number | null; flags: string }[];
  syncAction: string;
  reshape: boolean;
  bytes: bigint;
}

/** md, blkid, mkfs, mount and btrfs as the guest showed them, over a fake sysfs. */
class FakeKernel {
  array: FakeArray | undefined;
  filesystemBytes = 0n;
  dataUsed = 0n;
  readonly superblocks = new Map<string, string>();
  readonly calls: string[] = [];
  /** The array is assembled (false: stopped by `mdadm --stop`, or as after a reboot). */
  running = true;
  /** What `mdadm --assemble` fails with (the kernel's reason), when set. */
  assembleFails: string | undefined;

  constructor(private readonly sysfs: FakeSysfs) {}

  readonly run: CommandRunner = async (command, args) => {
    const line = [command, ...args].join(' ');
    this.calls.push(line);
    const ok = (stdout = '') => ({ stdout, stderr: '' });
    const fail = (code: number, stderr = '') => {
      throw Object.assign(new Error(`${command} exited ${code}`), { code, stderr });
    };
    const dev = (path: string) => path.replace('/dev/', '');
    if (command === 'mdadm' && args[0] === '--detail') return this.array && this.running && args[2] === '/dev/md127' ? ok(`MD_LEVEL=${this.array.level}\nMD_NAME=guest:${NAME}\n`) : fail(1);
    if (command === 'mdadm' && args[0] === '--examine') {
      const name = this.superblocks.get(dev(args[2]!));
      return name ? ok(`MD_NAME=guest:${name}\n`) : fail(1);
    }
    if (command === 'blkid') {
      const device = args.at(-1)!;
      if (device === '/dev/md127' || device === `/dev/md/${NAME}`) return this.filesystemBytes > 0n ? ok('btrfs\n') : fail(2);
      return this.superblocks.has(dev(device)) ? ok('linux_raid_member\n') : fail(2);
    }
    if (command === 'mdadm' && args[0] === '--create') {
      const devices = args.filter((a) => a.startsWith('/dev/nvme'));
      this.array = { level: `raid${args.find((a) => a.startsWith('--level='))!.slice(8)}`, raidDisks: devices.length, members: [], syncAction: 'idle', reshape: false, bytes: DEVICE };
      devices.forEach((d, slot) => this.addMember(dev(d), slot));
      this.sync();
      return ok();
    }
    if (command === 'mdadm' && args[0] === '--assemble') {
      assert.ok(this.array, 'assemble of an array that was never created');
      if (this.assembleFails) fail(1, this.assembleFails);
      this.running = true;
      this.sync();
      return ok();
    }
    if (command === 'mdadm' && args[0] === '--stop') {
      assert.ok(this.array && this.running && args[1] === '/dev/md127', `mdadm --stop of ${args[1]}`);
      assert.ok(!readFileSync(this.sysfs.mountsPath, 'utf8').includes('/dev/md127 '), 'md stopped while its filesystem is mounted');
      this.running = false;
      return ok('mdadm: stopped /dev/md127\n');
    }
    if (command === 'umount') {
      // The filesystem's files go with it: the bare mount point is an empty directory.
      const lines = readFileSync(this.sysfs.mountsPath, 'utf8').split('\n');
      if (!lines.some((l) => l.split(' ')[1] === args[0])) fail(32, `umount: ${args[0]}: not mounted.`);
      writeFileSync(this.sysfs.mountsPath, lines.filter((l) => l.split(' ')[1] !== args[0]).join('\n'));
      renameSync(args[0]!, `${args[0]}.unmounted`);
      mkdirSync(args[0]!);
      return ok();
    }
    if (command === 'mkfs.btrfs') {
      this.filesystemBytes = this.array!.bytes;
      return ok();
    }
    if (command === 'mount') {
      assert.ok(this.running, 'mount of a stopped array');
      if (existsSync(`${args[3]}.unmounted`)) {
        assert.deepEqual(readdirSync(args[3]!), [], 'nothing was written under the bare mount point');
        rmSync(args[3]!, { recursive: true });
        renameSync(`${args[3]}.unmounted`, args[3]!);
      }
      writeFileSync(this.sysfs.mountsPath, `${readFileSync(this.sysfs.mountsPath, 'utf8')}/dev/md127 ${args[3]} btrfs rw 0 0\n`);
      return ok();
    }
    if (command === 'mdadm' && args[0] === '--grow' && args[2] === '--level=0') {
      const a = this.array!;
      if (!(a.level === 'raid1' && a.raidDisks === 1) && a.level !== 'raid4') fail(1, 'mdadm: cannot change level');
      if (a.level === 'raid4') a.raidDisks -= 1; // the missing parity slot goes
      a.level = 'raid0';
      this.sync();
      return ok(`mdadm: level of /dev/md127 changed to raid0\n`);
    }
    if (command === 'mdadm' && args[0] === '--grow' && args[2] === '--level=4' && args[3]?.startsWith('--raid-devices=') && args[4] === '--force' && args[5] === '--add') {
      // raid0 (or a parity-less raid4) → raid4 of raid-devices (the last, parity, empty); mdadm's
      // background process ends it as raid4, the level asked for.
      const a = this.array!;
      assert.ok(a.level === 'raid0' || a.level === 'raid4', 'a raid0 grow');
      assert.ok(!a.reshape, 'not while md reshapes');
      const dataBefore = a.members.filter((m) => m.slot !== null).length;
      a.level = 'raid4';
      a.raidDisks = Number(args[3].slice('--raid-devices='.length));
      for (const [i, d] of args.slice(6).entries()) this.addMember(dev(d), dataBefore + i);
      a.syncAction = 'reshape';
      a.reshape = true;
      this.sync();
      return ok();
    }
    if (command === 'btrfs' && args[1] === 'usage') {
      const slack = this.array!.bytes - this.filesystemBytes;
      const free = this.filesystemBytes - 100n * MiB - this.dataUsed;
      return ok(
        `Overall:\n    Device size:\t\t ${this.filesystemBytes}\n    Device slack:\t\t ${slack}\n    Free (estimated):\t\t ${free}\t(min: 1)\n` +
          `\nData,single: Size:${this.dataUsed + 8n * MiB}, Used:${this.dataUsed} (1.00%)\nMetadata,DUP: Size:33554432, Used:163840 (0.49%)\n`,
      );
    }
    if (command === 'btrfs' && args[1] === 'resize') {
      if (this.array!.bytes < 256n * MiB) fail(1, 'ERROR: unable to resize: Invalid argument');
      this.filesystemBytes = this.array!.bytes;
      return ok();
    }
    return fail(127, `${command}: not in this fake`);
  };

  /** md finishes the reshape; the array stays a parity-less raid4. */
  finishReshape(): void {
    const a = this.array!;
    a.syncAction = 'idle';
    a.reshape = false;
    a.bytes = BigInt(a.raidDisks - 1) * DEVICE;
    this.sync();
  }

  private addMember(block: string, slot: number): void {
    this.array!.members.push({ block, slot, flags: 'in_sync' });
    this.superblocks.set(block, NAME);
  }

  /** Writes the array into the fake sysfs the way /sys/block/md127/md shows it. */
  sync(): void {
    const a = this.array!;
    const w = (path: string, value: string) => this.sysfs.write(`block/md127/${path}`, `${value}\n`);
    w('size', String(a.bytes / 512n));
    w('md/level', a.level);
    w('md/raid_disks', String(a.raidDisks));
    w('md/sync_action', a.level === 'raid0' ? '' : a.syncAction);
    w('md/sync_completed', a.reshape ? '209716 / 1048576' : 'none');
    w('md/reshape_position', a.reshape ? '1000' : 'none');
    w('md/degraded', a.level === 'raid4' ? '1' : '0');
    for (const m of a.members) {
      w(`md/dev-${m.block}/state`, m.flags);
      w(`md/dev-${m.block}/slot`, m.slot === null ? 'none' : String(m.slot));
    }
  }
}

describe('node pools', { timeout: 60_000 }, () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let sysfs: FakeSysfs;
  let kernel: FakeKernel;
  let poolDir: string;
  let stateDir: string;
  const started: NodePools[] = [];

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    sysfs = createFakeSysfs();
    for (const [i, serial] of ['D0', 'D1', 'D2'].entries()) {
      sysfs.addController({ name: `nvme${i}`, serial, pciAddress: `0000:0${i}:00.0`, namespaces: [{ name: `nvme${i}n1`, sectors: DEVICE / 512n }] });
    }
    kernel = new FakeKernel(sysfs);
    poolDir = mkdtempSync(join(tmpdir(), 'strata-pools-'));
    stateDir = mkdtempSync(join(tmpdir(), 'strata-pools-state-'));
    await client.put(keys.cluster()).value(JSON.stringify(CLUSTER));
    await putNode(['D0']);
  });
  after(async () => {
    for (const pools of started) await pools.stop();
    client?.close();
    await etcd?.stop();
    sysfs?.cleanup();
    rmSync(poolDir, { recursive: true, force: true });
    rmSync(stateDir, { recursive: true, force: true });
  });

  async function putNode(managedDeviceSerials: string[], ec = false): Promise<void> {
    const node: NodeRecord = {
      UUID: NODE, serverUUID: 's', name: 'n', hostname: 'h', nvmeEndpoint: '', discoveryEndpoint: '', failureDomains: ['h'],
      maxNvmeDevices: 8, managedDeviceSerials, journalDeviceSerial: '', ec, createdAt: '',
    };
    await client.put(keys.node(NODE)).value(JSON.stringify(node));
  }
  function pools(enabled = true): NodePools {
    const p = new NodePools({
      cluster: new ClusterStore(client), nodes: new NodeStore(client), nodeUUIDs: [NODE], poolDir, sysfsRoot: sysfs.root, mountsPath: sysfs.mountsPath, stateDir,
      run: kernel.run, enabled: async () => enabled, intervalMs: 60_000, logger: silentLogger(),
    });
    started.push(p);
    return p;
  }
  const poolOf = async (p: NodePools): Promise<NodePoolStatus> => {
    const report = await p.refreshNow();
    const pool = report?.pools.find((x) => x.nodeUUID === NODE);
    assert.ok(pool, 'the node has a pool in the report');
    return pool;
  };
  const deviceStates = (pool: NodePoolStatus) => pool.devices.map((d) => `${d.serial}:${d.state}`);

  it('reports nothing on a server without a kernel target, and brings up nothing there', async () => {
    const p = pools(false);
    assert.equal(await p.refreshNow(), undefined);
    assert.equal(kernel.calls.length, 0);
    await p.stop();
  });

  it('brings the pool up and reports its capacity and usage, measured', async () => {
    const p = pools();
    const pool = await poolOf(p);
    assert.ok(kernel.calls.some((c) => c.startsWith(`mdadm --create /dev/md/${NAME} --run --metadata=1.2 --level=1 --raid-devices=1`)), kernel.calls.join('\n'));
    assert.equal(pool.state, 'Ready');
    assert.equal(pool.level, 'raid1');
    assert.equal(pool.rawBytes, DEVICE);
    assert.equal(pool.arrayBytes, DEVICE);
    assert.equal(pool.capacityBytes, DEVICE - 100n * MiB, 'data used + free (estimated)');
    assert.deepEqual(deviceStates(pool), ['D0:Healthy']);
    assert.equal(pool.error, '');

    // Volumes in the pool count as provisioned (size) and logical used (allocated).
    const handle = await p.open(NODE, { clusterUUID: CLUSTER.UUID, subsystemNQN: CLUSTER.subsystemNQN });
    await handle.ensureVolume('11111111-1111-4111-8111-111111111111', 64n * MiB, { compression: false, sectorSize: 4096 });
    kernel.dataUsed = 0n;
    const after = await poolOf(p);
    assert.equal(after.provisionedBytes, 64n * MiB);
    assert.equal((await p.refreshNow())?.sequence, p.current()?.sequence, 'nothing changed: same report');
    await p.stop();
  });

  it('adds a device: raid1 → raid0, reshape as a parity-less raid4 (Adding, Growing), restart mid-grow, filesystem resize → Healthy; raid4 → raid0 only before mounting', async () => {
    let p = pools();
    await poolOf(p);
    await putNode(['D0', 'D1']);
    let pool = await poolOf(p);
    assert.ok(kernel.calls.includes('mdadm --grow /dev/md127 --level=0'), kernel.calls.join('\n'));
    assert.deepEqual(deviceStates(pool), ['D0:Healthy', 'D1:Adding']);
    assert.equal(pool.state, 'Growing');

    pool = await poolOf(p);
    assert.ok(kernel.calls.includes('mdadm --grow /dev/md127 --level=4 --raid-devices=3 --force --add /dev/nvme1n1'), kernel.calls.join('\n'));
    assert.equal(pool.level, 'raid4');
    assert.equal(pool.state, 'Growing');
    assert.equal(pool.rebuildProgressPercent, 20);
    assert.deepEqual(deviceStates(pool), ['D0:Healthy', 'D1:Adding']);
    assert.deepEqual(JSON.parse(readFileSync(join(stateDir, 'pools.json'), 'utf8')).adding, { [NODE]: ['D1'] }, 'written ahead');

    // The agent restarts in the middle of the reshape.
    await p.stop();
    p = pools();
    pool = await poolOf(p);
    assert.deepEqual(deviceStates(pool), ['D0:Healthy', 'D1:Adding'], 'still Adding after the restart');
    const callsBefore = kernel.calls.length;
    await p.refreshNow();
    assert.ok(!kernel.calls.slice(callsBefore).some((c) => c.startsWith('mdadm --grow')), 'nothing started while md reshapes');

    kernel.finishReshape();
    pool = await poolOf(p);
    assert.ok(!kernel.calls.slice(callsBefore).some((c) => c.includes('--level=0')), 'no raid4 → raid0 level change while the pool is mounted');
    assert.ok(kernel.calls.some((c) => c === `btrfs filesystem resize max ${join(poolDir, NODE)}`));
    assert.equal(pool.level, 'raid4');
    assert.equal(pool.state, 'Ready', 'a parity-less raid4 is not Degraded');
    assert.deepEqual(deviceStates(pool), ['D0:Healthy', 'D1:Healthy']);
    assert.equal(pool.arrayBytes, 2n * DEVICE);
    assert.equal(pool.capacityBytes, 2n * DEVICE - 100n * MiB, 'the capacity grew');
    assert.equal(pool.rawBytes, 2n * DEVICE);
    assert.ok(!existsSync(join(stateDir, 'pools.json')) || JSON.parse(readFileSync(join(stateDir, 'pools.json'), 'utf8')).adding[NODE] === undefined);

    // Idempotent: nothing more to do.
    const settled = kernel.calls.length;
    await p.refreshNow();
    assert.deepEqual(kernel.calls.slice(settled).filter((c) => !/--detail|usage/.test(c)), []);

    // A reboot: the array is assembled again, and becomes raid0 before anything is mounted on it.
    await p.stop();
    kernel.running = false;
    const mountPoint = join(poolDir, NODE);
    writeFileSync(sysfs.mountsPath, readFileSync(sysfs.mountsPath, 'utf8').split('\n').filter((l) => l.split(' ')[1] !== mountPoint).join('\n'));
    const beforeBoot = kernel.calls.length;
    p = pools();
    pool = await poolOf(p);
    const boot = kernel.calls.slice(beforeBoot);
    const assembled = boot.findIndex((c) => c.startsWith('mdadm --assemble'));
    const leveled = boot.findIndex((c) => /^mdadm --grow \S+ --level=0$/.test(c));
    const mounted = boot.findIndex((c) => c.startsWith('mount '));
    assert.ok(assembled >= 0 && assembled < leveled && leveled < mounted, `assemble, raid4 → raid0, then mount:\n${boot.join('\n')}`);
    assert.equal(pool.level, 'raid0');
    assert.equal(pool.state, 'Ready');
    assert.deepEqual(deviceStates(pool), ['D0:Healthy', 'D1:Healthy']);
    assert.equal(pool.arrayBytes, 2n * DEVICE);
    await p.stop();
  });

  it('reports a device it will not add as Failed, with the reason; the pool keeps serving', async () => {
    const p = pools();
    kernel.superblocks.set('nvme2n1', 'someone-else');
    await putNode(['D0', 'D1', 'D2']);
    const pool = await poolOf(p);
    assert.equal(pool.devices.find((d) => d.serial === 'D2')?.state, 'Failed');
    assert.match(pool.devices.find((d) => d.serial === 'D2')?.error ?? '', /holds data \(linux_raid_member of md array someone-else\)/);
    assert.match(pool.error, /D2/);
    assert.ok(!kernel.calls.some((c) => c.includes('nvme2n1') && c.startsWith('mdadm --grow')));
    await p.stop();
  });
  it('reports md\'s corrected read errors per device and in all, btrfs\' errors for the node, and nothing it could not read', async () => {
    const p = pools();
    const before = await poolOf(p);
    assert.deepEqual([before.recoverableIntegrityErrors, before.unrecoverableIntegrityErrors], [undefined, undefined], 'no counters in sysfs: not measured');
    assert.ok(before.devices.every((d) => d.recoverableIntegrityErrors === undefined));

    sysfs.write('block/md127/md/dev-nvme0n1/errors', '16\n');
    sysfs.write('block/md127/md/dev-nvme1n1/errors', '0\n');
    sysfs.write('fs/btrfs/0f0f0f0f-1111-4222-8333-444444444444/devices/md127', '');
    sysfs.write('fs/btrfs/0f0f0f0f-1111-4222-8333-444444444444/devinfo/1/error_stats', 'write_errs 9\nread_errs 1\nflush_errs 0\ncorruption_errs 4\ngeneration_errs 0\n');
    const pool = await poolOf(p);
    assert.deepEqual([pool.recoverableIntegrityErrors, pool.unrecoverableIntegrityErrors], [16n, 5n]);
    assert.deepEqual(
      pool.devices.map((d) => [d.serial, d.recoverableIntegrityErrors]),
      [['D0', 16n], ['D1', 0n], ['D2', undefined]],
      'D2 is not a member: md counts nothing for it',
    );
    await p.stop();
  });

  it('reassembles the pool (umount, md stop, assemble from the managed devices, mount), down for every caller meanwhile, data kept', async () => {
    const p = pools();
    const cluster = { clusterUUID: CLUSTER.UUID, subsystemNQN: CLUSTER.subsystemNQN };
    await poolOf(p);
    const handle = await p.open(NODE, cluster);
    const volume = '22222222-2222-4222-8222-222222222222';
    await handle.ensureVolume(volume, 64n * MiB, { compression: false, sectorSize: 4096 });
    writeFileSync(join(poolDir, NODE, 'volumes', `${volume}.raw`), 'data kept');
    const callsBefore = kernel.calls.length;

    const done = await p.reassemble(NODE, 'being reassembled (test)');
    const calls = kernel.calls.slice(callsBefore).filter((c) => /^(umount|mount|mdadm --(stop|assemble))/.test(c));
    assert.deepEqual(calls, [
      `umount ${join(poolDir, NODE)}`,
      'mdadm --stop /dev/md127',
      `mdadm --assemble /dev/md/${NAME} --run /dev/nvme0n1 /dev/nvme1n1`,
      `mount -t btrfs /dev/md127 ${join(poolDir, NODE)}`,
    ]);
    assert.deepEqual(done.steps, [`unmounted ${join(poolDir, NODE)}`, 'stopped /dev/md127', 'assembled /dev/md127 from /dev/nvme0n1 /dev/nvme1n1', `mounted /dev/md127 on ${join(poolDir, NODE)}`]);
    assert.ok((await handle.listVolumes()).includes(volume), 'the same handle serves the pool again');
    assert.equal(readFileSync(join(poolDir, NODE, 'volumes', `${volume}.raw`), 'utf8').slice(0, 9), 'data kept');
    assert.equal((await poolOf(p)).state, 'Ready');
    await p.stop();
  });

  it('a reassembly that fails leaves the pool down with the kernel\'s reason: unavailable to every caller, the bare mount point untouched; bringUp brings it up as after a boot', async () => {
    const p = pools();
    const cluster = { clusterUUID: CLUSTER.UUID, subsystemNQN: CLUSTER.subsystemNQN };
    await poolOf(p);
    const handle = await p.open(NODE, cluster);
    kernel.assembleFails = 'mdadm: /dev/nvme0n1 is busy - skipping';
    await assert.rejects(p.reassemble(NODE, 'being reassembled (test)'), /assembling strata-abcdef01 failed: mdadm: \/dev\/nvme0n1 is busy - skipping/);
    assert.ok(!kernel.running, 'md stays stopped');

    // Every reader: the data path's handle and open(), the pool report, usage and listing.
    await assert.rejects(handle.listVolumes(), (err: Error) => err instanceof PoolUnavailable && /unavailable: the reassembly failed: assembling/.test(err.message));
    await assert.rejects(handle.usage('22222222-2222-4222-8222-222222222222'), PoolUnavailable);
    await assert.rejects(handle.capacity(), PoolUnavailable);
    await assert.rejects(handle.ensureVolume('33333333-3333-4333-8333-333333333333', MiB, { compression: false, sectorSize: 4096 }), PoolUnavailable);
    await assert.rejects((await p.open(NODE, cluster)).listVolumes(), PoolUnavailable);
    const callsBefore = kernel.calls.length;
    const pool = await poolOf(p);
    assert.equal(pool.state, 'Failed');
    assert.equal(pool.capacityBytes, 0n);
    assert.match(pool.error, /^the storage pool is down: the reassembly failed: assembling strata-abcdef01 failed: mdadm: \/dev\/nvme0n1 is busy/);
    assert.deepEqual(kernel.calls.slice(callsBefore), [], 'a check of a pool that is down runs nothing');
    assert.deepEqual(readdirSync(join(poolDir, NODE)), [], 'nothing written under the bare mount point');

    // A pool held down from the agent's start (restarted after the failure) stays down too.
    const q = pools();
    q.holdDownAtStart(NODE, 'the reassembly failed (recorded)');
    assert.equal((await poolOf(q)).state, 'Failed');
    await assert.rejects((await q.open(NODE, cluster)).listVolumes(), PoolUnavailable);
    assert.deepEqual(kernel.calls.slice(callsBefore).filter((c) => !c.startsWith('mdadm --detail')), []);
    await q.stop();

    kernel.assembleFails = undefined;
    await p.bringUp(NODE);
    assert.ok(kernel.running, 'assembled again');
    assert.deepEqual(await handle.listVolumes(), ['11111111-1111-4111-8111-111111111111', '22222222-2222-4222-8222-222222222222']);
    assert.equal((await poolOf(p)).state, 'Ready');
    await p.stop();
  });

  it('a reassembly resumes where an agent killed in the middle left it (unmounted, md stopped)', async () => {
    await kernel.run('umount', [join(poolDir, NODE)]);
    await kernel.run('mdadm', ['--stop', '/dev/md127']);
    const p = pools();
    p.holdDownAtStart(NODE, 'being reassembled (resumed)');
    assert.equal((await poolOf(p)).state, 'Failed', 'not brought up by the check');
    assert.ok(!kernel.running);
    const callsBefore = kernel.calls.length;
    const done = await p.reassemble(NODE, 'being reassembled (resumed)');
    assert.deepEqual(done.steps, ['assembled /dev/md127 from /dev/nvme0n1 /dev/nvme1n1', `mounted /dev/md127 on ${join(poolDir, NODE)}`]);
    assert.ok(!kernel.calls.slice(callsBefore).some((c) => c.startsWith('umount') || c.startsWith('mdadm --stop')));
    assert.equal((await poolOf(p)).state, 'Ready');
    await p.stop();
  });
});
