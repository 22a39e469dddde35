// The host NQNs hosts presented to this node's discovery controller, by the address they came
// from. The kernel target of Debian's 6.1 and 6.12 kernels does not say which host NQN a
// connection belongs to (docs/connected-hosts.md), but a host that attached through discovery
// told this node its NQN from the same address first: the data path uses that to name the hosts
// of live volume connections (agent/datapath/reconcile/connected-hosts.ts, source `discovery`).
import { isIP } from 'node:net';

/** What the data path reads. */
export interface PresentedHostsView {
  /** The NQNs presented from this address within the retention, most recent first. */
  presentedFrom(address: string): readonly string[];
}

/** How long a presentation counts after the host's last Connect (a host attaches once, with connect-all, then stays connected for days). */
export const PRESENTED_RETENTION_MS = 7 * 24 * 3600_000;
/** Addresses remembered at most (the oldest are forgotten first): a bound against Connect floods. */
export const MAX_PRESENTED_ADDRESSES = 4096;

export class PresentedHosts implements PresentedHostsView {
  /** Address → NQN → last time presented (ms); Map order is insertion: oldest address first. */
  private readonly byAddress = new Map<string, Map<string, number>>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly retentionMs = PRESENTED_RETENTION_MS,
    private readonly maxAddresses = MAX_PRESENTED_ADDRESSES,
  ) {}

  /** A host's successful discovery Connect: `hostNQN` from `address` (a socket's remoteAddress). */
  record(address: string | undefined, hostNQN: string): void {
    const key = normalizeAddress(address ?? '');
    if (key === '' || hostNQN === '') return;
    const nqns = this.byAddress.get(key) ?? new Map<string, number>();
    this.byAddress.delete(key); // re-inserted as the newest
    nqns.delete(hostNQN);
    nqns.set(hostNQN, this.now());
    this.byAddress.set(key, nqns);
    while (this.byAddress.size > this.maxAddresses) this.byAddress.delete(this.byAddress.keys().next().value as string);
  }

  presentedFrom(address: string): readonly string[] {
    const nqns = this.byAddress.get(normalizeAddress(address));
    if (!nqns) return [];
    const oldest = this.now() - this.retentionMs;
    return [...nqns].filter(([, at]) => at >= oldest).sort((a, b) => b[1] - a[1]).map(([nqn]) => nqn);
  }
}

/** `::ffff:10.0.0.1` (an IPv4 peer on a dual-stack socket) is 10.0.0.1; IPv6 in lower case. */
export function normalizeAddress(address: string): string {
  let a = address.trim().replace(/%.*$/, '');
  if (a.toLowerCase().startsWith('::ffff:') && isIP(a.slice(7)) === 4) a = a.slice(7);
  return isIP(a) === 6 ? a.toLowerCase() : a;
}
