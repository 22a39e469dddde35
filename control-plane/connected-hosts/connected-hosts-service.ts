// Connected hosts (spec 2.11, 4.7): the NVMe hosts connected to volumes, from the hosts each
// node's agent reports per volume. A host counts as connected to a node when a live node
// (its agent holds its presence) reports it on any volume; its volumes are every volume it
// is connected to on such a node; its unconnected nodes are the nodes of those volumes'
// nodeLists it has no connection to. docs/connected-hosts.md tells the choices.
import { errors } from '../../lib/errors.js';
import type { ConnectedHostsStore, ConnectionsSnapshot } from './connected-hosts-store.js';

/** How a host's NQN is known (a Strata extension; docs/connected-hosts.md). `unknown`: hostNQN is ''. */
export type HostNqnSourceWire = 'acl' | 'discovery' | 'unknown';

/** A connected host: the 6 fields of spec 2.11, and hostNQNSource (a Strata extension). */
export interface ConnectedHostWire {
  hostNQN: string;
  iPAddress: string;
  hostname: string;
  volumeUUIDs: string[];
  connectedNodesUUID: string[];
  unconnectedNodesUUID: string[];
  hostNQNSource: HostNqnSourceWire;
}

export class ConnectedHostsService {
  constructor(private readonly store: Pick<ConnectedHostsStore, 'read'>) {}

  /** Every connected host, by hostNQN; with `volumeUUID`, the hosts connected to that volume (404 if it does not exist). */
  async list(filter: { volumeUUID?: string } = {}): Promise<ConnectedHostWire[]> {
    const snapshot = await this.store.read();
    const { volumeUUID } = filter;
    if (volumeUUID !== undefined && !snapshot.volumes.has(volumeUUID)) throw errors.notFound('volume', volumeUUID);
    const hosts = connectedHosts(snapshot);
    return volumeUUID === undefined ? hosts : hosts.filter((h) => h.volumeUUIDs.includes(volumeUUID));
  }

  async get(hostNQN: string): Promise<ConnectedHostWire> {
    const host = hostNQN === '' ? undefined : connectedHosts(await this.store.read()).find((h) => h.hostNQN === hostNQN);
    if (!host) throw errors.notFound('connected host', hostNQN);
    return host;
  }
}

interface HostConnections {
  readonly hostNQN: string;
  /** The strongest source any of its connections gave. */
  source: HostNqnSourceWire;
  readonly volumes: Set<string>;
  readonly nodes: Set<string>;
  /** Address → how many (volume, node) connections came from it. */
  readonly addresses: Map<string, number>;
}

/** Stronger first: the ACL is the kernel's own check; a discovery Connect is an inference. */
const SOURCE_RANK: Readonly<Record<HostNqnSourceWire, number>> = { acl: 2, discovery: 1, unknown: 0 };

/**
 * Every live connection, by host: connections whose host NQN is known are grouped by it; the
 * others (hostNQN '') by their address, one entry per address, with hostNQNSource `unknown`.
 * Named hosts come first, by hostNQN; then unnamed ones, by address.
 */
export function connectedHosts(snapshot: ConnectionsSnapshot): ConnectedHostWire[] {
  const byHost = new Map<string, HostConnections>();
  for (const status of snapshot.statuses) {
    // A dead node's last report is not a live connection; a deleted volume has no hosts.
    if (!snapshot.activeNodes.has(status.nodeUUID) || !snapshot.volumes.has(status.volumeUUID) || status.state === 'Absent') continue;
    for (const connection of status.connectedHosts ?? []) {
      const address = ipOf(connection.address ?? '');
      if (!connection.hostNQN && !address) continue;
      const key = connection.hostNQN ? `nqn ${connection.hostNQN}` : `address ${address}`;
      const source: HostNqnSourceWire = !connection.hostNQN ? 'unknown' : connection.hostNQNSource === 'acl' || connection.hostNQNSource === 'discovery' ? connection.hostNQNSource : 'unknown';
      let host = byHost.get(key);
      if (!host) byHost.set(key, (host = { hostNQN: connection.hostNQN ?? '', source, volumes: new Set(), nodes: new Set(), addresses: new Map() }));
      if (SOURCE_RANK[source] > SOURCE_RANK[host.source]) host.source = source;
      host.volumes.add(status.volumeUUID);
      host.nodes.add(status.nodeUUID);
      if (address) host.addresses.set(address, (host.addresses.get(address) ?? 0) + 1);
    }
  }
  const order = (a: ConnectedHostWire, b: ConnectedHostWire) => compare(a.hostNQN === '' ? 1 : 0, b.hostNQN === '' ? 1 : 0) || compare(a.hostNQN, b.hostNQN) || compare(a.iPAddress, b.iPAddress);
  return [...byHost.values()]
    .map((host) => {
      const volumeNodes = new Set([...host.volumes].flatMap((uuid) => snapshot.volumes.get(uuid)?.placement?.nodeList ?? []));
      return {
        hostNQN: host.hostNQN,
        iPAddress: mainAddress(host.addresses),
        hostname: '', // hosts do not tell their name over NVMe/TCP
        volumeUUIDs: [...host.volumes].sort(),
        connectedNodesUUID: [...host.nodes].sort(),
        unconnectedNodesUUID: [...volumeNodes].filter((n) => !host.nodes.has(n)).sort(),
        hostNQNSource: host.source,
      };
    })
    .sort(order);
}

function compare<T extends string | number>(a: T, b: T): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The address most connections come from (ties: the smallest), '' when none is known. */
function mainAddress(addresses: ReadonlyMap<string, number>): string {
  let best = '';
  let bestCount = 0;
  for (const [address, count] of addresses) {
    if (count > bestCount || (count === bestCount && address < best)) [best, bestCount] = [address, count];
  }
  return best;
}

/** The IP of a reported address: `1.2.3.4`, `1.2.3.4:5000`, `[fe80::1]:5000` or `fe80::1`. */
export function ipOf(address: string): string {
  const a = address.trim();
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(a);
  if (bracketed) return bracketed[1]!;
  const v4 = /^(\d{1,3}(?:\.\d{1,3}){3}):\d+$/.exec(a);
  if (v4) return v4[1]!;
  return a;
}
