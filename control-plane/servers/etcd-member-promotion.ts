// The active cluster manager's half of adding servers (server-add.ts): for every server record
// an add wrote, make etcd's membership match it. A record without a member ID gets its member
// (found by peer URL, or added when a control plane died between the record and the member
// add); a learner is promoted once etcd says it caught up with the leader (etcd refuses before),
// and the record then carries promotedAt, which makes the server Enabled once its agent joined.
import type { EtcdMembership } from '../../lib/etcd/membership.js';
import type { Logger } from '../../lib/logger.js';
import type { ServersStore } from './servers-store.js';

export interface MemberPromotionDeps {
  /** Its writes fenced by the leader's term (the composition root gives it the fenced commit). */
  readonly store: ServersStore;
  readonly membership: EtcdMembership;
  readonly logger: Logger;
  /** How often the records are compared with etcd's members (default 1 s). */
  readonly intervalMs?: number;
  /**
   * How old a record without its member must be before the member is added here (default 30 s):
   * younger, the add that wrote it may still be running (its etcd calls time out in 5 s), and
   * it removes the record again when etcd refuses.
   */
  readonly orphanAfterMs?: number;
}

export async function startEtcdMemberPromotion(deps: MemberPromotionDeps): Promise<{ stop(): Promise<void> }> {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let pass: Promise<void> = Promise.resolve();
  const tick = () => {
    pass = reconcile(deps)
      .catch((err: Error) => deps.logger.warn({ err: err.message }, 'etcd member reconciliation failed; will retry'))
      .finally(() => {
        if (!stopped) timer = setTimeout(tick, deps.intervalMs ?? 1000);
      });
  };
  tick();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await pass;
    },
  };
}

async function reconcile(deps: MemberPromotionDeps): Promise<void> {
  const { membership } = deps;
  const pending = await deps.store.pendingAdds();
  if (pending.length === 0) return;
  const members = await membership.list();
  for (const current of pending) {
    const { record } = current;
    const added = record.added;
    let member = added.etcdMemberID ? members.find((m) => m.ID === added.etcdMemberID) : members.find((m) => m.peerURLs.includes(added.etcdPeerURL));
    let next = { ...added };
    if (!member && !added.etcdMemberID) {
      if (Date.now() - Date.parse(record.createdAt) < (deps.orphanAfterMs ?? 30_000)) continue;
      // The add was recorded but its member never made it (a control plane died in between).
      const ID = await membership.add(added.etcdPeerURL, await membership.supportsLearners());
      deps.logger.info({ serverUUID: record.UUID, memberID: ID, peerURL: added.etcdPeerURL }, 'etcd member of an added server added');
      next = { ...next, etcdMemberID: ID };
    } else if (member) {
      next = { ...next, etcdMemberID: member.ID };
      if (member.isLearner && (await membership.promote(member.ID))) {
        deps.logger.info({ serverUUID: record.UUID, memberID: member.ID }, 'etcd learner promoted to voting member');
        member = { ...member, isLearner: false };
      }
      if (!member.isLearner) next = { ...next, promotedAt: new Date().toISOString() };
    } else {
      // The recorded member is gone (removed by an operator): nothing to promote.
      continue;
    }
    if (JSON.stringify(next) === JSON.stringify(added)) continue;
    await deps.store.completeAdd(current, next);
  }
}
