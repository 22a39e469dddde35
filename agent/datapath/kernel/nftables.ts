// Driver: the IP ACLs of volume ports in nftables. Owns exactly one table, `inet strata`, and
// touches nothing else: it reads it back with `nft -j list table inet strata` and changes it
// with one `nft -j -f <file>` transaction per apply (the kernel commits it atomically, or not
// at all). The `nft` command runs through execFile with argument arrays; the ruleset is JSON,
// so no address or name is ever parsed by a shell or by nft's grammar. It goes through a
// private temporary file: nft reads JSON input by opening the path, and /dev/stdin cannot be
// opened when stdin is a socket (as node's child stdio is).
//
// The table (see ip-acl.ts for why elements, not per-port rules):
//   table inet strata {
//     set restricted_ports { type inet_service }
//     set allowed_v4 { type ipv4_addr . inet_service }
//     set allowed_v6 { type ipv6_addr . inet_service }
//     chain input {
//       type filter hook input priority filter; policy accept;
//       tcp dport @restricted_ports ip saddr . tcp dport != @allowed_v4 reject with tcp reset
//       tcp dport @restricted_ports ip6 saddr . tcp dport != @allowed_v6 reject with tcp reset
//     }
//   }
// The rules match every packet, not only SYNs: a peer whose address was removed gets a TCP
// reset on its next segment, so its established connections drop at once.
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isIP } from 'node:net';
import { isDeepStrictEqual } from 'node:util';
import { canonicalIpv6, type IpAclChange, type IpAclTable, type ObservedIpAcls, type PortDelta } from './ip-acl.js';
import { nftablesOperations } from '../../metrics/agent-metrics.js';

export const NFT_FAMILY = 'inet';
export const NFT_TABLE = 'strata';
const SET = { restricted: 'restricted_ports', v4: 'allowed_v4', v6: 'allowed_v6' } as const;
const CHAIN = { name: 'input', type: 'filter', hook: 'input', prio: 0, policy: 'accept' } as const;
const SET_TYPES: Record<string, unknown> = {
  [SET.restricted]: 'inet_service',
  [SET.v4]: ['ipv4_addr', 'inet_service'],
  [SET.v6]: ['ipv6_addr', 'inet_service'],
};

/** One rule per address family: reset what reaches a restricted port from elsewhere. */
function ruleExpr(l3: 'ip' | 'ip6'): unknown[] {
  const dport = { payload: { protocol: 'tcp', field: 'dport' } };
  return [
    { match: { op: '==', left: dport, right: `@${SET.restricted}` } },
    { match: { op: '!=', left: { concat: [{ payload: { protocol: l3, field: 'saddr' } }, dport] }, right: `@${l3 === 'ip' ? SET.v4 : SET.v6}` } },
    { reject: { type: 'tcp reset' } },
  ];
}
const RULES = [ruleExpr('ip'), ruleExpr('ip6')];

/** The table cannot be read or written at all here: no nft, no nf_tables, no permission. */
export class NftablesUnavailable extends Error {}

export interface IpAclDriver {
  /** Throws NftablesUnavailable when nftables cannot be used on this server. */
  read(): Promise<ObservedIpAcls>;
  /** Applies the changes as one transaction: all or nothing. */
  apply(changes: readonly IpAclChange[]): Promise<void>;
}

export interface NftablesDriverOptions {
  /** The nft command and leading arguments; tests run it in a network namespace. */
  readonly command?: readonly string[];
  /** Where the ruleset file of an apply is written (a private directory per apply). */
  readonly tmpDir?: string;
  readonly timeoutMs?: number;
}

export class NftablesDriver implements IpAclDriver {
  private readonly command: readonly string[];
  private readonly timeoutMs: number;
  private readonly tmpDir: string;

  constructor(options: NftablesDriverOptions = {}) {
    this.command = options.command ?? ['nft'];
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.tmpDir = options.tmpDir ?? tmpdir();
  }

  async read(): Promise<ObservedIpAcls> {
    let stdout: string;
    try {
      ({ stdout } = await this.nft(['-j', 'list', 'table', NFT_FAMILY, NFT_TABLE]));
    } catch (err) {
      const stderr = stderrOf(err);
      if (/No such file or directory/i.test(stderr)) return { present: false, intact: false, ports: new Map() };
      throw new NftablesUnavailable(`nftables cannot be used on this server: ${reasonOf(err, stderr)}`);
    }
    return parseNftTable(stdout);
  }

  async apply(changes: readonly IpAclChange[]): Promise<void> {
    if (changes.length === 0) return;
    const dir = await fs.mkdtemp(join(this.tmpDir, 'strata-nft-'));
    try {
      const file = join(dir, 'ruleset.json');
      await fs.writeFile(file, JSON.stringify({ nftables: nftCommandsOf(changes) }), { mode: 0o600 });
      await this.nft(['-j', '-f', file]);
    } catch (err) {
      const stderr = stderrOf(err);
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !stderr) throw new NftablesUnavailable(`nftables cannot be used on this server: ${reasonOf(err, stderr)}`);
      throw new Error(`nft refused the change: ${reasonOf(err, stderr)}`);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  }

  private nft(args: readonly string[]): Promise<{ stdout: string; stderr: string }> {
    const [file, ...leading] = this.command as [string, ...string[]];
    return new Promise((resolve, reject) => {
      const child = execFile(file, [...leading, ...args], { encoding: 'utf8', timeout: this.timeoutMs, maxBuffer: 256 * 1024 * 1024 }, (err, stdout, stderr) => {
        nftablesOperations.labels(args.includes('-f') ? 'apply' : 'read', err ? 'error' : 'ok').inc();
        if (err) reject(Object.assign(err, { stdout, stderr }));
        else resolve({ stdout, stderr });
      });
      child.stdin?.on('error', () => undefined);
      child.stdin?.end();
    });
  }
}

const stderrOf = (err: unknown): string => String((err as { stderr?: unknown }).stderr ?? '').trim();

function reasonOf(err: unknown, stderr: string): string {
  if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !stderr) return 'the nft command is not installed (Debian package nftables)';
  if ((err as { killed?: boolean }).killed) return 'nft did not answer in time';
  // nft repeats the offending input under its message; the first line says what is wrong,
  // prefixed with a location ("internal:0:0-0: ").
  return (stderr.split('\n')[0] ?? '').replace(/^\S*:\d+:\d+-\d+: /, '') || (err as Error).message;
}

/** The nft JSON commands of one transaction. */
export function nftCommandsOf(changes: readonly IpAclChange[]): unknown[] {
  const table = { family: NFT_FAMILY, name: NFT_TABLE };
  const ref = { family: NFT_FAMILY, table: NFT_TABLE };
  const element = (name: string, elem: unknown[]) => ({ element: { ...ref, name, elem } });
  const removals = { restricted: [] as unknown[], v4: [] as unknown[], v6: [] as unknown[] };
  const additions = { restricted: [] as unknown[], v4: [] as unknown[], v6: [] as unknown[] };
  const commands: unknown[] = [];
  const addEntries = (into: typeof additions, port: number, rule: PortDelta) => {
    if (rule.restricted) into.restricted.push(port);
    for (const a of rule.v4) into.v4.push({ concat: [a, port] });
    for (const a of rule.v6) into.v6.push({ concat: [a, port] });
  };
  for (const change of changes) {
    switch (change.kind) {
      case 'delete':
        commands.push({ delete: { table } });
        break;
      case 'create':
        // `add table` does nothing when it exists, so the delete that follows never fails:
        // a damaged table is replaced within the same transaction.
        if (change.replace) commands.push({ add: { table } }, { delete: { table } });
        commands.push({ add: { table } });
        for (const name of [SET.restricted, SET.v4, SET.v6]) commands.push({ add: { set: { ...ref, name, type: SET_TYPES[name] } } });
        commands.push({ add: { chain: { ...ref, ...CHAIN } } });
        for (const expr of RULES) commands.push({ add: { rule: { ...ref, chain: CHAIN.name, expr } } });
        for (const [port, rule] of change.ports) addEntries(additions, port, rule);
        break;
      case 'port':
        addEntries(removals, change.port, change.remove);
        addEntries(additions, change.port, change.add);
        break;
    }
  }
  for (const [verb, lists] of [['delete', removals], ['add', additions]] as const) {
    for (const [key, name] of [['restricted', SET.restricted], ['v4', SET.v4], ['v6', SET.v6]] as const) {
      if (lists[key].length > 0) commands.push({ [verb]: element(name, lists[key]) });
    }
  }
  return commands;
}

/** `nft -j list table inet strata` → what the table holds and whether it is exactly ours. */
export function parseNftTable(json: string): ObservedIpAcls {
  const items = (JSON.parse(json) as { nftables?: Record<string, Record<string, unknown>>[] }).nftables ?? [];
  let intact = true;
  const sets = new Map<string, Record<string, unknown>>();
  const chains: Record<string, unknown>[] = [];
  const rules: Record<string, unknown>[] = [];
  for (const item of items) {
    const [kind, body] = Object.entries(item)[0] ?? [];
    if (!body || kind === 'metainfo' || kind === 'table') continue;
    if (kind === 'set') sets.set(String(body['name']), body);
    else if (kind === 'chain') chains.push(body);
    else if (kind === 'rule') rules.push(body);
    else intact = false; // maps, counters, flowtables...: not ours
  }
  if (sets.size !== 3) intact = false;
  for (const [name, body] of sets) {
    if (!(name in SET_TYPES) || !isDeepStrictEqual(body['type'], SET_TYPES[name]) || body['flags'] !== undefined) intact = false;
  }
  const chain = chains[0];
  if (chains.length !== 1 || !chain || Object.entries(CHAIN).some(([k, v]) => chain[k] !== v)) intact = false;
  if (rules.length !== RULES.length || rules.some((r, i) => r['chain'] !== CHAIN.name || !isDeepStrictEqual(r['expr'], RULES[i]))) intact = false;

  const ports = new Map<number, { restricted: boolean; v4: Set<string>; v6: Set<string> }>();
  const entry = (port: number) => {
    let e = ports.get(port);
    if (!e) ports.set(port, (e = { restricted: false, v4: new Set(), v6: new Set() }));
    return e;
  };
  for (const value of elementsOf(sets.get(SET.restricted))) {
    if (isPort(value)) entry(value).restricted = true;
    else intact = false;
  }
  for (const [name, family] of [[SET.v4, 4], [SET.v6, 6]] as const) {
    for (const value of elementsOf(sets.get(name))) {
      const [address, port] = (value as { concat?: unknown[] })?.concat ?? [];
      const text = typeof address !== 'string' ? undefined : family === 4 ? (isIP(address) === 4 ? address : undefined) : canonicalIpv6(address);
      if (text && isPort(port)) entry(port)[family === 4 ? 'v4' : 'v6'].add(text);
      else intact = false;
    }
  }
  const table: IpAclTable = new Map(
    [...ports].sort(([a], [b]) => a - b).map(([port, e]) => [port, { restricted: e.restricted, v4: [...e.v4].sort(), v6: [...e.v6].sort() }]),
  );
  return { present: true, intact, ports: table };
}

/** A set's elements; an element with options (timeout, comment) comes as {elem: {val}}. */
function elementsOf(set: Record<string, unknown> | undefined): unknown[] {
  const elems = set?.['elem'];
  if (!Array.isArray(elems)) return [];
  return elems.map((e) => ((e as { elem?: { val?: unknown } })?.elem ? (e as { elem: { val?: unknown } }).elem.val : e));
}

const isPort = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 65535;
