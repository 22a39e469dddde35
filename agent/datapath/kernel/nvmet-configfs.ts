// Driver for the kernel NVMe target's configfs tree (/sys/kernel/config/nvmet): reads the whole
// tree back into the NvmetTree model and applies the five operations the planner emits (mkdir,
// write attribute, symlink, unlink, rmdir) — nothing else.
//
// configfs itself creates an object's attribute files and default groups on mkdir, and drops
// them on rmdir: this driver only makes the call. Tests run it on a plain directory through a
// subclass that stands in for those two (test/kits/datapath/emulated-nvmet-configfs.ts, through
// the afterMkdir/beforeRmdir hooks), so the shipped driver has no test mode. What it handles:
// - write: one write(2) per value (configfs parses each write as a whole); errors come back as
//   the errno of the kernel's store function (EINVAL, EBUSY, EACCES).
// - symlink: the kernel resolves a configfs link target as a path from the process, not from
//   the link, so links are created with absolute targets. configfs reads links back as relative
//   paths (../../../hosts/x): only the target's last component is used.
// - read: write-only attributes (revalidate_size) are never read; an attribute that cannot be
//   read counts as unknown.
import {
  accessSync,
  closeSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  readlinkSync,
  rmdirSync,
  symlinkSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { isAbsolute, join, normalize, sep } from 'node:path';
import { configfsOperations } from '../../metrics/agent-metrics.js';
import {
  describeOp,
  emptyTree,
  namespaceAttributes,
  portAttributes,
  subsystemAttributes,
  type Attributes,
  type NvmetNamespace,
  type NvmetObjects,
  type NvmetOp,
  type NvmetPort,
  type NvmetSubsystem,
  type NvmetTree,
} from './nvmet-model.js';

export const DEFAULT_NVMET_ROOT = '/sys/kernel/config/nvmet';

/** Default groups configfs creates with an object, by object kind. */
export const defaultGroups = {
  subsystem: ['allowed_hosts', 'namespaces'],
  port: ['subsystems', 'referrals', 'ana_groups', 'ana_groups/1'],
} as const;

export class NvmetOperationError extends Error {
  constructor(
    readonly op: NvmetOp,
    readonly code: string | undefined,
    message: string,
  ) {
    super(message);
  }
}

export class NvmetConfigfs {
  constructor(readonly root: string) {
    if (!isAbsolute(root)) throw new Error(`the nvmet root must be an absolute path: ${root}`);
  }

  /**
   * The kernel's configfs tree behind this driver, for probing what the kernel supports; a
   * stand-in that has no kernel behind it answers undefined.
   */
  get kernelRoot(): string | undefined {
    return this.root;
  }

  /** The whole tree. `signal` stops the read between objects (it then throws the signal's reason). */
  async read(signal?: AbortSignal): Promise<NvmetTree> {
    const hosts = this.listDirs('hosts');
    const subsystemNames = this.listDirs('subsystems');
    const portNames = this.listDirs('ports');
    if (hosts === undefined && subsystemNames === undefined && portNames === undefined) return emptyTree();
    const subsystems = await readEach(subsystemNames ?? [], (nqn) => this.readSubsystem(nqn), signal);
    const ports = await readEach((portNames ?? []).filter((n) => /^\d+$/.test(n)), (id) => this.readPort(Number(id)), signal);
    return {
      hosts: new Set((hosts ?? []).sort()),
      subsystems: new Map(
        subsystems.filter((s): s is NvmetSubsystem => s !== undefined).sort(byKey((s) => s.nqn)).map((s) => [s.nqn, s]),
      ),
      ports: new Map(ports.filter((p): p is NvmetPort => p !== undefined).sort(byKey((p) => p.id)).map((p) => [p.id, p])),
    };
  }

  /**
   * Reads back only the named subsystems and ports, and the list of host entries: what a pass
   * that changes a few volumes needs to know fresh. An object that does not exist maps to
   * undefined.
   */
  async readObjects(scope: { readonly subsystems: Iterable<string>; readonly ports: Iterable<number> }): Promise<NvmetObjects> {
    const nqns = [...new Set(scope.subsystems)].sort();
    const ids = [...new Set(scope.ports)].sort((a, b) => a - b);
    const hosts = this.listDirs('hosts');
    const subsystems = await readEach(nqns, (nqn) => this.readSubsystem(nqn));
    const ports = await readEach(ids, (id) => this.readPort(id));
    return {
      hosts: new Set((hosts ?? []).sort()),
      subsystems: new Map(nqns.map((nqn, i) => [nqn, subsystems[i]])),
      ports: new Map(ids.map((id, i) => [id, ports[i]])),
    };
  }

  /**
   * Applies one operation. Throws NvmetOperationError (with the errno code) on failure. The
   * system calls are synchronous (each is a short in-kernel operation; a thread-pool round trip
   * per call cost more than the call): a caller applying many should let the event loop run
   * now and then.
   */
  async apply(op: NvmetOp): Promise<void> {
    try {
      await this.applyOne(op);
      configfsOperations.labels(op.op, 'ok').inc();
    } catch (err) {
      configfsOperations.labels(op.op, 'error').inc();
      throw err;
    }
  }

  private async applyOne(op: NvmetOp): Promise<void> {
    const path = this.resolve(op.path);
    try {
      switch (op.op) {
        case 'mkdir':
          mkdirSync(path);
          await this.afterMkdir(op.path);
          return;
        case 'write': {
          // 'w' (O_TRUNC|O_CREAT) is what nvmetcli uses on configfs too; a plain directory needs the
          // create. One write(2): configfs parses each write as a whole.
          const fd = openSync(path, 'w');
          try {
            const written = writeSync(fd, op.value);
            if (written !== Buffer.byteLength(op.value)) throw Object.assign(new Error('short write'), { code: 'EIO' });
          } finally {
            closeSync(fd);
          }
          return;
        }
        case 'symlink':
          symlinkSync(this.resolve(op.target), path);
          return;
        case 'unlink': {
          if (!lstatSync(path).isSymbolicLink()) throw Object.assign(new Error('not a link'), { code: 'EINVAL' });
          unlinkSync(path);
          return;
        }
        case 'rmdir':
          await this.beforeRmdir(op.path);
          rmdirSync(path);
          return;
      }
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new NvmetOperationError(op, code, `${describeOp(op)} failed: ${code ?? ''} ${(err as Error).message}`.trim());
    }
  }

  /** Resolves a path under the root; refuses one that escapes it. */
  protected resolve(relative: string): string {
    const clean = normalize(relative);
    if (isAbsolute(clean) || clean.startsWith('..') || clean.split(sep).includes('..')) {
      throw new Error(`configfs path escapes the nvmet root: ${relative}`);
    }
    return join(this.root, clean);
  }

  /** After an object's mkdir: nothing, configfs itself creates its attributes and default groups. */
  protected async afterMkdir(_relative: string): Promise<void> {}

  /** Before an object's rmdir: nothing, configfs itself drops its attributes and default groups. */
  protected async beforeRmdir(_relative: string): Promise<void> {}

  private readSubsystem(nqn: string): NvmetSubsystem | undefined {
    const base = `subsystems/${nqn}`;
    const attrs = this.readAttrs(base, subsystemAttributes);
    if (attrs === undefined) return undefined; // vanished while reading
    const allowedHosts = this.readLinks(`${base}/allowed_hosts`);
    const namespaces: NvmetNamespace[] = (this.listDirs(`${base}/namespaces`) ?? [])
      .filter((n) => /^\d+$/.test(n))
      .map((n) => ({ nsid: Number(n), attrs: this.readAttrs(`${base}/namespaces/${n}`, namespaceAttributes) ?? {} }));
    return {
      nqn,
      attrs,
      allowedHosts: allowedHosts.sort(),
      namespaces: new Map(namespaces.sort(byKey((n) => n.nsid)).map((n) => [n.nsid, n])),
    };
  }

  private readPort(id: number): NvmetPort | undefined {
    const base = `ports/${id}`;
    const attrs = this.readAttrs(base, portAttributes);
    if (attrs === undefined) return undefined;
    const anaGroups = (this.listDirs(`${base}/ana_groups`) ?? [])
      .filter((g) => /^\d+$/.test(g))
      .map((g): [number, string | undefined] => [Number(g), this.readValue(`${base}/ana_groups/${g}/ana_state`)]);
    return {
      id,
      attrs,
      anaGroups: new Map(anaGroups.sort(byKey(([g]) => g))),
      subsystems: this.readLinks(`${base}/subsystems`).sort(),
      referrals: (this.listDirs(`${base}/referrals`) ?? []).sort(),
    };
  }

  /** undefined when the object directory itself is gone. */
  private readAttrs<K extends string>(base: string, names: readonly K[]): Attributes<K> | undefined {
    try {
      accessSync(this.resolve(base));
    } catch (err) {
      throwIfOutOfResources(err);
      return undefined;
    }
    const attrs: Attributes<K> = {};
    for (const name of names) {
      const value = this.readValue(`${base}/${name}`);
      if (value !== undefined) attrs[name] = value;
    }
    return attrs;
  }

  private readValue(relative: string): string | undefined {
    try {
      // One read(2): configfs fills a whole attribute (at most a page) on the first read.
      // readFileSync would also fstat and read again for EOF.
      const fd = openSync(this.resolve(relative), 'r');
      try {
        const length = readSync(fd, attributeBuffer, 0, attributeBuffer.length, 0);
        return attributeBuffer.toString('utf8', 0, length).trimEnd();
      } finally {
        closeSync(fd);
      }
    } catch (err) {
      throwIfOutOfResources(err);
      return undefined;
    }
  }

  /** Directory entries that are directories; undefined when the directory does not exist. */
  private listDirs(relative: string): string[] | undefined {
    try {
      return readdirSync(this.resolve(relative), { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name);
    } catch (err) {
      throwIfOutOfResources(err);
      return undefined;
    }
  }

  /** Names of the objects the links in a directory point to. */
  private readLinks(relative: string): string[] {
    let entries;
    try {
      entries = readdirSync(this.resolve(relative), { withFileTypes: true });
    } catch (err) {
      throwIfOutOfResources(err);
      return [];
    }
    const targets: string[] = [];
    for (const e of entries) {
      if (!e.isSymbolicLink()) continue;
      try {
        const target = readlinkSync(join(this.resolve(relative), e.name)).replace(/\/+$/, '').split('/').pop() ?? e.name;
        if (target.length > 0) targets.push(target);
      } catch (err) {
        throwIfOutOfResources(err);
      }
    }
    return targets;
  }
}

/**
 * Reads objects one by one with synchronous calls, letting the event loop run between them.
 * Per object that is a few dozen system calls on an in-kernel filesystem (well under a
 * millisecond), where the asynchronous calls cost a thread-pool round trip each: that made a
 * full read of 1000 volumes take seconds (found by bench/datapath), and reading everything at
 * once ran the agent out of file descriptors. At most one file is open at any time.
 */
async function readEach<T, R>(items: readonly T[], read: (item: T) => R, signal?: AbortSignal): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i++) {
    if (i > 0 && i % OBJECTS_PER_TURN === 0) {
      await new Promise((resolve) => setImmediate(resolve));
      signal?.throwIfAborted();
    }
    results.push(read(items[i]!));
  }
  return results;
}

/** Attribute values are read into this (synchronously, so one buffer serves every read). */
const attributeBuffer = Buffer.alloc(8192);

/** Objects read between two turns of the event loop. */
const OBJECTS_PER_TURN = 8;

/**
 * A read that failed for want of file descriptors or memory says nothing about configfs: it must
 * fail the pass (which is retried), never read as "attribute missing" and be "repaired".
 */
function throwIfOutOfResources(err: unknown): void {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'EMFILE' || code === 'ENFILE' || code === 'ENOMEM') throw err;
}

/** The kind of object a path names (a subsystem or a port directory), or undefined. */
export function objectKind(relative: string): keyof typeof defaultGroups | undefined {
  const parts = normalize(relative).split(sep);
  if (parts.length === 2 && parts[0] === 'subsystems') return 'subsystem';
  if (parts.length === 2 && parts[0] === 'ports') return 'port';
  return undefined;
}

function byKey<T>(key: (t: T) => string | number): (a: T, b: T) => number {
  return (a, b) => {
    const ka = key(a);
    const kb = key(b);
    return ka < kb ? -1 : ka > kb ? 1 : 0;
  };
}

/**
 * Whether `path` lies on a configfs mount, from a mount table in /proc/self/mounts format.
 * The longest mount point that is a prefix of the path decides.
 */
export function isOnConfigfs(path: string, mountTable: string): boolean {
  let best: { mountPoint: string; fsType: string } | undefined;
  for (const line of mountTable.split('\n')) {
    const fields = line.split(' ');
    if (fields.length < 3) continue;
    const mountPoint = unescapeMountField(fields[1] as string);
    const fsType = fields[2] as string;
    const inside = mountPoint === '/' || path === mountPoint || path.startsWith(`${mountPoint}/`);
    if (inside && (!best || mountPoint.length >= best.mountPoint.length)) best = { mountPoint, fsType };
  }
  return best?.fsType === 'configfs';
}

function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}
