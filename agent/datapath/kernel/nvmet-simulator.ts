// A model of how the kernel target reacts to the data path's operations, over NvmetTree. The
// planner runs its own operations through it (lenient) so each step sees the state the earlier
// steps leave; the planner's tests run plans through it in strict mode, which enforces the rules
// of drivers/nvme/target/configfs.c that Strata depends on, so an illegal order fails a test
// instead of a real server.
import type { NvmetNamespace, NvmetObjects, NvmetOp, NvmetPort, NvmetSubsystem, NvmetTree } from './nvmet-model.js';

interface WorkNamespace {
  nsid: number;
  attrs: Record<string, string | undefined>;
}
interface WorkSubsystem {
  nqn: string;
  attrs: Record<string, string | undefined>;
  allowedHosts: Set<string>;
  namespaces: Map<number, WorkNamespace>;
}
interface WorkPort {
  id: number;
  attrs: Record<string, string | undefined>;
  anaGroups: Map<number, string | undefined>;
  subsystems: Set<string>;
  referrals: string[];
}
export interface WorkTree {
  hosts: Set<string>;
  subsystems: Map<string, WorkSubsystem>;
  ports: Map<number, WorkPort>;
}

export function workCopy(tree: NvmetTree): WorkTree {
  return {
    hosts: new Set(tree.hosts),
    subsystems: new Map(
      [...tree.subsystems].map(([nqn, s]) => [
        nqn,
        {
          nqn,
          attrs: { ...s.attrs },
          allowedHosts: new Set(s.allowedHosts),
          namespaces: new Map([...s.namespaces].map(([id, ns]) => [id, { nsid: id, attrs: { ...ns.attrs } }])),
        },
      ]),
    ),
    ports: new Map(
      [...tree.ports].map(([id, p]) => [
        id,
        { id, attrs: { ...p.attrs }, anaGroups: new Map(p.anaGroups), subsystems: new Set(p.subsystems), referrals: [...p.referrals] },
      ]),
    ),
  };
}

/** Puts freshly read objects into a working tree (the tree the data path keeps between passes). */
export function replaceObjects(work: WorkTree, fresh: NvmetObjects): void {
  const copy = workCopy({
    hosts: fresh.hosts,
    subsystems: new Map([...fresh.subsystems].filter((e): e is [string, NvmetSubsystem] => e[1] !== undefined)),
    ports: new Map([...fresh.ports].filter((e): e is [number, NvmetPort] => e[1] !== undefined)),
  });
  work.hosts = copy.hosts;
  for (const nqn of fresh.subsystems.keys()) {
    const s = copy.subsystems.get(nqn);
    if (s) work.subsystems.set(nqn, s);
    else work.subsystems.delete(nqn);
  }
  for (const id of fresh.ports.keys()) {
    const p = copy.ports.get(id);
    if (p) work.ports.set(id, p);
    else work.ports.delete(id);
  }
}

/** Freezes a working tree back into the read-only model (sorted, like the driver reads it). */
export function treeOf(work: WorkTree): NvmetTree {
  const sortedMap = <K extends string | number, V>(m: Map<K, V>) =>
    new Map([...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return {
    hosts: new Set([...work.hosts].sort()),
    subsystems: sortedMap(
      new Map(
        [...work.subsystems].map(([nqn, s]): [string, NvmetSubsystem] => [
          nqn,
          {
            nqn,
            attrs: clean(s.attrs),
            allowedHosts: [...s.allowedHosts].sort(),
            namespaces: sortedMap(
              new Map([...s.namespaces].map(([id, ns]): [number, NvmetNamespace] => [id, { nsid: id, attrs: clean(ns.attrs) }])),
            ),
          },
        ]),
      ),
    ),
    ports: sortedMap(
      new Map(
        [...work.ports].map(([id, p]): [number, NvmetPort] => [
          id,
          {
            id,
            attrs: clean(p.attrs),
            anaGroups: sortedMap(new Map(p.anaGroups)),
            subsystems: [...p.subsystems].sort(),
            referrals: [...p.referrals].sort(),
          },
        ]),
      ),
    ),
  };
}

function clean<T extends Record<string, string | undefined>>(attrs: T): T {
  return Object.fromEntries(Object.entries(attrs).filter(([, v]) => v !== undefined)) as T;
}

export class SimulationError extends Error {}

export interface SimulateOptions {
  /** Throw where the kernel would refuse. */
  readonly strict?: boolean;
  /**
   * Give new objects the attribute values a real kernel shows after mkdir (default serial and
   * model, cntlid 1..65519, port group 1 optimized, ...), instead of the unknown values of a
   * plain directory.
   */
  readonly kernelDefaults?: boolean;
}

const kernelDefaults = {
  subsystem: { attr_allow_any_host: '0', attr_serial: '8fa77caa952415cfad42', attr_model: 'Linux', attr_cntlid_min: '1', attr_cntlid_max: '65519' },
  // As read on Debian's 6.1 kernel right after mkdir.
  namespace: {
    device_path: '(null)',
    device_uuid: '8d1f2c3a-0000-4000-8000-00000000abcd',
    device_nguid: '00000000-0000-0000-0000-000000000000',
    buffered_io: '0',
    enable: '0',
    ana_grpid: '1',
  },
  port: { addr_trtype: '', addr_adrfam: '', addr_traddr: '', addr_trsvcid: '' },
};

/**
 * Applies one operation to a working tree. Strict mode throws where the kernel would refuse
 * (EEXIST, ENOENT, EBUSY, EACCES, EINVAL, ENOTEMPTY); lenient mode only keeps the model.
 */
export function simulate(work: WorkTree, op: NvmetOp, options: SimulateOptions = {}): void {
  const strict = options.strict ?? false;
  const defaults = options.kernelDefaults ?? false;
  const fail = (why: string): void => {
    if (strict) throw new SimulationError(`${op.op} ${op.path}: ${why}`);
  };
  const parts = op.path.split('/');
  const [top, name, ...rest] = parts;
  if (top === 'hosts' && name !== undefined && rest.length === 0) {
    if (op.op === 'mkdir') {
      if (work.hosts.has(name)) fail('EEXIST');
      work.hosts.add(name);
    } else if (op.op === 'rmdir') {
      if (!work.hosts.has(name)) fail('ENOENT');
      for (const s of work.subsystems.values()) if (s.allowedHosts.has(name)) fail('host is still linked (EBUSY)');
      work.hosts.delete(name);
    } else fail('unexpected operation on a host');
    return;
  }
  if (top === 'hosts' && name !== undefined && rest.length === 1 && op.op === 'write' && (rest[0] === 'dhchap_key' || rest[0] === 'dhchap_ctrl_key')) {
    if (!work.hosts.has(name)) fail('ENOENT');
    return; // keys are not part of the model: the reconciler reads them back itself
  }
  if (top === 'subsystems' && name !== undefined) {
    simulateSubsystem(work, op, name, rest, fail, defaults);
    return;
  }
  if (top === 'ports' && name !== undefined) {
    simulatePort(work, op, Number(name), rest, fail, defaults);
    return;
  }
  fail('path outside the model');
}

function simulateSubsystem(work: WorkTree, op: NvmetOp, nqn: string, rest: string[], fail: (why: string) => void, defaults: boolean): void {
  const sub = work.subsystems.get(nqn);
  if (rest.length === 0) {
    if (op.op === 'mkdir') {
      if (sub) return fail('EEXIST');
      work.subsystems.set(nqn, { nqn, attrs: defaults ? { ...kernelDefaults.subsystem } : {}, allowedHosts: new Set(), namespaces: new Map() });
    } else if (op.op === 'rmdir') {
      if (!sub) return fail('ENOENT');
      if (sub.namespaces.size > 0 || sub.allowedHosts.size > 0) fail('ENOTEMPTY');
      for (const p of work.ports.values()) if (p.subsystems.has(nqn)) fail('still linked into a port');
      work.subsystems.delete(nqn);
    } else fail('unexpected operation on a subsystem');
    return;
  }
  if (!sub) return fail('ENOENT (no subsystem)');
  const [child, id, attr, ...more] = rest;
  if (rest.length === 1 && op.op === 'write' && child !== undefined) {
    if (child === 'attr_allow_any_host' && op.value === '1' && sub.allowedHosts.size > 0) fail('allow_any_host with explicit hosts (EINVAL)');
    if (child === 'attr_cntlid_min' && Number(op.value) >= Number(sub.attrs['attr_cntlid_max'] ?? 0xffef)) fail('cntlid_min >= cntlid_max (EINVAL)');
    if (child === 'attr_cntlid_max' && Number(op.value) <= Number(sub.attrs['attr_cntlid_min'] ?? 1)) fail('cntlid_max <= cntlid_min (EINVAL)');
    if (child === 'attr_serial' && (op.value.length === 0 || op.value.length > 20)) fail('serial length (EINVAL)');
    sub.attrs[child] = op.value;
    return;
  }
  if (child === 'allowed_hosts' && id !== undefined && attr === undefined) {
    if (op.op === 'symlink') {
      if (sub.allowedHosts.has(id)) fail('EEXIST');
      if (sub.attrs['attr_allow_any_host'] === '1') fail('hosts with allow_any_host (EINVAL)');
      if (op.target !== `hosts/${id}` || !work.hosts.has(id)) fail('link target is not an existing host');
      sub.allowedHosts.add(id);
    } else if (op.op === 'unlink') {
      if (!sub.allowedHosts.has(id)) fail('ENOENT');
      sub.allowedHosts.delete(id);
    } else fail('unexpected operation in allowed_hosts');
    return;
  }
  if (child === 'namespaces' && id !== undefined) {
    const nsid = Number(id);
    const ns = sub.namespaces.get(nsid);
    if (attr === undefined) {
      if (op.op === 'mkdir') {
        if (ns) return fail('EEXIST');
        sub.namespaces.set(nsid, { nsid, attrs: defaults ? { ...kernelDefaults.namespace } : {} });
      } else if (op.op === 'rmdir') {
        if (!ns) return fail('ENOENT');
        sub.namespaces.delete(nsid);
      } else fail('unexpected operation on a namespace');
      return;
    }
    if (!ns) return fail('ENOENT (no namespace)');
    if (op.op !== 'write' || more.length > 0) return fail('unexpected operation on a namespace attribute');
    const enabled = ns.attrs['enable'] === '1';
    if (['device_path', 'device_uuid', 'device_nguid', 'buffered_io'].includes(attr) && enabled) fail(`${attr} while enabled (EBUSY)`);
    if (attr === 'revalidate_size') {
      if (!enabled) fail('revalidate_size while disabled (EINVAL)');
      return;
    }
    const devicePath = ns.attrs['device_path'];
    if (attr === 'enable' && op.value === '1' && (!devicePath || devicePath === '(null)')) fail('enable without device_path');
    ns.attrs[attr] = op.value;
    return;
  }
  fail('path outside the model');
}

function simulatePort(work: WorkTree, op: NvmetOp, id: number, rest: string[], fail: (why: string) => void, defaults: boolean): void {
  const port = work.ports.get(id);
  if (rest.length === 0) {
    if (op.op === 'mkdir') {
      if (port) return fail('EEXIST');
      // configfs creates the default group ana_groups/1 (its state reads "optimized" on a real
      // kernel; the model leaves it unknown, as a plain directory does).
      work.ports.set(id, {
        id,
        attrs: defaults ? { ...kernelDefaults.port } : {},
        anaGroups: new Map([[1, defaults ? 'optimized' : undefined]]),
        subsystems: new Set(),
        referrals: [],
      });
    } else if (op.op === 'rmdir') {
      if (!port) return fail('ENOENT');
      if (port.subsystems.size > 0 || port.referrals.length > 0 || [...port.anaGroups.keys()].some((g) => g !== 1)) fail('ENOTEMPTY');
      work.ports.delete(id);
    } else fail('unexpected operation on a port');
    return;
  }
  if (!port) return fail('ENOENT (no port)');
  const [child, sub, attr] = rest;
  if (rest.length === 1 && op.op === 'write' && child !== undefined) {
    if (child.startsWith('addr_') && port.subsystems.size > 0) fail(`${child} while the port is enabled (EACCES)`);
    port.attrs[child] = op.value;
    return;
  }
  if (child === 'ana_groups' && sub !== undefined) {
    const group = Number(sub);
    if (attr === undefined) {
      if (op.op === 'mkdir') {
        if (port.anaGroups.has(group)) return fail('EEXIST');
        port.anaGroups.set(group, undefined);
      } else if (op.op === 'rmdir') {
        if (group === 1) fail('the default ANA group cannot be removed (EPERM)');
        port.anaGroups.delete(group);
      } else fail('unexpected operation on an ANA group');
      return;
    }
    if (attr === 'ana_state' && op.op === 'write') {
      if (!port.anaGroups.has(group)) return fail('ENOENT (no ANA group)');
      port.anaGroups.set(group, op.value);
      return;
    }
    return fail('path outside the model');
  }
  if (child === 'subsystems' && sub !== undefined && attr === undefined) {
    if (op.op === 'symlink') {
      if (port.subsystems.has(sub)) fail('EEXIST');
      if (op.target !== `subsystems/${sub}` || !work.subsystems.has(sub)) fail('link target is not an existing subsystem');
      if (strictPortIncomplete(port)) fail('port address incomplete: the kernel cannot enable it');
      port.subsystems.add(sub);
    } else if (op.op === 'unlink') {
      if (!port.subsystems.has(sub)) fail('ENOENT');
      port.subsystems.delete(sub);
    } else fail('unexpected operation in a port’s subsystems');
    return;
  }
  fail('path outside the model');
}

function strictPortIncomplete(port: WorkPort): boolean {
  return !port.attrs['addr_trtype'] || !port.attrs['addr_adrfam'] || !port.attrs['addr_traddr'] || !port.attrs['addr_trsvcid'];
}

/** Runs operations over a tree and returns the result (strict by default: throws SimulationError). */
export function simulateOps(tree: NvmetTree, ops: readonly NvmetOp[], options: SimulateOptions = { strict: true }): NvmetTree {
  const work = workCopy(tree);
  for (const op of ops) simulate(work, op, options);
  return treeOf(work);
}
