// Debian packages the lab needs, installed through apt-get when missing.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../../lib/paths.js';
import { execArgv } from './util.js';

/** Debian packages of the lab: the `[lab]` section of tools/debian-packages.txt (one list for setup.sh too). */
export const LAB_PACKAGES: readonly string[] = labPackages();

function labPackages(): string[] {
  const lines = readFileSync(join(packageRoot, 'tools', 'debian-packages.txt'), 'utf8').split('\n').map((l) => l.trim());
  const start = lines.indexOf('[lab]');
  const section = lines.slice(start + 1);
  const end = section.findIndex((l) => l.startsWith('['));
  return (end < 0 ? section : section.slice(0, end)).filter((l) => l && !l.startsWith('#')).map((l) => l.split(/\s+/)[0]!);
}

/** The packages dpkg reports as installed. */
async function installedPackages(packages: readonly string[]): Promise<Set<string>> {
  const { stdout } = await execArgv('dpkg-query', ['-W', '-f=${Package} ${Status}\\n', ...packages], { timeoutMs: 30_000, allowFailure: true });
  const installed = new Set<string>();
  for (const line of stdout.toString().split('\n')) {
    const [name, ...status] = line.trim().split(' ');
    if (name && status.join(' ') === 'install ok installed') installed.add(name.replace(/:.*$/, ''));
  }
  return installed;
}

/** Installs the missing packages with apt-get; returns what it installed. */
export async function installPackages(packages: readonly string[] = LAB_PACKAGES): Promise<string[]> {
  const installed = await installedPackages(packages);
  const missing = packages.filter((pkg) => !installed.has(pkg));
  if (missing.length === 0) return [];
  if (process.getuid?.() !== 0) throw new Error(`missing Debian packages ${missing.join(' ')}: run this as root, or apt-get install them`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () =>
    execArgv('apt-get', ['install', '-y', '-q', '--no-install-recommends', ...missing], { env, timeoutMs: 900_000, allowFailure: true });
  let result = await install();
  if (result.code !== 0) {
    // Stale package lists are the usual cause: refresh once and retry.
    await execArgv('apt-get', ['update', '-q'], { env, timeoutMs: 300_000 });
    result = await install();
  }
  if (result.code !== 0) throw new Error(`apt-get install ${missing.join(' ')} failed: ${result.stderr}`);
  return missing;
}
