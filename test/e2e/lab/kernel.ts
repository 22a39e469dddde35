// Debian's kernel for the lab guests, fetched through apt only: `apt-get download` of the package
// `linux-image-amd64` depends on in a Debian suite (default trixie: Debian 13's 6.12; bookworm
// gives Debian 12's 6.1), `dpkg -x` into the cache, and the uncompressed ELF vmlinux extracted from
// the bzImage (QEMU boots it through its PVH entry point, twice as fast under TCG as the
// compressed image). A suite other than this machine's own is read through private apt lists in
// the cache (the machine's sources are not touched). Cached per package name + Debian version: a
// rerun costs no apt call while the lists stand.
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, mkdirSync, writeFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { cacheDir as defaultCacheDir, execArgv, haveCommand, labLog, sha256, since } from './util.js';

export interface KernelInfo {
  /** The kernel release (`uname -r` in the guest), e.g. 6.1.0-56-amd64. */
  readonly release: string;
  /** The Debian package, e.g. linux-image-6.1.0-56-amd64. */
  readonly package: string;
  /** Its Debian version, e.g. 6.1.192-2. */
  readonly debVersion: string;
  /** The uncompressed ELF kernel. */
  readonly vmlinux: string;
  /** `<root>/lib/modules/<release>` of the extracted package. */
  readonly modulesDir: string;
  /** The cache directory of this kernel. */
  readonly dir: string;
  /** True when this call downloaded and extracted it. */
  readonly fetched: boolean;
}

export interface KernelOptions {
  readonly cacheDir?: string;
  /** The Debian suite whose kernel to boot ($STRATA_E2E_KERNEL_SUITE, default trixie). */
  readonly suite?: string;
  /** Use this package (of that suite) instead of what linux-image-amd64 depends on ($STRATA_E2E_KERNEL_PACKAGE). */
  readonly package?: string;
  readonly timeoutMs?: number;
}

/** The suites the lab is tested with: their Debian release and kernel series. */
export const KERNEL_SUITES: Readonly<Record<string, { readonly debian: string; readonly series: string }>> = {
  trixie: { debian: '13', series: '6.12' },
  bookworm: { debian: '12', series: '6.1' },
};
/** Debian 13's kernel (6.12) is the lab's default. */
export const DEFAULT_KERNEL_SUITE = 'trixie';

/** The suite the lab boots: `suite`, else $STRATA_E2E_KERNEL_SUITE, else trixie. */
export function labKernelSuite(suite?: string): string {
  const chosen = suite ?? (process.env['STRATA_E2E_KERNEL_SUITE'] || DEFAULT_KERNEL_SUITE);
  if (!/^[a-z][a-z0-9-]*$/.test(chosen)) throw new Error(`STRATA_E2E_KERNEL_SUITE: not a Debian suite name: ${JSON.stringify(chosen)}`);
  return chosen;
}

/**
 * Which kernel the lab boots, for suite names: "kernel 6.12, Debian 13 trixie"; the package when
 * one is pinned ($STRATA_E2E_KERNEL_PACKAGE).
 */
export function labKernelLabel(): string {
  const pinned = process.env['STRATA_E2E_KERNEL_PACKAGE'];
  if (pinned) return `kernel ${pinned}`;
  const suite = labKernelSuite();
  const known = KERNEL_SUITES[suite];
  return known ? `kernel ${known.series}, Debian ${known.debian} ${suite}` : `kernel of Debian ${suite}`;
}

const APT_TIMEOUT_MS = 60_000;
/** Private lists of another suite are refreshed when older than this (or when a download fails). */
const SUITE_LISTS_MAX_AGE_MS = 24 * 3600_000;

/** This machine's own Debian suite (VERSION_CODENAME of /etc/os-release). */
function hostSuite(): string | undefined {
  try {
    return /^VERSION_CODENAME=(\S+)/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1]?.replace(/"/g, '');
  } catch {
    return undefined;
  }
}

/** The Debian mirror apt already uses ($STRATA_E2E_DEBIAN_MIRROR overrides). */
export function debianMirror(): string {
  const fromEnv = process.env['STRATA_E2E_DEBIAN_MIRROR'];
  if (fromEnv) return fromEnv;
  for (const [file, pattern] of [
    ['/etc/apt/sources.list.d/debian.sources', /^URIs:\s*(\S+)/m],
    ['/etc/apt/sources.list', /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+/m],
  ] as const) {
    try {
      const uris = readFileSync(file, 'utf8').split(/\n\s*\n/).filter((stanza) => !/security/.test(stanza)).join('\n\n');
      const uri = pattern.exec(uris)?.[1];
      if (uri) return uri;
    } catch {
      /* next */
    }
  }
  return 'http://deb.debian.org/debian';
}

/** How apt is run for a suite: nothing extra for this machine's own, private lists for another. */
interface AptScope {
  readonly options: readonly string[];
  /** The files whose modification times say whether a resolution still stands. */
  readonly lists: readonly string[];
  /** Fetches the private lists (a no-op for this machine's suite). */
  update(): Promise<void>;
}

function aptScope(suite: string, root: string): AptScope {
  if (suite === hostSuite()) {
    return { options: [], lists: ['/var/lib/apt/lists', '/var/cache/apt/pkgcache.bin'], update: async () => {} };
  }
  const dir = join(root, `apt-${suite}`);
  const lists = join(dir, 'lists');
  const sources = join(dir, 'sources.list');
  const options = [
    '-o', `Dir::Etc::sourcelist=${sources}`, '-o', 'Dir::Etc::sourceparts=-', '-o', `Dir::State::Lists=${lists}`,
    '-o', 'Dir::Cache::pkgcache=', '-o', 'Dir::Cache::srcpkgcache=',
  ];
  return {
    options,
    lists: [lists],
    update: async () => {
      mkdirSync(join(lists, 'partial'), { recursive: true });
      writeFileSync(sources, `deb ${debianMirror()} ${suite} main\n`);
      const start = performance.now();
      const result = await execArgv('apt-get', [...options, 'update', '-q'], { timeoutMs: 300_000, allowFailure: true });
      const text = `${result.stdout.toString()}\n${result.stderr}`;
      if (result.code !== 0 || /^(E:|W: GPG error|Err:)/m.test(text)) throw new Error(`apt-get update of Debian ${suite} failed:\n${text.trim()}`);
      labLog(`apt lists of ${suite} updated in ${since(start)} ms`);
    },
  };
}

/** Fetches the private lists of another suite when missing or older than a day. */
async function freshLists(scope: AptScope): Promise<void> {
  if (scope.options.length === 0) return;
  const lists = scope.lists[0]!;
  const stale = (() => {
    try {
      if (!readdirSync(lists).some((name) => /_Packages(\.[a-z0-9]+)?$/.test(name))) return true;
      return Date.now() - statSync(lists).mtimeMs > SUITE_LISTS_MAX_AGE_MS;
    } catch {
      return true;
    }
  })();
  if (stale) await scope.update();
}

/** Modification times of apt's package lists: the resolution below is reused while they stand. */
function aptListsState(paths: readonly string[]): string {
  const times = paths.map((path) => {
    try {
      return String(statSync(path).mtimeMs);
    } catch {
      return '-';
    }
  });
  return times.join('/');
}

/**
 * The kernel package `linux-image-amd64` depends on, and its candidate version. Remembered in
 * `memo` (a file) until apt's lists change, so a rerun does not pay the apt-cache calls (~2 s).
 */
export async function resolveKernelPackage(
  override?: string,
  memo?: string,
  scope: AptScope = aptScope(labKernelSuite(), join(defaultCacheDir(), 'kernels')),
): Promise<{ package: string; debVersion: string }> {
  const request = override ?? process.env['STRATA_E2E_KERNEL_PACKAGE'] ?? '';
  await freshLists(scope);
  const state = aptListsState(scope.lists);
  if (memo && existsSync(memo)) {
    try {
      const saved = JSON.parse(readFileSync(memo, 'utf8')) as { request: string; state: string; package: string; debVersion: string };
      if (saved.request === request && saved.state === state) return { package: saved.package, debVersion: saved.debVersion };
    } catch {
      /* rewritten below */
    }
  }
  const resolved = await resolveWithApt(scope, request || undefined);
  if (memo) writeFileSync(memo, JSON.stringify({ request, state, ...resolved }) + '\n');
  return resolved;
}

async function resolveWithApt(scope: AptScope, requested?: string): Promise<{ package: string; debVersion: string }> {
  let pkg = requested;
  if (!pkg) {
    const { stdout } = await execArgv('apt-cache', [...scope.options, 'depends', 'linux-image-amd64'], { timeoutMs: APT_TIMEOUT_MS });
    const match = /^\s*Depends:\s*(linux-image-[0-9][^\s<>]*)/m.exec(stdout.toString());
    if (!match?.[1]) throw new Error(`apt-cache depends linux-image-amd64 names no linux-image package:\n${stdout.toString()}`);
    pkg = match[1];
  }
  const { stdout } = await execArgv('apt-cache', [...scope.options, 'show', '--no-all-versions', pkg], { timeoutMs: APT_TIMEOUT_MS });
  const version = /^Version:\s*(\S+)/m.exec(stdout.toString())?.[1];
  if (!version) throw new Error(`apt-cache show ${pkg}: no Version field`);
  return { package: pkg, debVersion: version };
}

function releaseOf(pkg: string): string {
  const release = pkg.replace(/^linux-image-/, '').replace(/-unsigned$/, '');
  if (!/^[0-9][A-Za-z0-9.+_-]*$/.test(release)) throw new Error(`not a kernel image package: ${pkg}`);
  return release;
}

function readCached(dir: string): (KernelInfo & { suite?: string }) | undefined {
  const meta = join(dir, 'kernel.json');
  if (!existsSync(meta)) return undefined;
  const info = JSON.parse(readFileSync(meta, 'utf8')) as Omit<KernelInfo, 'dir' | 'vmlinux' | 'modulesDir' | 'fetched'> & { suite?: string };
  const vmlinux = join(dir, 'vmlinux');
  const modulesDir = join(dir, 'root', 'lib', 'modules', info.release);
  if (!existsSync(vmlinux) || !existsSync(modulesDir)) return undefined;
  return { ...info, dir, vmlinux, modulesDir, fetched: false };
}

/** True when a cached kernel (kernel.json) came from `suite`; kernels cached before suites were recorded by their series. */
function fromSuite(info: KernelInfo & { suite?: string }, suite: string): boolean {
  if (info.suite) return info.suite === suite;
  const series = KERNEL_SUITES[suite]?.series;
  return series !== undefined && info.release.startsWith(`${series}.`);
}

/**
 * Downloads (once) and returns Debian's kernel of the lab's suite (labKernelSuite()), with its
 * modules and an uncompressed vmlinux.
 */
export async function fetchKernel(options: KernelOptions = {}, retried = false): Promise<KernelInfo> {
  const root = join(options.cacheDir ?? defaultCacheDir(), 'kernels');
  mkdirSync(root, { recursive: true });
  const suite = labKernelSuite(options.suite);
  const scope = aptScope(suite, root);
  // This machine's suite keeps the memo it always had; another suite has its own.
  const memo = join(root, scope.options.length === 0 ? 'resolved.json' : `resolved-${suite}.json`);
  let resolved: { package: string; debVersion: string };
  try {
    resolved = await resolveKernelPackage(options.package, memo, scope);
  } catch (error) {
    // apt's lists unavailable: use the newest kernel of this suite already in the cache.
    const cached = readdirSync(root)
      .filter((name) => !name.startsWith('.') && !name.endsWith('.json') && !name.startsWith('apt-'))
      .map((name) => readCached(join(root, name)))
      .filter((info): info is KernelInfo => info !== undefined && fromSuite(info, suite))
      .sort((a, b) => statSync(b.dir).mtimeMs - statSync(a.dir).mtimeMs);
    if (cached[0]) return cached[0];
    throw error;
  }
  const release = releaseOf(resolved.package);
  const dir = join(root, `${release}_${resolved.debVersion.replace(/[^A-Za-z0-9.+_-]/g, '_')}`);
  const cached = readCached(dir);
  if (cached) return cached;

  const timeoutMs = options.timeoutMs ?? 600_000;
  const work = join(root, `.tmp-${process.pid}-${Date.now()}`);
  mkdirSync(work, { recursive: true });
  try {
    let start = performance.now();
    const download = () =>
      execArgv('apt-get', [...scope.options, 'download', '-q', `${resolved.package}=${resolved.debVersion}`], { cwd: work, timeoutMs, allowFailure: true });
    const fetched = await download();
    if (fetched.code !== 0 && scope.options.length > 0 && !retried) {
      // The mirror dropped that version since the lists were fetched: refresh them and resolve again.
      rmSync(work, { recursive: true, force: true });
      await scope.update();
      return fetchKernel(options, true);
    }
    if (fetched.code !== 0) throw new Error(`apt-get download ${resolved.package}=${resolved.debVersion} failed: ${fetched.stderr.trim()}`);
    const deb = readdirSync(work).find((name) => name.endsWith('.deb'));
    if (!deb) throw new Error(`apt-get download ${resolved.package}: no .deb in ${work}`);
    labLog(`downloaded ${deb} in ${since(start)} ms`);
    start = performance.now();
    await execArgv('dpkg', ['-x', join(work, deb), join(work, 'root')], { timeoutMs });
    rmSync(join(work, deb));
    // Debian 13's package is merged-/usr (usr/lib/modules); keep the one layout lib/modules.
    const usrModules = join(work, 'root', 'usr', 'lib', 'modules');
    if (existsSync(usrModules) && !existsSync(join(work, 'root', 'lib', 'modules'))) {
      mkdirSync(join(work, 'root', 'lib'), { recursive: true });
      renameSync(usrModules, join(work, 'root', 'lib', 'modules'));
    }
    rmSync(join(work, 'root', 'usr'), { recursive: true, force: true }); // docs only now
    labLog(`extracted in ${since(start)} ms`);
    start = performance.now();
    const vmlinuz = readFileSync(join(work, 'root', 'boot', `vmlinuz-${release}`));
    const vmlinux = await extractVmlinux(vmlinuz, { timeoutMs });
    writeFileSync(join(work, 'vmlinux'), vmlinux);
    labLog(`vmlinux (${vmlinux.length} bytes) in ${since(start)} ms`);
    writeFileSync(
      join(work, 'kernel.json'),
      JSON.stringify({ release, package: resolved.package, debVersion: resolved.debVersion, suite, vmlinuxSha256: sha256(vmlinux) }, null, 2) + '\n',
    );
    if (readCached(dir)) {
      rmSync(work, { recursive: true, force: true }); // another process finished first: keep its copy
    } else {
      rmSync(dir, { recursive: true, force: true });
      renameSync(work, dir);
    }
  } catch (error) {
    rmSync(work, { recursive: true, force: true });
    throw error;
  }
  const info = readCached(dir);
  if (!info) throw new Error(`kernel cache ${dir} incomplete after extraction`);
  return { ...info, fetched: true };
}

// ---- vmlinuz → vmlinux ----------------------------------------------------------------------

interface Codec {
  readonly name: string;
  readonly magic: Buffer;
  readonly command: string;
  readonly args: string[];
  /** The kernel build appends the uncompressed size (le32) to every format but gzip. */
  readonly sizeAppended: boolean;
}

const CODECS: readonly Codec[] = [
  { name: 'xz', magic: Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), command: 'xz', args: ['-dc', '--single-stream'], sizeAppended: true },
  { name: 'zstd', magic: Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), command: 'zstd', args: ['-dcq'], sizeAppended: true },
  { name: 'gzip', magic: Buffer.from([0x1f, 0x8b, 0x08]), command: 'gzip', args: ['-dc'], sizeAppended: false },
  { name: 'lzma', magic: Buffer.from([0x5d, 0x00, 0x00]), command: 'xz', args: ['-dc', '--format=lzma'], sizeAppended: true },
  { name: 'bzip2', magic: Buffer.from('BZh'), command: 'bzip2', args: ['-dc'], sizeAppended: true },
  { name: 'lz4', magic: Buffer.from([0x02, 0x21, 0x4c, 0x18]), command: 'lz4', args: ['-dc'], sizeAppended: true },
  { name: 'lzo', magic: Buffer.from([0x89, 0x4c, 0x5a, 0x4f, 0x00, 0x0d, 0x0a, 0x1a, 0x0a]), command: 'lzop', args: ['-dc'], sizeAppended: true },
];

/**
 * The compressed payload of a bzImage: from the boot protocol header when present (HdrS,
 * payload_offset/payload_length, protocol 2.08+), otherwise every offset where a known
 * compression magic occurs, as extract-vmlinux does.
 */
function payloadCandidates(vmlinuz: Buffer): { codec: Codec; data: Buffer }[] {
  const candidates: { codec: Codec; data: Buffer }[] = [];
  if (vmlinuz.length > 0x250 && vmlinuz.toString('latin1', 0x202, 0x206) === 'HdrS' && vmlinuz.readUInt16LE(0x206) >= 0x0208) {
    const setupSects = vmlinuz[0x1f1] || 4;
    const start = (setupSects + 1) * 512 + vmlinuz.readUInt32LE(0x248);
    const length = vmlinuz.readUInt32LE(0x24c);
    const data = vmlinuz.subarray(start, start + length);
    const codec = CODECS.find((c) => data.subarray(0, c.magic.length).equals(c.magic));
    if (codec && start + length <= vmlinuz.length) candidates.push({ codec, data });
  }
  for (const codec of CODECS) {
    for (let at = vmlinuz.indexOf(codec.magic); at >= 0 && candidates.length < 16; at = vmlinuz.indexOf(codec.magic, at + 1)) {
      candidates.push({ codec, data: vmlinuz.subarray(at) });
    }
  }
  return candidates;
}

/** Checks an ELF64 x86-64 executable with a PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY). */
export function checkVmlinux(elf: Buffer): { entryPvh: boolean } {
  if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46) throw new Error('not an ELF file');
  if (elf[4] !== 2 || elf[5] !== 1) throw new Error('not a little-endian ELF64 file');
  if (elf.readUInt16LE(16) !== 2 || elf.readUInt16LE(18) !== 0x3e) throw new Error('not an x86-64 executable');
  const phoff = Number(elf.readBigUInt64LE(32));
  const phentsize = elf.readUInt16LE(54);
  const phnum = elf.readUInt16LE(56);
  let entryPvh = false;
  for (let i = 0; i < phnum; i++) {
    const ph = phoff + i * phentsize;
    if (ph + 56 > elf.length || elf.readUInt32LE(ph) !== 4 /* PT_NOTE */) continue;
    const offset = Number(elf.readBigUInt64LE(ph + 8));
    const end = Math.min(elf.length, offset + Number(elf.readBigUInt64LE(ph + 32)));
    for (let at = offset; at + 12 <= end; ) {
      const namesz = elf.readUInt32LE(at);
      const descsz = elf.readUInt32LE(at + 4);
      const type = elf.readUInt32LE(at + 8);
      const name = elf.toString('latin1', at + 12, at + 12 + Math.max(0, namesz - 1));
      if (name === 'Xen' && type === 18) entryPvh = true;
      at += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3);
    }
  }
  return { entryPvh };
}

/** Decompresses the kernel inside a bzImage with the system's own xz/zstd/gzip/... and checks the ELF. */
export async function extractVmlinux(vmlinuz: Buffer, options: { timeoutMs?: number } = {}): Promise<Buffer> {
  const errors: string[] = [];
  for (const { codec, data } of payloadCandidates(vmlinuz)) {
    if (!haveCommand(codec.command)) {
      errors.push(`${codec.name}: ${codec.command} not installed`);
      continue;
    }
    const declared = codec.sizeAppended && data.length >= 4 ? data.readUInt32LE(data.length - 4) : undefined;
    const input = codec.sizeAppended && codec.name !== 'xz' ? data.subarray(0, data.length - 4) : data;
    const result = await execArgv(codec.command, codec.args, { input, timeoutMs: options.timeoutMs ?? 120_000, allowFailure: true });
    const out = result.stdout;
    try {
      const { entryPvh } = checkVmlinux(out);
      if (!entryPvh) throw new Error('no PVH entry note (CONFIG_PVH)');
      if (result.code !== 0 && declared !== out.length) throw new Error(`${codec.command} exit ${result.code}: ${result.stderr.trim()}`);
      return out;
    } catch (error) {
      errors.push(`${codec.name}: ${(error as Error).message}`);
    }
  }
  throw new Error(`no ELF kernel found in the bzImage (${errors.join('; ') || 'no compressed payload found'})`);
}
