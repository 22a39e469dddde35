// Debian's kernel for the lab guests, fetched through apt only: `apt-get download` of the package
// `linux-image-amd64` depends on, `dpkg -x` into the cache, and the uncompressed ELF vmlinux
// extracted from the bzImage (QEMU boots it through its PVH entry point, twice as fast under TCG as
// the compressed image). Cached per package name + Debian version: a rerun costs two apt-cache calls.
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
  /** Use this package instead of what linux-image-amd64 depends on ($STRATA_E2E_KERNEL_PACKAGE). */
  readonly package?: string;
  readonly timeoutMs?: number;
}

const APT_TIMEOUT_MS = 60_000;

/** Modification times of apt's package lists: the resolution below is reused while they stand. */
function aptListsState(): string {
  const times = ['/var/lib/apt/lists', '/var/cache/apt/pkgcache.bin'].map((path) => {
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
export async function resolveKernelPackage(override?: string, memo?: string): Promise<{ package: string; debVersion: string }> {
  const request = override ?? process.env['STRATA_E2E_KERNEL_PACKAGE'] ?? '';
  const state = aptListsState();
  if (memo && existsSync(memo)) {
    try {
      const saved = JSON.parse(readFileSync(memo, 'utf8')) as { request: string; state: string; package: string; debVersion: string };
      if (saved.request === request && saved.state === state) return { package: saved.package, debVersion: saved.debVersion };
    } catch {
      /* rewritten below */
    }
  }
  const resolved = await resolveWithApt(request || undefined);
  if (memo) writeFileSync(memo, JSON.stringify({ request, state, ...resolved }) + '\n');
  return resolved;
}

async function resolveWithApt(requested?: string): Promise<{ package: string; debVersion: string }> {
  let pkg = requested;
  if (!pkg) {
    const { stdout } = await execArgv('apt-cache', ['depends', 'linux-image-amd64'], { timeoutMs: APT_TIMEOUT_MS });
    const match = /^\s*Depends:\s*(linux-image-[0-9][^\s<>]*)/m.exec(stdout.toString());
    if (!match?.[1]) throw new Error(`apt-cache depends linux-image-amd64 names no linux-image package:\n${stdout.toString()}`);
    pkg = match[1];
  }
  const { stdout } = await execArgv('apt-cache', ['show', '--no-all-versions', pkg], { timeoutMs: APT_TIMEOUT_MS });
  const version = /^Version:\s*(\S+)/m.exec(stdout.toString())?.[1];
  if (!version) throw new Error(`apt-cache show ${pkg}: no Version field`);
  return { package: pkg, debVersion: version };
}

function releaseOf(pkg: string): string {
  const release = pkg.replace(/^linux-image-/, '').replace(/-unsigned$/, '');
  if (!/^[0-9][A-Za-z0-9.+_-]*$/.test(release)) throw new Error(`not a kernel image package: ${pkg}`);
  return release;
}

function readCached(dir: string): KernelInfo | undefined {
  const meta = join(dir, 'kernel.json');
  if (!existsSync(meta)) return undefined;
  const info = JSON.parse(readFileSync(meta, 'utf8')) as Omit<KernelInfo, 'dir' | 'vmlinux' | 'modulesDir' | 'fetched'>;
  const vmlinux = join(dir, 'vmlinux');
  const modulesDir = join(dir, 'root', 'lib', 'modules', info.release);
  if (!existsSync(vmlinux) || !existsSync(modulesDir)) return undefined;
  return { ...info, dir, vmlinux, modulesDir, fetched: false };
}

/** Downloads (once) and returns Debian's kernel, with its modules and an uncompressed vmlinux. */
export async function fetchKernel(options: KernelOptions = {}): Promise<KernelInfo> {
  const root = join(options.cacheDir ?? defaultCacheDir(), 'kernels');
  mkdirSync(root, { recursive: true });
  let resolved: { package: string; debVersion: string };
  try {
    resolved = await resolveKernelPackage(options.package, join(root, 'resolved.json'));
  } catch (error) {
    // apt's lists unavailable: use the newest kernel already in the cache.
    const cached = readdirSync(root)
      .filter((name) => !name.startsWith('.') && !name.endsWith('.json'))
      .map((name) => readCached(join(root, name)))
      .filter((info): info is KernelInfo => info !== undefined)
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
    await execArgv('apt-get', ['download', '-q', `${resolved.package}=${resolved.debVersion}`], { cwd: work, timeoutMs });
    const deb = readdirSync(work).find((name) => name.endsWith('.deb'));
    if (!deb) throw new Error(`apt-get download ${resolved.package}: no .deb in ${work}`);
    labLog(`downloaded ${deb} in ${since(start)} ms`);
    start = performance.now();
    await execArgv('dpkg', ['-x', join(work, deb), join(work, 'root')], { timeoutMs });
    rmSync(join(work, deb));
    rmSync(join(work, 'root', 'usr'), { recursive: true, force: true }); // docs only
    labLog(`extracted in ${since(start)} ms`);
    start = performance.now();
    const vmlinuz = readFileSync(join(work, 'root', 'boot', `vmlinuz-${release}`));
    const vmlinux = await extractVmlinux(vmlinuz, { timeoutMs });
    writeFileSync(join(work, 'vmlinux'), vmlinux);
    labLog(`vmlinux (${vmlinux.length} bytes) in ${since(start)} ms`);
    writeFileSync(
      join(work, 'kernel.json'),
      JSON.stringify({ release, package: resolved.package, debVersion: resolved.debVersion, vmlinuxSha256: sha256(vmlinux) }, null, 2) + '\n',
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
