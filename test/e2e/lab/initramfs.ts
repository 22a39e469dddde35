// The guest initramfs: static busybox, the lab's /init + job loop scripts, and exactly the
// kernel modules lab.md lists plus their dependencies (depends= and softdep= from .modinfo),
// in load order. Cached per kernel + a hash of everything that goes in.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { writeCpio, type CpioEntry } from './cpio.js';
import type { KernelInfo } from './kernel.js';
import { LAB_MODULES, OPTIONAL_LAB_MODULES, readModule, resolveModules, type ResolvedModule } from './modules.js';
import { cacheDir as defaultCacheDir, execArgv, haveCommand, labLog, labSourceDir, sha256, since } from './util.js';

/** Bump when the layout produced here changes in a way the hashed inputs do not show. */
const BUILDER_VERSION = 4;
const GUEST_SCRIPTS = ['init.sh', 'loop.sh', 'runjob.sh'] as const;

export interface InitramfsInfo {
  readonly path: string;
  readonly bytes: number;
  readonly modules: ResolvedModule[];
  /** True when this call built it (false: taken from the cache). */
  readonly built: boolean;
  readonly key: string;
}

export interface InitramfsOptions {
  readonly cacheDir?: string;
  /** Module names to include (default: LAB_MODULES). */
  readonly modules?: readonly string[];
  /** Module names to include when the kernel has them (default: OPTIONAL_LAB_MODULES). */
  readonly optionalModules?: readonly string[];
  readonly busybox?: string;
  /**
   * Drop the appended signatures from the modules (default true; false with
   * $STRATA_E2E_KEEP_MODULE_SIGNATURES=1). Verifying them (SHA-256 of 13 MB of modules in a
   * TCG guest) costs about 1 s of every boot; Debian's kernel does not enforce signatures
   * without Secure Boot, so unsigned modules load and only mark the kernel tainted (E).
   */
  readonly stripModuleSignatures?: boolean;
}

/**
 * zstd when installed (smallest and fastest to unpack in the guest), else gzip;
 * $STRATA_E2E_INITRD_COMPRESSION=zstd|gzip|none overrides.
 */
function pickCompression(): { name: string; suffix: string; args?: string[] } {
  const wanted = process.env['STRATA_E2E_INITRD_COMPRESSION'] ?? (haveCommand('zstd') ? 'zstd' : 'gzip');
  if (wanted === 'none') return { name: 'none', suffix: '' };
  if (wanted === 'zstd') return { name: 'zstd', suffix: '.zst', args: ['-15', '-q', '-c'] };
  if (wanted === 'gzip') return { name: 'gzip', suffix: '.gz', args: ['-6', '-n', '-c'] };
  throw new Error(`STRATA_E2E_INITRD_COMPRESSION: zstd, gzip or none, not ${wanted}`);
}

function findBusybox(explicit?: string): string {
  for (const candidate of [explicit, process.env['STRATA_E2E_BUSYBOX'], '/bin/busybox', '/usr/bin/busybox']) {
    if (candidate && existsSync(candidate)) return candidate;
  }
  throw new Error('busybox not found: install busybox-static (node dist/test/e2e/lab/setup.js)');
}

/** Refuses a dynamically linked busybox: the initramfs has no libc. */
function assertStatic(elf: Buffer, path: string): void {
  if (elf.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${path}: not an ELF binary`);
  const phoff = Number(elf.readBigUInt64LE(32));
  const phentsize = elf.readUInt16LE(54);
  for (let i = 0; i < elf.readUInt16LE(56); i++) {
    if (elf.readUInt32LE(phoff + i * phentsize) === 3 /* PT_INTERP */)
      throw new Error(`${path} is dynamically linked: install busybox-static`);
  }
}

const SIG_MAGIC = '~Module signature appended~\n';
/** A module without its appended PKCS#7 signature (struct module_signature + magic trailer). */
function stripSignature(ko: Buffer): Buffer {
  if (ko.toString('latin1', ko.length - SIG_MAGIC.length) !== SIG_MAGIC) return ko;
  const sigLen = ko.readUInt32BE(ko.length - SIG_MAGIC.length - 12 + 8);
  return ko.subarray(0, ko.length - SIG_MAGIC.length - 12 - sigLen);
}

/** Removes images (and their manifests) unused for two weeks, and stale staging directories. */
function pruneStale(dir: string): void {
  const cutoff = Date.now() - 14 * 24 * 3600_000;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    try {
      const stat = statSync(path);
      const image = name.endsWith('.json') ? path.slice(0, -'.json'.length) : path;
      const used = existsSync(image) ? statSync(image).mtimeMs : stat.mtimeMs;
      if (used < cutoff || (name.startsWith('.stage-') && stat.mtimeMs < Date.now() - 3600_000)) rmSync(path, { recursive: true, force: true });
    } catch {
      /* raced with another build */
    }
  }
}

/** Builds (or finds in the cache) the initramfs for `kernel`. */
export async function buildInitramfs(kernel: KernelInfo, options: InitramfsOptions = {}): Promise<InitramfsInfo> {
  const wanted = options.modules ?? LAB_MODULES;
  const optional = options.optionalModules ?? OPTIONAL_LAB_MODULES;
  const busyboxPath = findBusybox(options.busybox);
  const busybox = readFileSync(busyboxPath);
  assertStatic(busybox, busyboxPath);
  const compression = pickCompression();
  const strip = options.stripModuleSignatures ?? process.env['STRATA_E2E_KEEP_MODULE_SIGNATURES'] !== '1';
  const scripts = GUEST_SCRIPTS.map((name) => ({ name, data: readFileSync(join(labSourceDir, name)) }));
  const key = sha256(
    JSON.stringify({
      BUILDER_VERSION,
      kernel: [kernel.release, kernel.debVersion],
      modules: wanted,
      optional,
      busybox: sha256(busybox),
      compression: compression.name,
      strip,
      scripts: scripts.map((s) => [s.name, sha256(s.data)]),
    }),
  ).slice(0, 16);
  const dir = join(options.cacheDir ?? defaultCacheDir(), 'initramfs');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${kernel.release}-${key}.cpio${compression.suffix}`);
  const manifestPath = `${path}.json`;
  if (existsSync(path) && existsSync(manifestPath)) {
    const now = new Date();
    utimesSync(path, now, now); // kept by pruneStale() while in use
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as { modules: ResolvedModule[] };
    return { path, bytes: readFileSync(path).length, modules: manifest.modules, built: false, key };
  }

  pruneStale(dir);
  let start = performance.now();
  const closure = await resolveModules(kernel.modulesDir, wanted, optional);
  labLog(`module closure: ${closure.order.length} modules in ${since(start)} ms (built in: ${closure.builtin.join(' ') || '-'}; unresolved: ${closure.unresolved.join(' ') || '-'})`);

  // Stage lib/modules/<release> for depmod, whose indexes let modprobe work inside the guest root.
  start = performance.now();
  const stage = mkdtempSync(join(dir, '.stage-'));
  try {
    const modRoot = join(stage, 'lib', 'modules', kernel.release);
    for (const module of closure.order) {
      const target = join(modRoot, module.path.replace(/\.(xz|zst|gz)$/, ''));
      mkdirSync(dirname(target), { recursive: true });
      const bytes = await readModule(join(kernel.modulesDir, module.path));
      writeFileSync(target, strip ? stripSignature(bytes) : bytes);
    }
    for (const name of ['modules.order', 'modules.builtin', 'modules.builtin.modinfo']) {
      const source = join(kernel.modulesDir, name);
      if (existsSync(source)) writeFileSync(join(modRoot, name), readFileSync(source));
    }
    if (haveCommand('depmod')) await execArgv('depmod', ['-b', stage, kernel.release], { timeoutMs: 60_000 });
    else labLog('depmod (kmod) not installed: modprobe inside guests will not find modules');
    const order = closure.order.map((m) => m.path.replace(/\.(xz|zst|gz)$/, ''));
    writeFileSync(join(stage, 'lib', 'modules', 'strata.order'), order.join('\n') + '\n');

    const entries: CpioEntry[] = [];
    for (const d of ['bin', 'dev', 'lab', 'lib', 'proc', 'run', 'sys', 'tmp']) entries.push({ type: 'dir', path: d });
    entries.push({ type: 'chardev', path: 'dev/console', major: 5, minor: 1 });
    entries.push({ type: 'file', path: 'bin/busybox', data: busybox, mode: 0o755 });
    entries.push({ type: 'symlink', path: 'bin/sh', target: 'busybox' });
    for (const s of scripts) entries.push({ type: 'file', path: s.name === 'init.sh' ? 'init' : `lab/${s.name}`, data: s.data, mode: 0o755 });
    const addTree = (abs: string): void => {
      for (const entry of readdirSync(abs, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
        const child = join(abs, entry.name);
        const rel = relative(stage, child);
        if (entry.isDirectory()) {
          entries.push({ type: 'dir', path: rel });
          addTree(child);
        } else entries.push({ type: 'file', path: rel, data: readFileSync(child) });
      }
    };
    entries.push({ type: 'dir', path: 'lib/modules' });
    addTree(join(stage, 'lib', 'modules'));
    const cpio = writeCpio(entries);
    const compressed = compression.args ? (await execArgv(compression.name, compression.args, { input: cpio, timeoutMs: 300_000 })).stdout : cpio;
    const tmp = `${path}.tmp-${process.pid}`;
    writeFileSync(tmp, compressed);
    writeFileSync(manifestPath, JSON.stringify({ kernel: kernel.release, key, cpioBytes: cpio.length, modules: closure.order, builtin: closure.builtin, unresolved: closure.unresolved }, null, 2) + '\n');
    renameSync(tmp, path);
    labLog(`initramfs ${path}: ${compressed.length} bytes (cpio ${cpio.length}) in ${since(start)} ms`);
    return { path, bytes: compressed.length, modules: closure.order, built: true, key };
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}
