// The host path of a volume of one copy (docs/datapath.md, "Single-copy volumes"; the design in
// docs/decisions.md, "Where the stage sits"): namespace → /dev/mapper/strata-V → linear onto a
// loop device over the volume's file (4 KiB sectors; direct I/O, or buffered for a compressed
// volume as nvmet's buffered_io was), or, with QoS limits, onto the strata-ublk server's device
// over that loop device. An enabled namespace cannot change its device, so the device-mapper
// device is what lets a policy be attached, changed or removed under connected hosts.
//
// A namespace made before this shape (pointing straight at the file, enabled) keeps its file:
// moving it would make connected hosts see the namespace vanish. It is reported as such, and
// takes the shape when its namespace is next made (the node's restart).
import { KeyedSerializer } from '../../../lib/concurrency.js';
import type { Logger } from '../../../lib/logger.js';
import type { VolumeQosStatus } from '../../../lib/records.js';
import type { BlockStack, WrittenCount } from './block-stack.js';
import { limitsOf, QosPath, type HostPathInput, type QosServers } from './qos-path.js';

export type SingleCopyInput = HostPathInput;

interface ServedVolume {
  readonly input: SingleCopyInput;
  /** Served through the device-mapper device (false: a namespace still on its file). */
  readonly staged: boolean;
  /** Why the limits are not enforced, undefined when they are (or there are none). */
  readonly qosProblem: string | undefined;
}

export class SingleCopyPaths {
  private readonly served = new Map<string, ServedVolume>();
  private readonly locks = new KeyedSerializer();
  private readonly qosPath: QosPath;

  constructor(private readonly options: { readonly stack: BlockStack; readonly qos?: QosServers | undefined; readonly logger: Logger }) {
    this.qosPath = new QosPath(options);
  }

  /**
   * Builds (or finds again, after an agent restart) the volume's loop and device-mapper devices,
   * grows them to a grown file, and points the table through the QoS server when the volume has
   * limits. Returns what the namespace points at.
   */
  serve(input: SingleCopyInput): Promise<{ readonly hostDevicePath: string }> {
    return this.locks.run(input.volumeUUID, async () => {
      const { stack } = this.options;
      const { volumeUUID, nodeUUID, sizeBytes, beforeGrowing } = input;
      const loop = await stack.ensureLoop(input.backing.devicePath, input.backing.bufferedIo);
      // A loop device keeps the size it was attached with; the volume's growth grew the file.
      let loopBytes = await stack.blockBytes(loop);
      if (loopBytes < sizeBytes) {
        await stack.growLoop(loop);
        loopBytes = await stack.blockBytes(loop);
      }
      if (loopBytes < sizeBytes) throw new Error(`the loop device ${loop} over the volume's file shows ${loopBytes} of ${sizeBytes} bytes`);
      const qosProblem = await this.qosPath.point({ volumeUUID, nodeUUID, sizeBytes, qos: input.qos ?? null, ...(beforeGrowing ? { beforeGrowing } : {}) }, loop);
      this.served.set(volumeUUID, { input, staged: true, qosProblem });
      return { hostDevicePath: stack.hostDevicePath(volumeUUID) };
    });
  }

  /**
   * Takes the volume's devices down (after its namespace is gone, before its file is): the
   * device-mapper device, the QoS server over the loop device, the loop device.
   */
  release(volumeUUID: string): Promise<void> {
    return this.locks.run(volumeUUID, async () => {
      const { stack, qos, logger } = this.options;
      this.served.delete(volumeUUID);
      await stack.removeDm(volumeUUID);
      await qos?.stop(volumeUUID);
      const loops = await stack.loopsOfVolume(volumeUUID);
      for (const loop of loops) await stack.detachLoop(loop);
      if (loops.length > 0) logger.info({ volumeUUID }, 'single-copy volume\'s devices removed');
    });
  }

  /**
   * The volume's namespace was made before this shape and stays on its file while enabled (see
   * the top of this file): nothing is built, and limits are reported not enforced, saying why.
   */
  servedFromFile(input: SingleCopyInput): Promise<void> {
    return this.locks.run(input.volumeUUID, async () => {
      const reason = `node ${input.nodeUUID}: the volume's namespace points straight at its file (made before single-copy volumes had the device-mapper stage, and an enabled namespace cannot change its device under connected hosts); it takes the stage, and its policy, when the namespace is next made (the node's restart)`;
      this.served.set(input.volumeUUID, { input, staged: false, qosProblem: reason });
    });
  }

  /** The QoS stage serves a new device for the volume (the kernel had lost the old one): the table moves onto it. */
  qosDeviceReplaced(volumeUUID: string): Promise<void> {
    return this.locks.run(volumeUUID, async () => {
      const served = this.served.get(volumeUUID);
      if (served) await this.qosPath.deviceReplaced(volumeUUID, served.input.sizeBytes);
    });
  }

  /** The limits' enforcement on this node, read back from the kernel now (undefined without limits or when not served here). */
  async qosStatus(volumeUUID: string): Promise<VolumeQosStatus | undefined> {
    const served = this.served.get(volumeUUID);
    if (!served || !limitsOf(served.input.qos)) return undefined;
    const { nodeUUID, sizeBytes, qos } = served.input;
    return this.qosPath.status({ volumeUUID, nodeUUID, sizeBytes, qos: qos ?? null }, served.qosProblem);
  }

  /** Whether the volume is served here through its device-mapper device (which counts what hosts write). */
  servesThroughStage(volumeUUID: string): boolean {
    return this.served.get(volumeUUID)?.staged === true;
  }

  /** What hosts wrote through the volume's device-mapper device (VolumeStatus.userWrittenBytes); undefined when it has none here. */
  async writtenBytes(volumeUUID: string): Promise<WrittenCount | undefined> {
    return this.servesThroughStage(volumeUUID) ? this.options.stack.writtenBytes(volumeUUID) : undefined;
  }
}
