// etcd membership changes for adding servers (spec 4.12 POST /servers): list, add (as a learner
// where the etcd version has learners, 3.4 and later), promote. An etcd driver: the servers
// resource (control-plane/servers/server-add.ts, etcd-member-promotion.ts) decides when. Errors
// keep etcd's message; the refusals that mean a conflict or an unready cluster get their code here,
// where etcd's wording is known.
import type { Etcd3 } from 'etcd3';
import { StrataError, toStrataError } from '../errors.js';

export interface MembershipMember {
  readonly ID: string;
  readonly name: string;
  readonly peerURLs: readonly string[];
  readonly clientURLs: readonly string[];
  readonly isLearner: boolean;
}

export class EtcdMembership {
  constructor(private readonly etcd: Etcd3) {}

  async list(): Promise<MembershipMember[]> {
    const { members } = await this.etcd.cluster.memberList({});
    return members.map((m) => ({ ID: String(m.ID), name: m.name ?? '', peerURLs: m.peerURLs ?? [], clientURLs: m.clientURLs ?? [], isLearner: m.isLearner === true }));
  }

  /** Learners exist from etcd 3.4 on: the version of the member that answers. */
  async supportsLearners(): Promise<boolean> {
    const { version } = await this.etcd.maintenance.status({});
    const [major, minor] = version.split('.').map(Number);
    return (major ?? 0) > 3 || ((major ?? 0) === 3 && (minor ?? 0) >= 4);
  }

  /** MemberAdd; the new member's ID. A refusal that means a conflict is 409, an unready cluster 503. */
  async add(peerURL: string, learner: boolean): Promise<string> {
    try {
      const answer = await this.etcd.cluster.memberAdd({ peerURLs: [peerURL], isLearner: learner });
      return String(answer.member.ID);
    } catch (err) {
      throw membershipError(err, `adding etcd member ${peerURL}`);
    }
  }

  /** MemberPromote; etcd refuses while the learner has not caught up with the leader (false). */
  async promote(ID: string): Promise<boolean> {
    try {
      await this.etcd.cluster.memberPromote({ ID });
      return true;
    } catch (err) {
      if (/not in sync|can only promote a learner member which is in sync/i.test((err as Error).message)) return false;
      throw membershipError(err, `promoting etcd member ${ID}`);
    }
  }
}

function membershipError(err: unknown, doing: string): StrataError {
  const message = (err as Error)?.message ?? String(err);
  if (/Peer URLs already exists|member ID already exist/i.test(message)) return new StrataError('ALREADY_EXISTS', `${doing}: etcd refused: ${message}`);
  if (/too many learner members/i.test(message)) return new StrataError('OPERATION_IN_PROGRESS', `${doing}: etcd refused: ${message} (another added server has not caught up yet; retry)`);
  if (/unhealthy cluster|re-configuration failed|not enough started members/i.test(message)) return new StrataError('UNAVAILABLE', `${doing}: etcd refused: ${message}; retry`);
  const mapped = toStrataError(err);
  return mapped.code === 'INTERNAL' ? new StrataError('INTERNAL', `${doing} failed: ${message}`, { cause: err }) : mapped;
}
