// A second, Debian 13 (trixie) userland for the guests, for what Debian 12's cannot do: TLS on
// NVMe/TCP needs `tlshd` (ktls-utils, trixie only: built against GnuTLS 3.8 and the t64 libraries)
// and nvme-cli >= 2.5 for `nvme connect --tls` (bookworm has 2.3). The guests keep running the
// host's root (node, the agent, nvme-cli 2.3 for everything else); only those commands run in a
// chroot of this tree (scripts/userland.sh), which the guests see at the same path over 9p.
// Built once with `debootstrap --variant=minbase` from Debian's own packages and cached; the key
// is the suite and the package list, so a changed list builds a new root.
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { debianMirror } from './kernel.js';
import { cacheDir, execArgv, sha256 } from './util.js';

export const USERLAND_SUITE = 'trixie';
/** What the chroot runs: tlshd, nvme-cli, keyctl; kmod and iproute2 for looking around by hand. */
export const USERLAND_PACKAGES: readonly string[] = ['ktls-utils', 'nvme-cli', 'keyutils', 'kmod', 'iproute2'];

/**
 * tlshd links the `.nvme` keyring into its session keyring, so that it may search the PSKs the
 * kernel names (the agent's and nvme-cli's keys live there); debug logging for the console logs.
 */
export const TLSHD_CONF = '[debug]\nloglevel=7\ntls=0\nnl=0\n\n[authenticate]\nkeyrings=.nvme\n';

export interface UserlandInfo {
  /** The root directory (the same path inside a guest). */
  readonly root: string;
  readonly built: boolean;
}

/** The cached trixie root, built when missing (about 1-2 minutes and 60 MB of downloads once). */
export async function prepareUserland(options: { suite?: string; packages?: readonly string[] } = {}): Promise<UserlandInfo> {
  const suite = options.suite ?? USERLAND_SUITE;
  const packages = [...(options.packages ?? USERLAND_PACKAGES)].sort();
  const dir = join(cacheDir(), 'userland');
  const name = `${suite}-${sha256(packages.join(' ')).slice(0, 12)}`;
  const root = join(dir, name);
  if (existsSync(join(root, 'usr', 'sbin', 'tlshd')) && existsSync(join(dir, `${name}.complete`))) return { root, built: false };
  mkdirSync(dir, { recursive: true });
  // Build beside and rename: a build that was cut short never looks complete.
  const building = join(dir, `${name}.building-${process.pid}`);
  rmSync(building, { recursive: true, force: true });
  await execArgv('debootstrap', ['--variant=minbase', `--include=${packages.join(',')}`, suite, building, debianMirror()], {
    timeoutMs: 900_000,
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  // Only the binaries and libraries are used: the package cache is dead weight.
  rmSync(join(building, 'var', 'cache', 'apt', 'archives'), { recursive: true, force: true });
  writeFileSync(join(building, 'etc', 'tlshd.conf'), TLSHD_CONF);
  rmSync(root, { recursive: true, force: true });
  renameSync(building, root);
  writeFileSync(join(dir, `${name}.complete`), `${new Date().toISOString()} ${packages.join(' ')}\n`);
  return { root, built: true };
}
