// The QoS stage in a volume's host path (docs/decisions.md, "Where the stage sits"), shared by
// the two shapes that end at a device-mapper device: a replicated volume's primary (the table
// onto its md array) and a single-copy volume (the table onto the loop device over its file).
// With limits, the table points at a strata-ublk server's device over that block device instead:
// the server is started first, then the table is reloaded onto its device (a flush suspend, the
// swap, a resume: hosts see a pause, no error). New limits only go to the running server; limits
// removed reload the table back first, then stop the server. Where the server cannot run (no
// ublk in the kernel), the volume is served without it and the report says why.
import { release as kernelRelease } from 'node:os';
import { isUnlimited, sameLimits, type QosLimits } from '../../../lib/contract/qos.js';
import { StrataError } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/logger.js';
import type { VolumeQosStatus } from '../../../lib/records.js';
import { sameTable, type BlockStack } from './block-stack.js';

/**
 * The QoS stage's servers as the block stacks use them: kernel/qos-stage.ts's QosStage,
 * composed in datapath.ts (this room does not import the kernel room).
 */
export interface QosServers {
  /** Serves the backing through a throttled ublk device (idempotent: a served volume only takes the limits). */
  start(volume: string, spec: { readonly backing: string; readonly limits: QosLimits }): Promise<{ readonly id: number; readonly device: string }>;
  /** Stops the volume's server, also one an earlier agent left; nothing when there is none. */
  stop(volume: string): Promise<void>;
  state(volume: string): { readonly device: { readonly device: string }; readonly limits: QosLimits; readonly running: boolean } | undefined;
}

/** What serving one volume's host path on this node takes (a single copy's; a replicated volume's adds its replica set). */
export interface HostPathInput {
  readonly volumeUUID: string;
  readonly nodeUUID: string;
  readonly sizeBytes: bigint;
  /** The local backing file and whether it needs buffered I/O (a compressed volume). */
  readonly backing: { readonly devicePath: string; readonly bufferedIo: boolean };
  /** The assignment's QoS limits (absent, null or all zero: none); only a primary enforces them. */
  readonly qos?: QosLimits | null;
  /**
   * Runs (synchronously) right before the host path's device is made larger than it is: the
   * reconciler writes ahead there that the host namespace must re-read its size, so hosts learn
   * a grown volume only once the device under the namespace has the size, and still do after a
   * crash right after the reload.
   */
  readonly beforeGrowing?: () => void;
}

/** What the host path of one volume is pointed at: its size is the size the host path shows. */
export type QosPathTarget = Pick<HostPathInput, 'volumeUUID' | 'nodeUUID' | 'sizeBytes' | 'qos' | 'beforeGrowing'>;

/** The limits that need the stage, undefined for none. */
export function limitsOf(limits: QosLimits | null | undefined): QosLimits | undefined {
  return limits && !isUnlimited(limits) ? limits : undefined;
}

/** /dev/ublkb3 → ublkb3 */
const deviceName = (path: string) => path.replace(/^.*\//, '');

export class QosPath {
  /** Why no QoS server can run on this kernel, once a server said so (exit 69): not tried again. */
  private ublkMissing: string | undefined;

  constructor(private readonly options: { readonly stack: BlockStack; readonly qos?: QosServers | undefined; readonly logger: Logger }) {}

  /**
   * Makes the volume's device-mapper device serve `below` (a block device name: the array, the
   * loop device), through the volume's QoS server when it has limits. Returns why its limits are
   * not enforced, undefined when they are (or there are none).
   */
  async point(target: QosPathTarget, below: string): Promise<string | undefined> {
    const { stack, qos, logger } = this.options;
    const { volumeUUID, nodeUUID, sizeBytes, beforeGrowing } = target;
    const limits = limitsOf(target.qos);
    let problem: string | undefined;
    if (limits) {
      if (!qos) problem = `node ${nodeUUID}: this agent runs without the QoS stage (strata-ublk)`;
      else if (this.ublkMissing) problem = this.ublkMissing;
      else {
        try {
          const spec = { backing: stack.blockPath(below), limits };
          let served = await qos.start(volumeUUID, spec);
          if ((await stack.blockBytes(deviceName(served.device))) < sizeBytes) {
            // A ublk device keeps the size it was made with: after a growth the table moves onto
            // the grown device below (served unthrottled for that moment), the old server stops,
            // and one of the new size starts; then the table moves onto it.
            await stack.ensureDm(volumeUUID, await stack.linearTable(sizeBytes, below), beforeGrowing);
            await qos.stop(volumeUUID);
            served = await qos.start(volumeUUID, spec);
          }
          await stack.ensureDm(volumeUUID, await stack.linearTable(sizeBytes, deviceName(served.device)), beforeGrowing);
          return undefined;
        } catch (err) {
          problem = this.failure(nodeUUID, err);
          logger.warn({ err, volumeUUID, reason: problem }, 'QoS not enforced: the volume is served without its limits');
        }
      }
    }
    await stack.ensureDm(volumeUUID, await stack.linearTable(sizeBytes, below), beforeGrowing);
    await qos?.stop(volumeUUID);
    return problem;
  }

  /** One sentence a user can act on, naming the node. */
  private failure(nodeUUID: string, err: unknown): string {
    if (err instanceof StrataError && err.code === 'KERNEL_CAPABILITY_MISSING') {
      this.ublkMissing = `node ${nodeUUID}: kernel ${kernelRelease()} has no ublk (Debian 13's 6.12 has it), so QoS limits cannot be enforced there`;
      return this.ublkMissing;
    }
    return `node ${nodeUUID}: the QoS server (strata-ublk) did not start: ${err instanceof Error ? err.message : String(err)}`;
  }

  /** The QoS stage serves a new device for the volume (the kernel had lost the old one): the table moves onto it. */
  async deviceReplaced(volumeUUID: string, sizeBytes: bigint): Promise<void> {
    const served = this.options.qos?.state(volumeUUID);
    if (!served) return;
    const { stack } = this.options;
    await stack.ensureDm(volumeUUID, await stack.linearTable(sizeBytes, deviceName(served.device.device)));
  }

  /**
   * The limits' enforcement, read back from the kernel now: Enforced only when the volume's
   * server runs with exactly these limits and its table points at the server's device.
   */
  async status(target: QosPathTarget, problem: string | undefined): Promise<VolumeQosStatus | undefined> {
    const limits = limitsOf(target.qos);
    if (!limits) return undefined;
    const { volumeUUID, nodeUUID: node } = target;
    const notEnforced = (reason: string): VolumeQosStatus => ({ state: 'NotEnforced', reason, limits: { ...limits } });
    if (problem) return notEnforced(problem);
    const served = this.options.qos?.state(volumeUUID);
    if (!served) return notEnforced(`node ${node}: no QoS server runs for the volume`);
    if (!served.running) return notEnforced(`node ${node}: the volume's QoS server is being restarted (its device holds the I/O meanwhile)`);
    if (!sameLimits(served.limits, limits)) return notEnforced(`node ${node}: the volume's QoS server has other limits than the assignment's`);
    const { stack } = this.options;
    const wanted = await stack.linearTable(target.sizeBytes, deviceName(served.device.device)).catch(() => undefined);
    if (!wanted || !sameTable(await stack.dmTable(volumeUUID), wanted)) return notEnforced(`node ${node}: the volume's device-mapper table does not point at its QoS server's device`);
    return { state: 'Enforced', reason: '', limits: { ...limits } };
  }
}
