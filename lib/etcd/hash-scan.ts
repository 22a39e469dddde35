// The etcd half of the corruption scan (spec 4.4, issue 15 item 6): every member is asked, on its
// own client URL, for the hash of its key-value store up to one revision (HashKV). The revision
// is the lowest current revision of the members that answer, so every member has it. Which
// members disagree is the scan's domain decision (control-plane/etcd-corruption/etcd-hash-scan.ts
// compares the answers); this driver only collects them, one per member, in member-list order.
import { Etcd3, type ICallable, type IHashKVResponse } from 'etcd3';

/** A member as the member list names it. */
export interface HashedMember {
  readonly ID: string;
  readonly name: string;
  readonly clientURL: string;
}

/** One member's answer: its hash and compact revision, or why it gave none. */
export interface HashAnswer {
  readonly hash?: string;
  readonly compactRevision?: string;
  readonly error?: string;
}

/** Every member's answer at one revision; `answers[i]` is `members[i]`'s. */
export interface MemberHashes {
  readonly revision: string;
  readonly members: readonly HashedMember[];
  readonly answers: readonly HashAnswer[];
}

export interface HashMembersOptions {
  /** How long one member may take to answer (default 5 s). */
  readonly timeoutMs?: number;
}

/** Lists the members through `etcd`, then asks each one on its own client URL; throws when none answers. */
export async function hashMembers(etcd: Etcd3, options: HashMembersOptions = {}): Promise<MemberHashes> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const { members } = await etcd.cluster.memberList({});
  const clients = members.map((m) => {
    const clientURL = (m.clientURLs ?? [])[0] ?? '';
    return {
      ID: String(m.ID),
      name: m.name ?? '',
      clientURL,
      client: clientURL ? new Etcd3({ hosts: clientURL, dialTimeout: timeoutMs, defaultCallOptions: () => ({ deadline: Date.now() + timeoutMs }) }) : undefined,
    };
  });
  try {
    const statuses = await Promise.all(clients.map(async (c) => (c.client ? c.client.maintenance.status({}).catch((err: Error) => err) : new Error('the member has no client URL (added, never started)'))));
    const revisions = statuses.filter((s): s is Exclude<typeof s, Error> => !(s instanceof Error)).map((s) => BigInt(s.header.revision));
    if (revisions.length === 0) throw new Error('no etcd member answered');
    const revision = revisions.reduce((a, b) => (b < a ? b : a)).toString();
    const answers = await Promise.all(
      clients.map(async (c, i): Promise<HashAnswer> => {
        const status = statuses[i];
        if (status instanceof Error || !c.client) return { error: status instanceof Error ? status.message : 'no client URL' };
        try {
          const answer = await hashKV(c.client, revision);
          return { hash: String(answer.hash), compactRevision: String(answer.compact_revision) };
        } catch (err) {
          return { error: (err as Error).message };
        }
      }),
    );
    return { revision, members: clients.map(({ ID, name, clientURL }) => ({ ID, name, clientURL })), answers };
  } finally {
    for (const c of clients) c.client?.close();
  }
}

/**
 * Maintenance.HashKV on one member. etcd3's `maintenance.hashKV` asks grpc-js for a method named
 * `hashKV`, which its service object names `HashKV`/`hashKv`: it always fails ("client[method] is
 * not a function"). The call goes through the same connection pool under the real name.
 */
function hashKV(client: Etcd3, revision: string): Promise<IHashKVResponse> {
  const pool = (client.maintenance as unknown as { client: ICallable<unknown> }).client;
  return pool.exec<IHashKVResponse>('Maintenance', 'HashKV', { revision });
}
