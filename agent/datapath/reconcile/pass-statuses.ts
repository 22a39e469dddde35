// Pass, phase 5: statuses (pass.ts). Usage is measured again for volumes prepared now, in full
// passes and in the interval's refresh (the pool keeps a measurement for a while); otherwise a
// volume reports its last one. Connected hosts are listed in every pass.
import { mapLimit } from '../../../lib/concurrency.js';
import type { ReplicaLegStatus } from '../replication/replica-manager.js';
import type { WrittenCount } from '../replication/block-stack.js';
import { resolveHostNqn, type ConnectionsByPort } from './connected-hosts.js';
import type { Backings } from './pass-backings.js';
import type { Exports, KernelTarget } from './pass-kernel.js';
import type { Teardown } from './pass-teardown.js';
import type { Verified } from './pass-verify.js';
import { BACKINGS_PREPARED_AT_ONCE, failedStatus, type PassContext, type PassScope, type PreparedVolume } from './pass.js';
import { isUnlimited } from '../../../lib/contract/qos.js';
import type { VolumeQosStatus } from '../../../lib/records.js';
import type { VolumeStatusEntry } from './volume-report.js';

/** What the earlier phases found, as phase 5 reports it. */
export interface PassFindings {
  readonly backings: Backings;
  readonly exports: Exports;
  readonly target: KernelTarget;
  readonly verified: Verified;
  readonly teardown: Teardown;
}

/**
 * Phase 5: every assigned volume's status (in assignment order), then the volumes whose teardown
 * is incomplete. `refresh`: the interval's refresh of usage is due.
 */
export async function statusesOf(ctx: PassContext, pass: PassScope, refresh: boolean, found: PassFindings): Promise<VolumeStatusEntry[]> {
  const { memory } = ctx;
  const { connectedHosts, presentedHosts, replicas, singles, logger: log } = ctx.options;
  const { results, touchedVolumes, preparedNow } = found.backings;
  const { desired, ipAclPass } = found.exports;
  const { opFailures } = found.target;
  const { notConverged } = found.verified;
  let connections: ConnectionsByPort = new Map();
  if (connectedHosts && desired.length > 0) {
    try {
      connections = await connectedHosts.connectionsByPort();
    } catch (err) {
      log.debug({ err }, 'listing connected hosts failed');
    }
  }
  const desiredByVolume = new Map(desired.map((d) => [d.volumeUUID, d]));
  await mapLimit(preparedNow, BACKINGS_PREPARED_AT_ONCE, async (p) => {
    const again = pass.full || refresh || touchedVolumes.has(p.desired.volumeUUID);
    // Bytes written, on the same rhythm as usage (a new count is a new report): read while this
    // node is the primary (a map lookup otherwise), dropped the moment it no longer is; a single
    // copy's while its device-mapper device serves it (not one still on its file).
    const volumeUUID = p.desired.volumeUUID;
    const counter = replicas?.legStatus(volumeUUID) ? replicas : p.entry.assignment?.replication ? undefined : singles?.servesThroughStage(volumeUUID) ? singles : undefined;
    if (!counter) p.written = undefined;
    else if (again || !p.written) {
      try {
        p.written = await counter.writtenBytes(volumeUUID);
      } catch (err) {
        log.debug({ err, volumeUUID: p.desired.volumeUUID }, 'reading bytes written failed');
      }
    }
    p.qos = await qosStatusOf(ctx, p);
    if (!again && p.usage) return;
    try {
      p.usage = await p.pool.usage(p.desired.volumeUUID);
    } catch (err) {
      log.debug({ err, volumeUUID: p.desired.volumeUUID }, 'reading usage failed');
    }
  });
  for (const p of preparedNow) {
    const e = p.entry;
    const d = desiredByVolume.get(e.volumeUUID);
    const error = ipAclPass.failed.get(e.volumeUUID) ?? opFailures.get(e.volumeUUID) ?? (notConverged.has(e.volumeUUID) ? `the kernel target does not match after applying: ${notConverged.get(e.volumeUUID)}` : undefined);
    results.set(`${e.volumeUUID}/${e.nodeUUID}`, {
      volumeUUID: e.volumeUUID,
      nodeUUID: e.nodeUUID,
      generation: p.generation,
      state: error ? 'Failed' : 'Served',
      error: error ?? p.warning ?? '',
      snapshots: p.snapshots,
      connectedHosts: error || !d ? [] : (connections.get(d.port.id) ?? []).map((address) => resolveHostNqn(address, d, presentedHosts)),
      logicalUsedBytes: String(p.usage?.logicalUsed ?? 0n),
      physicalUsedBytes: String(p.usage?.physicalUsed ?? 0n),
      ...replicaLegsOf(replicas?.legStatus(e.volumeUUID)),
      ...userWrittenOf(p.written),
      ...(p.qos ? { qos: p.qos } : {}),
    });
  }
  const statuses: VolumeStatusEntry[] = [];
  for (const e of pass.entries) {
    const s = results.get(`${e.volumeUUID}/${e.nodeUUID}`);
    if (s) statuses.push(s);
  }
  for (const [volumeUUID, t] of found.teardown.incomplete) {
    statuses.push({
      ...failedStatus({ volumeUUID, nodeUUID: t.nodeUUID, assignment: undefined }, `teardown incomplete: ${t.error}`),
      generation: memory.lastNodeOf.get(volumeUUID)?.generation ?? 0,
    });
  }
  return statuses;
}

/**
 * The primary's word on the volume's QoS limits (absent on a replica, and without limits), read
 * back from the device-mapper stage: a replicated volume's (replica-manager.ts) or a single
 * copy's (single-copy.ts). Without a stage (a target the caller brings) nothing enforces them.
 */
async function qosStatusOf(ctx: PassContext, p: PreparedVolume): Promise<VolumeQosStatus | undefined> {
  const a = p.entry.assignment;
  if (!a?.qos || isUnlimited(a.qos) || a.role !== 'primary') return undefined;
  const stage = a.replication ? ctx.options.replicas : ctx.options.singles;
  if (!stage) return { state: 'NotEnforced', reason: `node ${p.entry.nodeUUID}: this agent serves volumes without the device-mapper stage QoS needs`, limits: { ...a.qos } };
  try {
    return await stage.qosStatus(a.volumeUUID);
  } catch (err) {
    return { state: 'NotEnforced', reason: `node ${p.entry.nodeUUID}: checking the QoS stage failed: ${(err as Error).message}`, limits: { ...a.qos } };
  }
}

function replicaLegsOf(legs: readonly ReplicaLegStatus[] | undefined): Pick<VolumeStatusEntry, 'replicaLegs'> {
  return legs ? { replicaLegs: legs.map((l) => ({ ...l })) } : {};
}

function userWrittenOf(written: WrittenCount | undefined): Pick<VolumeStatusEntry, 'userWrittenBytes' | 'userWrittenDevice'> {
  return written ? { userWrittenBytes: String(written.bytes), userWrittenDevice: written.device } : {};
}
