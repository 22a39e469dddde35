// Which hosts are connected to which volume port. The 6.1 kernel target shows no controllers in
// configfs and has no nvmet debugfs (ctrl<N>/host_traddr and friends arrived in 6.10), so the
// only trace of a connection is its TCP sockets: every NVMe/TCP queue (admin + one per I/O
// queue) is an established connection to the volume's own port. The agent reads them with
// `ss -Htan` and reports the peer addresses. resolveHostNqn names the host of each address where
// it can be known, and says how (docs/connected-hosts.md).
import type { PresentedHostsView } from '../../discovery/presented-hosts.js';
import type { ConnectedHostReport } from '../../../lib/records.js';
import { runCommand, type CommandRunner } from '../pool/storage-pool.js';

/** Local port → peer addresses (unique, sorted). */
export type ConnectionsByPort = ReadonlyMap<number, readonly string[]>;

export interface ConnectedHostsProbe {
  connectionsByPort(): Promise<ConnectionsByPort>;
}

/**
 * Parses `ss -Htan` (columns: State Recv-Q Send-Q Local:Port Peer:Port). A connection counts
 * only when its local port also has a listening socket: volume ports can fall in the
 * ephemeral range, where the server's own outgoing connections (to etcd, say) get local ports
 * too, and those are not hosts connected to a volume.
 */
export function parseSsAll(stdout: string): ConnectionsByPort {
  const listening = new Set<number>();
  const established: { port: number; peer: string }[] = [];
  for (const line of stdout.split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 5) continue;
    const local = splitHostPort(fields[3] as string);
    if (!local) continue;
    if (fields[0] === 'LISTEN') listening.add(local.port);
    else if (fields[0] === 'ESTAB') {
      const peer = splitHostPort(fields[4] as string);
      if (peer) established.push({ port: local.port, peer: peer.host });
    }
  }
  const byPort = new Map<number, Set<string>>();
  for (const { port, peer } of established) {
    if (!listening.has(port)) continue;
    let set = byPort.get(port);
    if (!set) byPort.set(port, (set = new Set()));
    set.add(peer);
  }
  return new Map([...byPort].map(([port, hosts]) => [port, [...hosts].sort()]));
}

function splitHostPort(field: string): { host: string; port: number } | undefined {
  const at = field.lastIndexOf(':');
  if (at <= 0) return undefined;
  const port = Number(field.slice(at + 1));
  if (!Number.isInteger(port)) return undefined;
  let host = field.slice(0, at);
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  host = host.replace(/%.*$/, ''); // scope id
  if (host.startsWith('::ffff:') && host.includes('.')) host = host.slice('::ffff:'.length);
  return { host, port };
}

export class SsConnectedHostsProbe implements ConnectedHostsProbe {
  constructor(private readonly run: CommandRunner = runCommand) {}

  async connectionsByPort(): Promise<ConnectionsByPort> {
    const { stdout } = await this.run('ss', ['-Htan']);
    return parseSsAll(stdout);
  }
}

/** The export's ACL as the kernel enforces it (DesiredExport's allowAnyHost and allowedHosts). */
export interface ExportAcl {
  readonly allowAnyHost: boolean;
  readonly allowedHosts: readonly string[];
}

/**
 * The host of a live connection from `address` to a volume exported with `acl`:
 * - `acl`: the ACL admits exactly one host NQN, so the kernel (allowed_hosts) let no other in;
 * - `discovery`: among the NQNs presented to this node's discovery controller from that address,
 *   exactly one is admitted by the ACL (several hosts behind one address: not known);
 * - otherwise not known: hostNQN '' (the connection is still reported, with its address).
 */
export function resolveHostNqn(address: string, acl: ExportAcl, presented: PresentedHostsView | undefined): ConnectedHostReport {
  if (!acl.allowAnyHost && acl.allowedHosts.length === 1) return { hostNQN: acl.allowedHosts[0]!, address, hostNQNSource: 'acl' };
  const admitted = (presented?.presentedFrom(address) ?? []).filter((nqn) => acl.allowAnyHost || acl.allowedHosts.includes(nqn));
  if (admitted.length === 1) return { hostNQN: admitted[0]!, address, hostNQNSource: 'discovery' };
  return { hostNQN: '', address, hostNQNSource: '' };
}
