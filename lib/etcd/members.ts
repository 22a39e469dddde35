// Which etcd members there are, their raft role and their health (spec 2.16 `etcdMemberInfo`),
// measured when asked: etcd's member list (names, URLs, learner flag), one Status call (the
// leader's member ID), and each member's own `/health` on its client URL (it answers true only
// with a leader and a working read path). Which server a member runs on is the servers
// resource's decision (control-plane/servers/etcd-members.ts); this driver only measures.
import type { Etcd3 } from 'etcd3';
import { addressOf } from '../endpoints.js';

/** A member's health and raft role, as the servers API shows them. */
export interface EtcdMemberInfo {
  state: 'Unknown' | 'Healthy' | 'Unhealthy';
  role: 'UnknownRole' | 'Leader' | 'Follower' | 'Learner';
}

/** One member: the addresses of its peer and client URLs, and what was measured of it. */
export interface EtcdMember {
  readonly hosts: readonly string[];
  readonly info: EtcdMemberInfo;
}

export interface EtcdMembersOptions {
  /** How long one member's /health may take before it counts as Unhealthy (default 1 s). */
  readonly healthTimeoutMs?: number;
  /** How long one measurement is reused (default 2 s): a listing per second costs one. */
  readonly cacheMs?: number;
}

export class EtcdMembers {
  private cached: { at: number; members: Promise<readonly EtcdMember[]> } | null = null;

  constructor(private readonly etcd: Etcd3, private readonly options: EtcdMembersOptions = {}) {}

  /** `fresh`: measured now, not reused (right after a membership change this process made). */
  members(options: { readonly fresh?: boolean } = {}): Promise<readonly EtcdMember[]> {
    const now = Date.now();
    if (!options.fresh && this.cached && now - this.cached.at < (this.options.cacheMs ?? 2000)) return this.cached.members;
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
  private async health(clientURLs: readonly string[]): Promise<EtcdMemberInfo['state']> {
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
