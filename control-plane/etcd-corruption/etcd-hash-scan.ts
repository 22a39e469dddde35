// One corruption scan of the cluster's etcd (spec 4.4, issue 15 item 6), with etcd's own tool:
// every member is asked, on its own client URL, for the hash of its key-value store up to one
// revision (HashKV). Members that agree on the revision's history hold the same hash; a member
// whose data differ (a disk or a restore gone wrong) holds another. The revision is the lowest
// current revision of the members that answer, so every member has it. Hashes are compared only
// between members at the same compact revision (compaction changes what the hash covers), the
// way etcd's own corruption check does.
import { Etcd3, type ICallable, type IHashKVResponse } from 'etcd3';

export type MemberScanResult = 'Agrees' | 'Disagrees' | 'Unreachable' | 'NotCompared';

export interface MemberScan {
  readonly ID: string;
  readonly name: string;
  readonly clientURL: string;
  /** HashKV's hash at the scan's revision ('' when it did not answer). */
  readonly hash: string;
  readonly compactRevision: string;
  readonly result: MemberScanResult;
  readonly error: string;
}

export interface HashScan {
  readonly revision: string;
  readonly corrupted: boolean;
  readonly members: readonly MemberScan[];
}

export interface HashScanOptions {
  /** How long one member may take to answer (default 5 s). */
  readonly timeoutMs?: number;
}

/** Lists the members through `etcd`, then asks each one on its own client URL. */
export async function scanEtcdHashes(etcd: Etcd3, options: HashScanOptions = {}): Promise<HashScan> {
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
    const hashes = await Promise.all(
      clients.map(async (c, i) => {
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
    return { revision, ...compare(clients, hashes) };
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

type Answer = { hash?: string; compactRevision?: string; error?: string };

/**
 * Which members disagree: among the members at the most common compact revision, the hash most
 * of them hold is the cluster's; a member with another hash Disagrees. With no hash held by more
 * members than any other (two members, two hashes), every member of that group Disagrees: the
 * data differ and a scan cannot tell whose are right.
 */
export function compare(members: readonly { ID: string; name: string; clientURL: string }[], answers: readonly Answer[]): Omit<HashScan, 'revision'> {
  const byCompact = new Map<string, number>();
  for (const a of answers) if (a.hash !== undefined) byCompact.set(a.compactRevision!, (byCompact.get(a.compactRevision!) ?? 0) + 1);
  const compactRevision = mostCommon(byCompact);
  const byHash = new Map<string, number>();
  for (const a of answers) if (a.hash !== undefined && a.compactRevision === compactRevision) byHash.set(a.hash, (byHash.get(a.hash) ?? 0) + 1);
  const consensus = mostCommon(byHash);
  const scans: MemberScan[] = members.map((m, i) => {
    const a = answers[i] ?? {};
    const base = { ID: m.ID, name: m.name, clientURL: m.clientURL, hash: a.hash ?? '', compactRevision: a.compactRevision ?? '', error: a.error ?? '' };
    if (a.hash === undefined) return { ...base, result: 'Unreachable' };
    if (a.compactRevision !== compactRevision) return { ...base, result: 'NotCompared' };
    return { ...base, result: byHash.size > 1 && a.hash !== consensus ? 'Disagrees' : 'Agrees' };
  });
  return { corrupted: scans.some((s) => s.result === 'Disagrees'), members: scans };
}

/** The key with the highest count; undefined on a tie for the highest. */
function mostCommon(counts: Map<string, number>): string | undefined {
  let best: string | undefined;
  let bestCount = 0;
  let tie = false;
  for (const [key, count] of counts) {
    if (count > bestCount) [best, bestCount, tie] = [key, count, false];
    else if (count === bestCount) tie = true;
  }
  return tie ? undefined : best;
}
