// Tests only: the configfs driver on a plain directory standing in for /sys/kernel/config/nvmet.
// It does what configfs does by itself and a directory does not:
// - mkdir: configfs creates an object's attribute files and default groups (allowed_hosts/,
//   namespaces/; subsystems/, referrals/, ana_groups/1/ for a port). Here the default groups are
//   created; attribute files appear when first written, so a read shows them missing
//   (undefined) until then.
// - rmdir: configfs removes an object whose only contents are attribute files and default
//   groups. Here those files and empty default groups go first (never a link or an unknown
//   directory: those make rmdir fail, as user-created children do on configfs).
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { defaultGroups, NvmetConfigfs, objectKind } from '../../../agent/datapath/kernel/nvmet-configfs.js';

export class EmulatedNvmetConfigfs extends NvmetConfigfs {
  /** A plain directory has no kernel behind it: nothing to probe capabilities from. */
  override get kernelRoot(): string | undefined {
    return undefined;
  }

  /** Makes sure the three top-level groups exist (configfs has them from the module's load). */
  async prepareRoot(): Promise<void> {
    for (const group of ['hosts', 'subsystems', 'ports']) await fs.mkdir(join(this.root, group), { recursive: true });
  }

  protected override async afterMkdir(relative: string): Promise<void> {
    const kind = objectKind(relative);
    if (!kind) return;
    for (const group of defaultGroups[kind]) await fs.mkdir(join(this.resolve(relative), group), { recursive: true });
  }

  protected override async beforeRmdir(relative: string): Promise<void> {
    const dir = this.resolve(relative);
    const kind = objectKind(relative);
    const groups = kind ? [...defaultGroups[kind]].reverse() : [];
    for (const group of groups) {
      const groupDir = join(dir, group);
      const entries = await fs.readdir(groupDir, { withFileTypes: true }).catch(() => undefined);
      if (!entries) continue;
      for (const e of entries) if (e.isFile()) await fs.unlink(join(groupDir, e.name));
      await fs.rmdir(groupDir).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      });
    }
    const entries = await fs.readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) if (e.isFile()) await fs.unlink(join(dir, e.name));
  }
}

/** An emulated root, ready to drive (its top-level groups made). */
export async function emulatedConfigfs(root: string): Promise<EmulatedNvmetConfigfs> {
  const configfs = new EmulatedNvmetConfigfs(root);
  await configfs.prepareRoot();
  return configfs;
}
