// The udev rule that keeps md's incremental assembly off replicated volumes' devices: what it
// matches, and how the agent writes it. That udevd honours it on the kernel (no md127 over a
// copy's loop device or a replica's NVMe/TCP leg) is shown in the lab: docs/replication.md.
import assert from 'node:assert/strict';
import { promises as fs } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { silentLogger } from '../../../test/helpers/silent-logger.js';
import { arrayNameOf } from '../pool/btrfs-md-pool.js';
import { mdNameOf } from './block-stack.js';
import { installMdAssemblyGuard, MD_ASSEMBLY_GUARD_RULE, MD_ASSEMBLY_GUARD_TEXT, REPLICATED_ARRAY_LABELS } from './md-assembly-guard.js';

/** udev's glob (`*`, `?`, alternatives with `|`) as a regular expression. */
function globMatches(glob: string, value: string): boolean {
  return glob.split('|').some((alt) => new RegExp(`^${alt.replace(/[.+^${}()[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')}$`).test(value));
}

const udevDir = () => fs.mkdtemp(join(tmpdir(), 'strata-udev-'));

function recordingRun(fail = false) {
  const calls: string[] = [];
  const run = async (cmd: string, args: readonly string[]) => {
    calls.push([cmd, ...args].join(' '));
    if (fail) throw Object.assign(new Error('udevadm: not found'), { code: 'ENOENT' });
    return { stdout: '', stderr: '' };
  };
  return { calls, run };
}

describe('md assembly guard (udev rule)', () => {
  it("matches every replicated volume's array name and not the node pool's", () => {
    for (const uuid of ['7d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b', '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-4fff-bfff-ffffffffffff']) {
      assert.ok(globMatches(REPLICATED_ARRAY_LABELS, mdNameOf(uuid)), mdNameOf(uuid));
      assert.ok(globMatches(REPLICATED_ARRAY_LABELS, `somehost:${mdNameOf(uuid)}`));
    }
    const pool = arrayNameOf('7d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b');
    assert.equal(globMatches(REPLICATED_ARRAY_LABELS, pool), false);
    assert.equal(globMatches(REPLICATED_ARRAY_LABELS, `server-1:${pool}`), false);
    assert.equal(globMatches(REPLICATED_ARRAY_LABELS, 'home:raid'), false);
    // Marks the device not ready, which 64-md-raid-assembly.rules skips, and only md members.
    assert.match(MD_ASSEMBLY_GUARD_TEXT, /ENV\{ID_FS_TYPE\}=="linux_raid_member"/);
    assert.match(MD_ASSEMBLY_GUARD_TEXT, /ENV\{SYSTEMD_READY\}="0"/);
    assert.ok(MD_ASSEMBLY_GUARD_RULE < '64-md-raid-assembly.rules' && MD_ASSEMBLY_GUARD_RULE > '60-persistent-storage.rules');
  });

  it('writes the rule once and has udevd read it; writes it again when it differs', async () => {
    const dir = await udevDir();
    const { calls, run } = recordingRun();
    assert.equal(await installMdAssemblyGuard({ run, logger: silentLogger(), udevRunDir: dir }), 'written');
    const path = join(dir, 'rules.d', MD_ASSEMBLY_GUARD_RULE);
    assert.equal(await fs.readFile(path, 'utf8'), MD_ASSEMBLY_GUARD_TEXT);
    assert.deepEqual(calls, ['udevadm control --reload']);
    assert.equal(await installMdAssemblyGuard({ run, logger: silentLogger(), udevRunDir: dir }), 'unchanged');
    assert.equal(calls.length, 1);
    await fs.writeFile(path, '# edited\n');
    assert.equal(await installMdAssemblyGuard({ run, logger: silentLogger(), udevRunDir: dir }), 'written');
    assert.equal(await fs.readFile(path, 'utf8'), MD_ASSEMBLY_GUARD_TEXT);
    // No temporary file is left beside it (udevd reads *.rules only, but nothing should linger).
    assert.deepEqual(await fs.readdir(join(dir, 'rules.d')), [MD_ASSEMBLY_GUARD_RULE]);
    await fs.rm(dir, { recursive: true });
  });

  it('does nothing where udev does not run, and writes the rule when udevadm is missing', async () => {
    const dir = await udevDir();
    const { calls, run } = recordingRun(true);
    assert.equal(await installMdAssemblyGuard({ run, logger: silentLogger(), udevRunDir: join(dir, 'absent') }), 'no-udev');
    assert.deepEqual(calls, []);
    assert.equal(await installMdAssemblyGuard({ run, logger: silentLogger(), udevRunDir: dir }), 'written');
    assert.equal(await fs.readFile(join(dir, 'rules.d', MD_ASSEMBLY_GUARD_RULE), 'utf8'), MD_ASSEMBLY_GUARD_TEXT);
    await fs.rm(dir, { recursive: true });
  });

  it('throws when udev runs and the rule cannot be written', async () => {
    const dir = await udevDir();
    await fs.writeFile(join(dir, 'rules.d'), 'not a directory');
    const { run } = recordingRun();
    await assert.rejects(installMdAssemblyGuard({ run, logger: silentLogger(), udevRunDir: dir }));
    await fs.rm(dir, { recursive: true });
  });
});
