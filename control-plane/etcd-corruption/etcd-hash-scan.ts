// One corruption scan of the cluster's etcd (spec 4.4, issue 15 item 6), with etcd's own tool:
// every member is asked, on its own client URL, for the hash of its key-value store up to one
// revision (HashKV). Members that agree on the revision's history hold the same hash; a member
// whose data differ (a disk or a restore gone wrong) holds another. The revision is the lowest
// current revision of the members that answer, so every member has it. Hashes are compared only
// between members at the same compact revision (compaction changes what the hash covers), the
// way etcd's own corruption check does. Asking is the etcd driver's (lib/etcd/hash-scan.ts),
// given here as a function; comparing is this file's, so the decision runs without etcd.
import type { HashAnswer, HashedMember, MemberHashes } from '../../lib/etcd/hash-scan.js';

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

/** Asks every member for its hash (lib/etcd/hash-scan.ts: `() => hashMembers(etcd)`). */
export type MemberHasher = () => Promise<MemberHashes>;

/** One scan: every member's hash at one revision, compared. */
export async function scanEtcdHashes(hashMembers: MemberHasher): Promise<HashScan> {
  const { revision, members, answers } = await hashMembers();
  return { revision, ...compare(members, answers) };
}

/**
 * Which members disagree: among the members at the most common compact revision, the hash most
 * of them hold is the cluster's; a member with another hash Disagrees. With no hash held by more
 * members than any other (two members, two hashes), every member of that group Disagrees: the
 * data differ and a scan cannot tell whose are right.
 */
export function compare(members: readonly HashedMember[], answers: readonly HashAnswer[]): Omit<HashScan, 'revision'> {
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
