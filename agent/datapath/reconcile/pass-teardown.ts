// Pass, phase 4: teardown (pass.ts). Backings of volumes no longer assigned go, only once their
// export is gone. Every node's pool is looked at, also of nodes that have no assignment left.
import { volumeOfNqn } from '../kernel/nvmet-plan.js';
import type { KernelTarget } from './pass-kernel.js';
import { releaseDevices, type PassContext, type PassMemory, type PassScope } from './pass.js';

/** What phase 4 hands on. */
export interface Teardown {
  /** Backings removed. */
  readonly removed: number;
  /** volume → its node and why its teardown is not complete (reported Failed). */
  readonly incomplete: ReadonlyMap<string, { readonly nodeUUID: string; readonly error: string }>;
}

/** Phase 4. A volume whose backing and export are gone is reported Absent until acknowledged. */
export async function tearDown(ctx: PassContext, pass: PassScope, target: KernelTarget): Promise<Teardown> {
  const { memory } = ctx;
  const { nodeUUIDs, logger: log } = ctx.options;
  const { prefix, entries } = pass;
  const { tree, after, opFailures } = target;
  for (const nodeUUID of nodeUUIDs) await ctx.poolOf(nodeUUID, pass.cluster).catch(() => undefined);
  const assigned = new Set(entries.map((e) => e.volumeUUID));
  let removed = 0;
  const teardown = new Map<string, { nodeUUID: string; error: string }>();
  for (const [nodeUUID, pool] of memory.pools) {
    let volumes: string[];
    try {
      volumes = await pool.listVolumes();
    } catch (err) {
      log.warn({ err, nodeUUID }, 'listing the pool failed');
      continue;
    }
    for (const volumeUUID of volumes) {
      if (assigned.has(volumeUUID)) continue;
      if (after.subsystems.has(`${prefix}${volumeUUID}`)) {
        teardown.set(volumeUUID, { nodeUUID, error: opFailures.get(volumeUUID) ?? 'its export could not be removed yet' });
        continue;
      }
      try {
        await releaseDevices(ctx, volumeUUID);
        await pool.removeVolume(volumeUUID);
        removed += 1;
        log.info({ volumeUUID, nodeUUID }, 'volume backing removed');
        markAbsent(memory, volumeUUID, nodeUUID);
      } catch (err) {
        teardown.set(volumeUUID, { nodeUUID, error: `removing the backing failed: ${(err as Error).message}` });
      }
    }
  }
  for (const nqn of tree.subsystems.keys()) {
    const volumeUUID = volumeOfNqn(nqn, prefix);
    if (!volumeUUID || assigned.has(volumeUUID) || teardown.has(volumeUUID)) continue;
    if (after.subsystems.has(nqn)) {
      const nodeUUID = memory.lastNodeOf.get(volumeUUID)?.nodeUUID ?? (nodeUUIDs[0] as string);
      teardown.set(volumeUUID, { nodeUUID, error: opFailures.get(volumeUUID) ?? 'its export could not be removed yet' });
    } else if (!memory.absent.has(volumeUUID)) {
      markAbsent(memory, volumeUUID, memory.lastNodeOf.get(volumeUUID)?.nodeUUID ?? (nodeUUIDs[0] as string));
    }
  }
  return { removed, incomplete: teardown };
}

function markAbsent(memory: PassMemory, volumeUUID: string, nodeUUID: string): void {
  // The sequence of the report that first lists it is filled in by the reconciler's publish().
  memory.absent.set(volumeUUID, { nodeUUID, generation: memory.lastNodeOf.get(volumeUUID)?.generation ?? 0, sequence: Number.MAX_SAFE_INTEGER });
}
