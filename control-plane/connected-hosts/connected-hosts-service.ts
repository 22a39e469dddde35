// Connected hosts (spec 2.11, 4.7): the NVMe hosts connected to volumes, from the hosts each
// node's agent reports per volume. A host counts as connected to a node when a live node
// (its agent holds its presence) reports it on any volume; its volumes are every volume it
// is connected to on such a node; its unconnected nodes are the nodes of those volumes'
// nodeLists it has no connection to. docs/connected-hosts.md tells the choices.
import { errors } from '../../lib/errors.js';
import type { ConnectedHostsStore, ConnectionsSnapshot } from './connected-hosts-store.js';

/** A connected host: exactly the 6 fields of spec 2.11. */
export interface ConnectedHostWire {
  hostNQN: string;
  iPAddress: string;
  hostname: string;
  volumeUUIDs: string[];
  connectedNodesUUID: string[];
  unconnectedNodesUUID: string[];
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
    const host = connectedHosts(await this.store.read()).find((h) => h.hostNQN === hostNQN);
    if (!host) throw errors.notFound('connected host', hostNQN);
    return host;
  }
}

interface HostConnections {
  readonly volumes: Set<string>;
  readonly nodes: Set<string>;
  /** Address → how many (volume, node) connections came from it. */
  readonly addresses: Map<string, number>;
}

export function connectedHosts(snapshot: ConnectionsSnapshot): ConnectedHostWire[] {
  const byHost = new Map<string, HostConnections>();
  for (const status of snapshot.statuses) {
    // A dead node's last report is not a live connection; a deleted volume has no hosts.
    if (!snapshot.activeNodes.has(status.nodeUUID) || !snapshot.volumes.has(status.volumeUUID) || status.state === 'Absent') continue;
    for (const connection of status.connectedHosts ?? []) {
      if (!connection.hostNQN) continue;
      let host = byHost.get(connection.hostNQN);
      if (!host) byHost.set(connection.hostNQN, (host = { volumes: new Set(), nodes: new Set(), addresses: new Map() }));
      host.volumes.add(status.volumeUUID);
      host.nodes.add(status.nodeUUID);
      const address = ipOf(connection.address ?? '');
      if (address) host.addresses.set(address, (host.addresses.get(address) ?? 0) + 1);
    }
  }
  return [...byHost.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([hostNQN, host]) => {
      const volumeNodes = new Set([...host.volumes].flatMap((uuid) => snapshot.volumes.get(uuid)?.placement?.nodeList ?? []));
      return {
        hostNQN,
        iPAddress: mainAddress(host.addresses),
        hostname: '', // hosts do not tell their name over NVMe/TCP
        volumeUUIDs: [...host.volumes].sort(),
        connectedNodesUUID: [...host.nodes].sort(),
        unconnectedNodesUUID: [...volumeNodes].filter((n) => !host.nodes.has(n)).sort(),
      };
    });
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
