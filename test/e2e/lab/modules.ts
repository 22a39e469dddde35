// Kernel module closure for the guest initramfs: reads `depends=`, `softdep=` and `alias=` from
// each module's `.modinfo` ELF section (parsed here, no modinfo binary needed) and orders the
// closure so every module follows what it depends on.
import { open, readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { execArgv } from './util.js';

/**
 * The modules lab.md lists for the guests: configfs and virtio transports, 9p + overlay for the
 * shared root, the NVMe host and target over TCP, device-mapper, md, btrfs, nftables, loop/brd/
 * null_blk; kTLS and the AES-GCM it negotiates (TLS on NVMe/TCP: tlshd hands the handshaken socket
 * to the kernel's `tls` ULP; the guest's modprobe only finds what the initramfs holds).
 * crc32c_generic comes first so libcrc32c users find a crc32c implementation.
 */
export const LAB_MODULES: readonly string[] = [
  'crc32c_generic',
  'configfs',
  'virtio_pci', 'virtio_net', 'virtio_blk', 'virtio-rng', 'virtio_console',
  '9p', '9pnet', '9pnet_virtio', 'netfs', 'overlay',
  'nvme', 'nvme-core', 'nvme-fabrics', 'nvme-tcp', 'nvmet', 'nvmet-tcp',
  'dm-mod', 'dm-bufio', 'dm-persistent-data', 'dm-bio-prison', 'dm-thin-pool', 'dm-snapshot', 'dm-mirror', 'dm-flakey',
  'md-mod', 'raid0', 'raid1', 'raid456',
  'btrfs',
  'nf_tables', 'nft_reject_inet', 'nft_ct',
  'loop', 'brd', 'null_blk',
  'tls', 'gcm', 'ghash-generic',
];

/**
 * Modules the guests load when their kernel has them: ublk_drv, the QoS stage's block device
 * (native/README.md), is in Debian 13's 6.12 but not in Debian 12's 6.1, whose guests must still
 * boot (and show that the server refuses cleanly there).
 */
export const OPTIONAL_LAB_MODULES: readonly string[] = ['ublk_drv'];

export interface ModInfo {
  readonly name: string;
  readonly depends: string[];
  readonly softPre: string[];
  readonly softPost: string[];
  readonly aliases: string[];
}

export interface ResolvedModule {
  /** Module name (underscores). */
  readonly name: string;
  /** Path relative to lib/modules/<release>, e.g. kernel/fs/btrfs/btrfs.ko. */
  readonly path: string;
  /** Why it is in the closure: 'listed', 'depends:<parent>', 'softdep:<parent>'. */
  readonly reason: string;
}

const normalize = (name: string): string => name.replace(/-/g, '_');

/** Module bytes, decompressing .ko.xz/.ko.zst/.ko.gz with the system's tools. */
export async function readModule(file: string): Promise<Buffer> {
  if (file.endsWith('.ko')) return readFile(file);
  const tool = file.endsWith('.xz') ? ['xz', '-dc'] : file.endsWith('.zst') ? ['zstd', '-dcq'] : file.endsWith('.gz') ? ['gzip', '-dc'] : undefined;
  if (!tool) throw new Error(`unknown module format: ${file}`);
  const { stdout } = await execArgv(tool[0]!, [...tool.slice(1), file], { timeoutMs: 60_000 });
  return stdout;
}

/** The NUL-separated key=value records of the `.modinfo` section of an ELF64 module. */
export function modinfoRecords(elf: Buffer): string[] {
  if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2) throw new Error('not an ELF64 module');
  const shoff = Number(elf.readBigUInt64LE(0x28));
  const shentsize = elf.readUInt16LE(0x3a);
  const shnum = elf.readUInt16LE(0x3c);
  const shstrndx = elf.readUInt16LE(0x3e);
  const section = (i: number) => {
    const at = shoff + i * shentsize;
    return { name: elf.readUInt32LE(at), offset: Number(elf.readBigUInt64LE(at + 24)), size: Number(elf.readBigUInt64LE(at + 32)) };
  };
  const strtab = section(shstrndx);
  for (let i = 0; i < shnum; i++) {
    const s = section(i);
    const nameStart = strtab.offset + s.name;
    const name = elf.toString('latin1', nameStart, elf.indexOf(0, nameStart));
    if (name === '.modinfo') return elf.toString('utf8', s.offset, s.offset + s.size).split('\0').filter((r) => r.length > 0);
  }
  return [];
}

export function parseModinfo(records: readonly string[], fallbackName: string): ModInfo {
  const info: ModInfo = { name: fallbackName, depends: [], softPre: [], softPost: [], aliases: [] };
  let name = fallbackName;
  for (const record of records) {
    const eq = record.indexOf('=');
    if (eq < 0) continue;
    const key = record.slice(0, eq);
    const value = record.slice(eq + 1);
    if (key === 'name') name = value;
    else if (key === 'depends') info.depends.push(...value.split(',').filter(Boolean));
    else if (key === 'alias') info.aliases.push(value);
    else if (key === 'softdep') {
      // "pre: a b post: c"
      let target: string[] | undefined;
      for (const token of value.split(/\s+/).filter(Boolean)) {
        if (token === 'pre:') target = info.softPre;
        else if (token === 'post:') target = info.softPost;
        else target?.push(token);
      }
    }
  }
  return { ...info, name: normalize(name) };
}

async function* walk(dir: string): AsyncGenerator<string> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(path);
    else if (/\.ko(\.(xz|zst|gz))?$/.test(entry.name)) yield path;
  }
}

/** Reads only the section headers and .modinfo of an uncompressed module (fast alias scans). */
async function modinfoOfFile(file: string): Promise<string[]> {
  if (!file.endsWith('.ko')) return modinfoRecords(await readModule(file));
  const handle = await open(file, 'r');
  try {
    const header = Buffer.alloc(64);
    await handle.read(header, 0, 64, 0);
    if (header.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${file}: not ELF`);
    const shoff = Number(header.readBigUInt64LE(0x28));
    const shentsize = header.readUInt16LE(0x3a);
    const shnum = header.readUInt16LE(0x3c);
    const shstrndx = header.readUInt16LE(0x3e);
    const table = Buffer.alloc(shentsize * shnum);
    await handle.read(table, 0, table.length, shoff);
    const sec = (i: number) => ({
      name: table.readUInt32LE(i * shentsize),
      offset: Number(table.readBigUInt64LE(i * shentsize + 24)),
      size: Number(table.readBigUInt64LE(i * shentsize + 32)),
    });
    const strtab = sec(shstrndx);
    const names = Buffer.alloc(strtab.size);
    await handle.read(names, 0, names.length, strtab.offset);
    for (let i = 0; i < shnum; i++) {
      const s = sec(i);
      if (names.toString('latin1', s.name, names.indexOf(0, s.name)) !== '.modinfo') continue;
      const data = Buffer.alloc(s.size);
      await handle.read(data, 0, data.length, s.offset);
      return data.toString('utf8').split('\0').filter((r) => r.length > 0);
    }
    return [];
  } finally {
    await handle.close();
  }
}

/** Glob-style match used by module aliases (only `*`, `?` and `[...]`). */
function aliasMatches(pattern: string, name: string): boolean {
  if (!/[*?[]/.test(pattern)) return pattern === name;
  const re = pattern.replace(/[.+^${}()|\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
  try {
    return new RegExp(`^${re}$`).test(name);
  } catch {
    return false;
  }
}

export interface ClosureResult {
  /** Load order: every module after its dependencies (and after its softdep `pre:` modules). */
  readonly order: ResolvedModule[];
  /** Softdeps satisfied by the kernel itself (built in). */
  readonly builtin: string[];
  /** Softdeps nothing provides (harmless, reported). */
  readonly unresolved: string[];
}

/**
 * Resolves `wanted` (names with - or _) in `modulesDir` (lib/modules/<release>) to a load order,
 * with the `optional` modules the kernel has.
 * Softdep names that are aliases (e.g. `crypto-crc32c`) resolve to the generic implementation
 * (a provider outside kernel/arch, which works on any CPU model the guest gets).
 */
export async function resolveModules(modulesDir: string, wanted: readonly string[], optional: readonly string[] = []): Promise<ClosureResult> {
  const files = new Map<string, string>();
  for await (const file of walk(join(modulesDir, 'kernel'))) {
    const base = file.slice(file.lastIndexOf('/') + 1).replace(/\.ko(\.(xz|zst|gz))?$/, '');
    files.set(normalize(base), file);
  }
  const builtinNames = new Set<string>();
  const builtinAliases: string[] = [];
  try {
    for (const line of (await readFile(join(modulesDir, 'modules.builtin'), 'utf8')).split('\n')) {
      const base = line.slice(line.lastIndexOf('/') + 1).replace(/\.ko$/, '');
      if (base) builtinNames.add(normalize(base));
    }
    for (const record of (await readFile(join(modulesDir, 'modules.builtin.modinfo'), 'latin1')).split('\0')) {
      const m = /^([^.]+)\.alias=(.*)$/.exec(record);
      if (m?.[2]) builtinAliases.push(m[2]);
    }
  } catch {
    /* optional files */
  }

  // Alias index, built lazily: softdeps name crypto algorithms and library functions, so the
  // modules under kernel/{crypto,lib,arch} are read first and the rest only if that finds nothing.
  const aliasIndex: { alias: string; name: string; file: string }[] = [];
  let indexed: 'none' | 'likely' | 'all' = 'none';
  const indexModules = async (filter: (rel: string) => boolean): Promise<void> => {
    for (const [name, file] of files) {
      if (!filter(relative(modulesDir, file))) continue;
      for (const record of await modinfoOfFile(file)) if (record.startsWith('alias=')) aliasIndex.push({ alias: record.slice(6), name, file });
    }
  };
  const likely = (rel: string): boolean => /^kernel\/(crypto|lib|arch)\//.test(rel);
  const providersOf = async (alias: string): Promise<string[]> => {
    if (indexed === 'none') {
      await indexModules(likely);
      indexed = 'likely';
    }
    let matches = aliasIndex.filter((entry) => aliasMatches(entry.alias, alias));
    if (matches.length === 0 && indexed === 'likely') {
      await indexModules((rel) => !likely(rel));
      indexed = 'all';
      matches = aliasIndex.filter((entry) => aliasMatches(entry.alias, alias));
    }
    const generic = matches.filter((entry) => !relative(modulesDir, entry.file).startsWith('kernel/arch/'));
    return [...new Set((generic.length > 0 ? generic : matches).map((entry) => entry.name))];
  };

  const infos = new Map<string, ModInfo>();
  const order: ResolvedModule[] = [];
  const done = new Set<string>();
  const active = new Set<string>();
  const builtin = new Set<string>();
  const unresolved = new Set<string>();

  const visit = async (requested: string, reason: string, soft: boolean): Promise<void> => {
    let names: string[];
    const n = normalize(requested);
    if (files.has(n)) names = [n];
    else if (builtinNames.has(n) || builtinAliases.some((a) => aliasMatches(a, requested))) {
      builtin.add(requested);
      return;
    } else {
      names = await providersOf(requested);
      if (names.length === 0) {
        if (!soft) throw new Error(`module ${requested} (${reason}) not found in ${modulesDir}`);
        unresolved.add(requested);
        return;
      }
    }
    for (const name of names) {
      if (done.has(name) || active.has(name)) continue;
      active.add(name);
      const file = files.get(name)!;
      let info = infos.get(name);
      if (!info) {
        info = parseModinfo(await modinfoOfFile(file), name);
        infos.set(name, info);
      }
      for (const dep of info.softPre) await visit(dep, `softdep:${name}`, true);
      for (const dep of info.depends) await visit(dep, `depends:${name}`, false);
      active.delete(name);
      done.add(name);
      order.push({ name, path: relative(modulesDir, file), reason });
      for (const dep of info.softPost) await visit(dep, `softdep:${name}`, true);
    }
  };
  for (const name of wanted) await visit(name, 'listed', false);
  // An optional module the kernel lacks ends in `unresolved`, like a softdep nothing provides.
  for (const name of optional) await visit(name, 'optional', true);
  return { order, builtin: [...builtin], unresolved: [...unresolved] };
}
