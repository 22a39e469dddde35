// A volume's IP ACL (`IPAcl` in the API, `ipAcl` in the assignment) as firewall state, and the
// smallest change that turns the firewall's state into the wanted one. Pure: no I/O here; the
// nftables driver (nftables.ts) reads and writes the table, ip-acl-enforcer.ts runs the passes.
//
// The table holds, for every restricted volume port, the addresses allowed to reach it:
//   restricted ports  {P, ...}                  a port not listed is not restricted
//   allowed IPv4      {addr . P, ...}           one element per (address, port)
//   allowed IPv6      {addr . P, ...}
// with two constant rules (one per family) that reset every TCP packet to a restricted port
// whose (source, port) pair is not allowed. Changing an ACL only adds and removes elements.
import { isIP } from 'node:net';
import { accessOf, ALLOW_ANY, mixedPseudoValuesProblem } from '../../../lib/contract/acl.js';

/** What one volume's IP ACL asks for. */
export interface IpAcl {
  /** false: ALLOW_ANY (or not given): nothing is filtered on the volume's port. */
  readonly restricted: boolean;
  /** Allowed source addresses in canonical form, sorted and unique (empty with ALLOW_NONE). */
  readonly v4: readonly string[];
  readonly v6: readonly string[];
}

/** One port's entries in the table. `restricted` false with addresses = stale leftovers. */
export type PortRule = IpAcl;

/** Port → its entries; ports with no entries at all are not listed. */
export type IpAclTable = ReadonlyMap<number, PortRule>;

export interface ObservedIpAcls {
  /** Our table exists. */
  readonly present: boolean;
  /** Its sets, chain and rules are exactly ours (anything else is rebuilt). */
  readonly intact: boolean;
  /** The entries found in its sets (whatever could be parsed). */
  readonly ports: IpAclTable;
}

export const ABSENT_TABLE: ObservedIpAcls = { present: false, intact: false, ports: new Map() };

/** The only changes made to the table; one list of them is applied as one nft transaction. */
export type IpAclChange =
  /** Creates the table with the given entries; `replace` first drops a table that is not intact. */
  | { readonly kind: 'create'; readonly replace: boolean; readonly ports: IpAclTable }
  /** Drops the table (nothing is restricted any more). */
  | { readonly kind: 'delete' }
  /** Adds and removes one port's elements. */
  | { readonly kind: 'port'; readonly port: number; readonly add: PortDelta; readonly remove: PortDelta };

export interface PortDelta {
  /** The port's element in the restricted-ports set. */
  readonly restricted: boolean;
  readonly v4: readonly string[];
  readonly v6: readonly string[];
}

const UNRESTRICTED: IpAcl = { restricted: false, v4: [], v6: [] };

/**
 * An assignment's `ipAcl` → what to enforce, or the reason it cannot be. Like the API: IPv4/IPv6
 * addresses, or exactly one ALLOW_ANY / ALLOW_NONE; empty = not given = ALLOW_ANY (the API's
 * default). An IPv4-mapped IPv6 address (::ffff:a.b.c.d) allows the IPv4 address: that is
 * what such a peer's packets carry.
 */
export function ipAclOf(entries: readonly string[]): IpAcl | string {
  const access = accessOf(entries, ALLOW_ANY);
  if (access === undefined) return mixedPseudoValuesProblem('an IP ACL');
  if (access === 'any') return UNRESTRICTED;
  if (access === 'none') return { restricted: true, v4: [], v6: [] };
  const v4 = new Set<string>();
  const v6 = new Set<string>();
  for (const entry of access) {
    const address = typeof entry === 'string' ? canonicalAddress(entry) : undefined;
    if (!address) return `invalid address in the IP ACL: ${JSON.stringify(entry)} (IPv4 or IPv6 addresses, no prefixes or zones)`;
    (address.family === 4 ? v4 : v6).add(address.text);
  }
  return { restricted: true, v4: [...v4].sort(), v6: [...v6].sort() };
}

/** A plain IPv4 or IPv6 address in the one form used for comparing with the table. */
export function canonicalAddress(text: string): { family: 4 | 6; text: string } | undefined {
  const kind = isIP(text);
  if (kind === 4) return { family: 4, text };
  if (kind !== 6) return undefined;
  const v6 = canonicalIpv6(text);
  if (!v6) return undefined;
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(v6);
  if (mapped) {
    const [hi, lo] = [parseInt(mapped[1]!, 16), parseInt(mapped[2]!, 16)];
    return { family: 4, text: `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}` };
  }
  return { family: 6, text: v6 };
}

/**
 * RFC 5952 text of an IPv6 address (lower case, longest zero run compressed), so that
 * `2001:DB8:0::1` from an ACL equals nft's `2001:db8::1`. Zones (`%eth0`) are refused.
 */
export function canonicalIpv6(text: string): string | undefined {
  if (isIP(text) !== 6 || text.includes('%')) return undefined;
  try {
    // The WHATWG URL host serializer implements exactly this canonical form.
    return new URL(`http://[${text}]/`).hostname.slice(1, -1);
  } catch {
    return undefined;
  }
}

/**
 * The table a pass wants: every wanted port as its volume's ACL asks (unrestricted ones are
 * simply absent), every other port as it is now (`retain` decides which of those stay).
 */
export function wantedTable(wanted: ReadonlyMap<number, IpAcl>, observed: IpAclTable, retain: (port: number) => boolean = () => true): IpAclTable {
  const table = new Map<number, PortRule>();
  for (const [port, rule] of observed) if (!wanted.has(port) && retain(port) && hasEntries(rule)) table.set(port, rule);
  for (const [port, acl] of wanted) if (hasEntries(acl)) table.set(port, acl);
  return table;
}

const hasEntries = (r: PortRule) => r.restricted || r.v4.length > 0 || r.v6.length > 0;

/** The smallest change from `observed` to `desired`; empty when they are the same. */
export function planIpAcls(desired: IpAclTable, observed: ObservedIpAcls): IpAclChange[] {
  const wanted = new Map([...desired].filter(([, r]) => hasEntries(r)));
  if (wanted.size === 0) return observed.present ? [{ kind: 'delete' }] : [];
  if (!observed.present || !observed.intact) return [{ kind: 'create', replace: observed.present, ports: wanted }];
  const changes: IpAclChange[] = [];
  for (const port of [...new Set([...wanted.keys(), ...observed.ports.keys()])].sort((a, b) => a - b)) {
    const want = wanted.get(port) ?? UNRESTRICTED;
    const have = observed.ports.get(port) ?? UNRESTRICTED;
    const add = { restricted: want.restricted && !have.restricted, v4: minus(want.v4, have.v4), v6: minus(want.v6, have.v6) };
    const remove = { restricted: have.restricted && !want.restricted, v4: minus(have.v4, want.v4), v6: minus(have.v6, want.v6) };
    if (isEmptyDelta(add) && isEmptyDelta(remove)) continue;
    changes.push({ kind: 'port', port, add, remove });
  }
  return changes;
}

/** Ports whose entries differ between the two tables (a failed change fails their volumes). */
export function portsThatDiffer(desired: IpAclTable, observed: IpAclTable): Set<number> {
  const ports = new Set<number>();
  for (const port of new Set([...desired.keys(), ...observed.keys()])) {
    if (!sameRule(desired.get(port) ?? UNRESTRICTED, observed.get(port) ?? UNRESTRICTED)) ports.add(port);
  }
  return ports;
}

export function describeIpAclChange(change: IpAclChange): string {
  switch (change.kind) {
    case 'create':
      return `${change.replace ? 'rebuild' : 'create'} the table with ${change.ports.size} restricted port(s)`;
    case 'delete':
      return 'delete the table';
    case 'port': {
      const words = [
        ...(change.add.restricted ? ['restrict'] : []),
        ...(change.remove.restricted ? ['lift the restriction'] : []),
        ...(change.add.v4.length + change.add.v6.length > 0 ? [`allow ${[...change.add.v4, ...change.add.v6].join(', ')}`] : []),
        ...(change.remove.v4.length + change.remove.v6.length > 0 ? [`disallow ${[...change.remove.v4, ...change.remove.v6].join(', ')}`] : []),
      ];
      return `port ${change.port}: ${words.join('; ')}`;
    }
  }
}

const minus = (a: readonly string[], b: readonly string[]) => {
  const other = new Set(b);
  return a.filter((x) => !other.has(x));
};
const isEmptyDelta = (d: PortDelta) => !d.restricted && d.v4.length === 0 && d.v6.length === 0;
const sameRule = (a: PortRule, b: PortRule) =>
  a.restricted === b.restricted && a.v4.join(',') === b.v4.join(',') && a.v6.join(',') === b.v6.join(',');
