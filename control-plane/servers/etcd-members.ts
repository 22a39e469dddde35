// Which etcd member runs on each server, its raft role and its health (spec 2.16
// `etcdMemberInfo`), measured when servers are read (lib/etcd/members.ts, the etcd driver,
// measures the members: list, leader, each one's `/health`). A server's member is the one
// whose peer or client URL has the server's address, when that pairing is one to one; no
// member, or an address several members or several servers share (one host running a test
// cluster), leaves it Unknown/UnknownRole: not measured, never guessed (docs/api.md).
import { addressOf } from '../../lib/endpoints.js';
import type { EtcdMember, EtcdMemberInfo } from '../../lib/etcd/members.js';

// The composition root makes the driver (lib/etcd/members.ts); control-plane/inventory/
// inventory-reader.test.ts still imports it from here, so it is passed on until that test
// imports it from lib/etcd/members.js.
export { EtcdMembers } from '../../lib/etcd/members.js';

export type EtcdMemberInfoWire = EtcdMemberInfo;

export const UNKNOWN_MEMBER: EtcdMemberInfoWire = Object.freeze({ state: 'Unknown', role: 'UnknownRole' }) as EtcdMemberInfoWire;

/** What the servers service reads etcd's members from. */
export interface EtcdMemberSource {
  /** `fresh`: measured now, not a measurement reused from the last seconds. */
  members(options?: { readonly fresh?: boolean }): Promise<readonly EtcdMember[]>;
}

/**
 * Each server's member, by server UUID, from the servers' endpoints (addresses, or host:port):
 * only pairs where the server matches exactly one member and that member exactly one server.
 */
export function membersOfServers(members: readonly EtcdMember[], servers: Iterable<{ readonly UUID: string; readonly endpoints?: readonly string[] }>): Map<string, EtcdMemberInfoWire> {
  const matches = new Map<string, EtcdMember[]>();
  const serversOfMember = new Map<EtcdMember, number>();
  for (const server of servers) {
    const addresses = new Set((server.endpoints ?? []).map(addressOf).filter((a) => a !== ''));
    const mine = members.filter((m) => m.hosts.some((h) => addresses.has(h)));
    matches.set(server.UUID, mine);
    for (const m of mine) serversOfMember.set(m, (serversOfMember.get(m) ?? 0) + 1);
  }
  const result = new Map<string, EtcdMemberInfoWire>();
  for (const [uuid, mine] of matches) {
    const only = mine.length === 1 ? mine[0]! : undefined;
    result.set(uuid, only && serversOfMember.get(only) === 1 ? only.info : UNKNOWN_MEMBER);
  }
  return result;
}
