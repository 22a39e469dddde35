// Which etcd member runs on each server, its raft role and its health (spec 2.16
// `etcdMemberInfo`), measured when servers are read: etcd's member list (names, URLs, learner
// flag), one Status call (the leader's member ID), and each member's own `/health` on its client
// URL (it answers true only with a leader and a working read path). A server's member is the one
// whose peer or client URL has the server's address, when that pairing is one to one; no
// member, or an address several members or several servers share (one host running a test
// cluster), leaves it Unknown/UnknownRole: not measured, never guessed (docs/api.md).
import { isIP } from 'node:net';
import type { Etcd3 } from 'etcd3';
import { hostOf } from '../../lib/endpoints.js';

export interface EtcdMemberInfoWire {
  state: 'Unknown' | 'Healthy' | 'Unhealthy';
  role: 'UnknownRole' | 'Leader' | 'Follower' | 'Learner';
}

export const UNKNOWN_MEMBER: EtcdMemberInfoWire = Object.freeze({ state: 'Unknown', role: 'UnknownRole' }) as EtcdMemberInfoWire;

export interface EtcdMember {
  readonly hosts: readonly string[];
  readonly info: EtcdMemberInfoWire;
}

/** What the servers service reads etcd's members from. */
export interface EtcdMemberSource {
  members(): Promise<readonly EtcdMember[]>;
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

export function addressOf(endpoint: string): string {
  const bare = endpoint.replace(/^\[(.*)\]$/, '$1');
  if (isIP(bare) !== 0) return bare.toLowerCase();
  try {
    return new URL(endpoint).hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  } catch {
    return hostOf(endpoint).toLowerCase();
  }
}

export interface EtcdMembersOptions {
  /** How long one member's /health may take before it counts as Unhealthy (default 1 s). */
  readonly healthTimeoutMs?: number;
  /** How long one measurement is reused (default 2 s): a listing per second costs one. */
  readonly cacheMs?: number;
}

export class EtcdMembers implements EtcdMemberSource {
  private cached: { at: number; members: Promise<readonly EtcdMember[]> } | null = null;

  constructor(private readonly etcd: Etcd3, private readonly options: EtcdMembersOptions = {}) {}

  members(): Promise<readonly EtcdMember[]> {
    const now = Date.now();
    if (this.cached && now - this.cached.at < (this.options.cacheMs ?? 2000)) return this.cached.members;
    const members = this.measure();
    this.cached = { at: now, members };
    members.catch(() => {
      if (this.cached?.members === members) this.cached = null;
    });
    return members;
  }

  private async measure(): Promise<readonly EtcdMember[]> {
    const [list, status] = await Promise.all([this.etcd.cluster.memberList({}), this.etcd.maintenance.status({})]);
    return Promise.all(
      list.members.map(async (m): Promise<EtcdMember> => {
        const urls = [...(m.peerURLs ?? []), ...(m.clientURLs ?? [])];
        const hosts = urls.flatMap((u) => {
          const host = addressOf(u);
          return host === '' ? [] : [host];
        });
        const role = m.isLearner ? 'Learner' : String(m.ID) === String(status.leader) ? 'Leader' : 'Follower';
        // A member added but not started yet has no name and no client URLs: nothing to ask.
        const state = (m.clientURLs ?? []).length === 0 ? 'Unhealthy' : await this.health(m.clientURLs);
        return { hosts, info: { state, role } };
      }),
    );
  }

  /** Healthy when one of the member's client URLs answers /health with true. */
  private async health(clientURLs: readonly string[]): Promise<EtcdMemberInfoWire['state']> {
    for (const url of clientURLs) {
      try {
        const res = await fetch(new URL('/health', url), { signal: AbortSignal.timeout(this.options.healthTimeoutMs ?? 1000) });
        const body = (await res.json()) as { health?: unknown };
        if (body.health === true || body.health === 'true') return 'Healthy';
      } catch (err) {
        // TLS client URLs this process cannot verify: not measured.
        if (url.startsWith('https:') && !isTimeoutOrRefused(err)) return 'Unknown';
      }
    }
    return 'Unhealthy';
  }
}

function isTimeoutOrRefused(err: unknown): boolean {
  const e = err as { name?: string; cause?: { code?: string } };
  return e?.name === 'TimeoutError' || e?.cause?.code === 'ECONNREFUSED';
}
