// Pass, phase 3: verify (pass.ts): what is still not as desired after applying. A volume that did
// not converge is prepared and read back again by the next pass.
import { describeOp } from '../kernel/nvmet-model.js';
import { planNvmet, volumeOfNqn } from '../kernel/nvmet-plan.js';
import type { Exports, KernelTarget } from './pass-kernel.js';
import { releaseDevices, type PassContext, type PassScope } from './pass.js';

/** What phase 3 hands on. */
export interface Verified {
  /** volume → the first operation the kernel target still needs. */
  readonly notConverged: ReadonlyMap<string, string>;
}

/** Phase 3; then the volumes of stopped nodes whose exports are gone lose their device-mapper device and mirror. */
export async function verify(ctx: PassContext, pass: PassScope, exports: Exports, target: KernelTarget): Promise<Verified> {
  const { memory } = ctx;
  const { logger: log } = ctx.options;
  const { desired } = exports;
  const { after, owned, keep, opFailures } = target;
  const remaining = planNvmet({ desired, observed: after, owned, keep }).ops;
  const notConverged = new Map<string, string>();
  for (const op of remaining) if (op.volume && !notConverged.has(op.volume)) notConverged.set(op.volume, describeOp(op));
  for (const volumeUUID of [...notConverged.keys(), ...opFailures.keys()]) {
    const e = pass.entries.find((x) => x.volumeUUID === volumeUUID);
    if (e) memory.prepared.delete(`${e.volumeUUID}/${e.nodeUUID}`);
  }

  for (const e of pass.entries) {
    if (!memory.heldNodes.has(e.nodeUUID) || memory.releasedHeld.has(e.volumeUUID)) continue;
    if ([...after.subsystems.keys()].some((nqn) => volumeOfNqn(nqn, pass.prefix) === e.volumeUUID)) continue;
    try {
      await releaseDevices(ctx, e.volumeUUID);
      memory.releasedHeld.add(e.volumeUUID);
    } catch (err) {
      log.warn({ err, volumeUUID: e.volumeUUID, nodeUUID: e.nodeUUID }, 'taking down the stopped node\'s volume failed; retrying at the next pass');
    }
  }
  return { notConverged };
}
