import assert from 'node:assert/strict';
import { mkdtempSync, promises as fs, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { volumeNqnPrefix } from '../../../lib/contract/nqn.js';
import { emulatedConfigfs } from '../../../test/kits/datapath/emulated-nvmet-configfs.js';
import { isOnConfigfs, NvmetConfigfs, NvmetOperationError } from './nvmet-configfs.js';
import { describeOp, emptyTree, serialOfVolume, STRATA_MODEL, type DesiredExport, type NvmetOp } from './nvmet-model.js';
import { planNvmet, type Ownership } from './nvmet-plan.js';
import { simulateOps } from './nvmet-simulator.js';

const PREFIX = volumeNqnPrefix('nqn.2024-01.io.strata:cluster-1');
const VOLUMES = [
  '11111111-1111-4111-8111-111111111111',
  '22222222-2222-4222-8222-222222222222',
  '33333333-3333-4333-8333-333333333333',
];
const HOSTS = ['nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001', 'nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000002'];

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function emulatedRoot(): Promise<NvmetConfigfs> {
  const dir = mkdtempSync(join(tmpdir(), 'strata-nvmet-'));
  dirs.push(dir);
  return emulatedConfigfs(join(dir, 'nvmet'));
}

function exportOf(i: number, hosts: string[] = [HOSTS[0] as string]): DesiredExport {
  const v = VOLUMES[i] as string;
  return {
    volumeUUID: v,
    nqn: `${PREFIX}${v}`,
    serial: serialOfVolume(v),
    model: STRATA_MODEL,
    cntlidMin: 1,
    cntlidMax: 1000,
    allowAnyHost: hosts.length === 0,
    allowedHosts: hosts,
    namespace: { nsid: i + 1, devicePath: `/pool/${v}.raw`, uuid: v, bufferedIo: i === 1, anaGroupId: 1 },
    port: { id: 20001 + i, trtype: 'tcp', adrfam: 'ipv4', traddr: '0.0.0.0', trsvcid: String(20001 + i), anaState: i === 2 ? 'inaccessible' : 'optimized' },
  };
}

async function applyAll(configfs: NvmetConfigfs, ops: readonly NvmetOp[], stopAfter = Infinity): Promise<number> {
  let done = 0;
  for (const op of ops) {
    if (done >= stopAfter) throw new Error(`interrupted after ${done} operations`);
    await configfs.apply(op);
    done += 1;
  }
  return done;
}

describe('NvmetConfigfs on a plain directory (emulated)', () => {
  const desired = [exportOf(0, HOSTS), exportOf(1), exportOf(2, [])];

  it('applies a plan, reads it back exactly as planned, and then plans nothing', async () => {
    const configfs = await emulatedRoot();
    const owned: Ownership = { subsystemPrefix: PREFIX, portIdMin: 20000, portIdMax: 39999, hosts: new Set() };
    const plan = planNvmet({ desired, observed: await configfs.read(), owned });
    await applyAll(configfs, plan.ops);
    const tree = await configfs.read();
    assert.deepEqual(await configfs.read(), tree, 'read is stable');
    const expected = simulateOps(emptyTree(), plan.ops);
    assert.deepEqual(tree, expected, 'the directory holds what the model predicts');
    const again = planNvmet({ desired, observed: tree, owned: { ...owned, hosts: new Set(plan.createdHosts) } });
    assert.deepEqual(again.ops.map(describeOp), []);
    // Default groups exist as configfs would create them.
    await fs.access(join(configfs.root, 'ports', '20001', 'referrals'));
    await fs.access(join(configfs.root, 'subsystems', desired[0]!.nqn, 'allowed_hosts'));
    // Links carry absolute targets (configfs resolves them from the process, not the link).
    const link = await fs.readlink(join(configfs.root, 'ports', '20001', 'subsystems', desired[0]!.nqn));
    assert.equal(link, join(configfs.root, 'subsystems', desired[0]!.nqn));
  });

  it('repairs what was deleted behind its back', async () => {
    const configfs = await emulatedRoot();
    const owned: Ownership = { subsystemPrefix: PREFIX, portIdMin: 20000, portIdMax: 39999, hosts: new Set(HOSTS) };
    await applyAll(configfs, planNvmet({ desired, observed: await configfs.read(), owned }).ops);
    const nqn = desired[1]!.nqn;
    await fs.unlink(join(configfs.root, 'ports', '20002', 'subsystems', nqn));
    await fs.rm(join(configfs.root, 'subsystems', nqn, 'namespaces', '2', 'device_nguid'));
    await fs.writeFile(join(configfs.root, 'ports', '20003', 'ana_groups', '1', 'ana_state'), 'optimized\n');
    const repair = planNvmet({ desired, observed: await configfs.read(), owned });
    assert.deepEqual(repair.ops.map(describeOp), [
      // The NGUID is immutable while enabled: disable, write, enable.
      `write "0" to subsystems/${nqn}/namespaces/2/enable`,
      `write "${VOLUMES[1]}" to subsystems/${nqn}/namespaces/2/device_nguid`,
      `write "1" to subsystems/${nqn}/namespaces/2/enable`,
      `link ports/20002/subsystems/${nqn} -> subsystems/${nqn}`,
      `write "inaccessible" to ports/20003/ana_groups/1/ana_state`,
    ]);
    await applyAll(configfs, repair.ops);
    assert.deepEqual(planNvmet({ desired, observed: await configfs.read(), owned }).ops, []);
  });

  it('converges after an apply interrupted at every possible point', async () => {
    const owned: Ownership = { subsystemPrefix: PREFIX, portIdMin: 20000, portIdMax: 39999, hosts: new Set(HOSTS) };
    const full = planNvmet({ desired, observed: emptyTree(), owned });
    for (let k = 0; k < full.ops.length; k += 3) {
      const configfs = await emulatedRoot();
      await assert.rejects(applyAll(configfs, planNvmet({ desired, observed: await configfs.read(), owned }).ops, k), /interrupted/);
      await applyAll(configfs, planNvmet({ desired, observed: await configfs.read(), owned }).ops);
      assert.deepEqual(planNvmet({ desired, observed: await configfs.read(), owned }).ops.map(describeOp), [], `interrupted after ${k}`);
      // Teardown interrupted too.
      const teardown = planNvmet({ desired: [], observed: await configfs.read(), owned });
      await assert.rejects(applyAll(configfs, teardown.ops, Math.min(k, teardown.ops.length - 1)), /interrupted/);
      await applyAll(configfs, planNvmet({ desired: [], observed: await configfs.read(), owned }).ops);
      const empty = await configfs.read();
      assert.deepEqual([empty.hosts.size, empty.subsystems.size, empty.ports.size], [0, 0, 0], `teardown interrupted after ${k}`);
    }
  });

  it('reports the errno of a failed operation and refuses paths outside the root', async () => {
    const configfs = await emulatedRoot();
    await assert.rejects(configfs.apply({ op: 'rmdir', path: 'subsystems/nope' }), (err: unknown) => err instanceof NvmetOperationError && err.code === 'ENOENT');
    await configfs.apply({ op: 'mkdir', path: 'subsystems/x' });
    await configfs.apply({ op: 'mkdir', path: 'hosts/h' });
    await configfs.apply({ op: 'symlink', path: 'subsystems/x/allowed_hosts/h', target: 'hosts/h' });
    // rmdir of a subsystem with a link inside fails, as on configfs.
    await assert.rejects(configfs.apply({ op: 'rmdir', path: 'subsystems/x' }), (err: unknown) => err instanceof NvmetOperationError && err.code === 'ENOTEMPTY');
    await assert.rejects(configfs.apply({ op: 'mkdir', path: '../escape' }), /escapes the nvmet root/);
    await assert.rejects(configfs.apply({ op: 'write', path: 'hosts/../../x', value: '1' }), /escapes the nvmet root/);
  });

  it('reads links written the way configfs shows them (relative) by their last component', async () => {
    const configfs = await emulatedRoot();
    await configfs.apply({ op: 'mkdir', path: 'hosts/h1' });
    await configfs.apply({ op: 'mkdir', path: 'subsystems/s' });
    await fs.symlink('../../../hosts/h1', join(configfs.root, 'subsystems', 's', 'allowed_hosts', 'h1'));
    const tree = await configfs.read();
    assert.deepEqual(tree.subsystems.get('s')?.allowedHosts, ['h1']);
  });
});

describe('isOnConfigfs', () => {
  const table = [
    'sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0',
    'configfs /sys/kernel/config configfs rw,nosuid,nodev,noexec,relatime 0 0',
    '/dev/vda1 / ext4 rw,relatime 0 0',
    'tmpfs /tmp tmpfs rw 0 0',
  ].join('\n');
  it('finds the mount a path lives on', () => {
    assert.equal(isOnConfigfs('/sys/kernel/config/nvmet', table), true);
    assert.equal(isOnConfigfs('/sys/kernel/config', table), true);
    assert.equal(isOnConfigfs('/tmp/nvmet', table), false);
    assert.equal(isOnConfigfs('/sys/kernel/configx/nvmet', table), false);
    assert.equal(isOnConfigfs('/sys/kernel/config/nvmet', '/dev/vda1 / ext4 rw 0 0'), false);
  });
});
