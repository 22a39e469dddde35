// The inventory domain service: periodic snapshots of the server's NVMe devices and facts, a
// sequence number that grows whenever the content changes (the control plane acks it by
// sequence), and the LED command. Transport-agnostic: the control-plane session subscribes.
import type { Logger } from '../../lib/logger.js';
import { errors } from '../../lib/errors.js';
import type { LedState } from '../../lib/records.js';
import { DriveLedDriver, type ObservedLedState } from './drive-led.js';
import type { KernelCapabilities } from '../../lib/contract/kernel-capabilities.js';
import { collectServerFacts, hasTpm2, type ServerFacts } from './server-facts.js';
import { readNvmeControllers, type NvmeControllerFacts } from './sysfs-nvme.js';

export interface NvmeDeviceInventory extends NvmeControllerFacts {
  readonly led: ObservedLedState;
}

export interface InventorySnapshot {
  /** 1 for the first snapshot of this agent process; +1 for every changed snapshot. */
  readonly sequence: number;
  readonly facts: ServerFacts;
  /** Sorted by serial. */
  readonly devices: readonly NvmeDeviceInventory[];
  readonly journalDeviceSerial: string;
  readonly takenAt: string;
}

export interface InventorySource {
  current(): InventorySnapshot | undefined;
  /** Called with each new (changed) snapshot; returns an unsubscribe function. */
  onChange(listener: (snapshot: InventorySnapshot) => void): () => void;
}

export interface InventoryServiceOptions {
  readonly sysfsRoot: string;
  readonly mountsPath: string;
  readonly swapsPath?: string;
  readonly hostname: string;
  readonly journalDeviceSerial: string;
  readonly rescanIntervalMs: number;
  readonly logger: Logger;
  /** Injectable for tests; defaults to the enclosure LEDs or slot attention indicator under sysfsRoot. */
  readonly ledDriver?: DriveLedDriver;
  /** Injectable for tests; defaults to collectServerFacts. */
  readonly collectFacts?: () => Promise<ServerFacts>;
  /** Measures the kernel's capabilities (agent/inventory/kernel-capabilities.ts), at every scan; none when absent. */
  readonly kernelCapabilities?: () => Promise<KernelCapabilities>;
}

export class InventoryService implements InventorySource {
  private readonly led: DriveLedDriver;
  private readonly listeners = new Set<(snapshot: InventorySnapshot) => void>();
  private snapshot: InventorySnapshot | undefined;
  private contentKey = '';
  private facts: ServerFacts | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Scans run one at a time: a periodic scan and a command-triggered one must not interleave. */
  private queue: Promise<unknown> = Promise.resolve();
  private stopped = false;

  constructor(private readonly options: InventoryServiceOptions) {
    this.led = options.ledDriver ?? new DriveLedDriver(options.sysfsRoot);
  }

  /** Takes the first snapshot (throws if sysfs cannot be read) and starts the periodic rescan. */
  async start(): Promise<InventorySnapshot> {
    const first = await this.rescan({ throwOnError: true });
    if (!this.stopped) {
      this.timer = setInterval(() => void this.rescan(), this.options.rescanIntervalMs);
    }
    return first;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.listeners.clear();
  }

  current(): InventorySnapshot | undefined {
    return this.snapshot;
  }

  onChange(listener: (snapshot: InventorySnapshot) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Reads sysfs now; publishes a new snapshot (next sequence) only when something changed.
   * A failed periodic scan keeps the previous snapshot: a transient read error must not make
   * devices vanish from the cluster's view.
   */
  rescan(options: { throwOnError?: boolean } = {}): Promise<InventorySnapshot> {
    const run = this.queue.then(() => this.scanOnce());
    this.queue = run.catch(() => undefined);
    return run.catch((err: unknown) => {
      this.options.logger.warn({ err }, 'inventory scan failed; keeping the previous inventory');
      if (options.throwOnError || !this.snapshot) throw err;
      return this.snapshot;
    });
  }

  /** Sets a device's LED (by serial) and reports the new state in a fresh inventory. */
  async setLed(serial: string, state: LedState): Promise<void> {
    const snapshot = await this.rescan();
    const device = snapshot.devices.find((d) => d.serial === serial);
    if (!device) throw errors.notFound('NVMe device', serial);
    await this.led.set(device.pciAddress, state, serial);
    this.options.logger.info({ serial, pciAddress: device.pciAddress, led: state }, 'NVMe device LED set');
    await this.rescan();
  }

  private async scanOnce(): Promise<InventorySnapshot> {
    if (!this.facts) {
      this.facts = await (this.options.collectFacts ??
        (() => collectServerFacts({ hostname: this.options.hostname, sysfsRoot: this.options.sysfsRoot })))();
    } else {
      // The only fact that can change without a reboot (a TPM enabled in firmware comes with
      // one, but a module load does not): cheap to re-read.
      this.facts = { ...this.facts, tpm2Supported: await hasTpm2(this.options.sysfsRoot) };
    }
    // Capabilities change when modules load (ublk, dm-vdo): measured at every scan.
    if (this.options.kernelCapabilities) {
      try {
        this.facts = { ...this.facts, kernelCapabilities: await this.options.kernelCapabilities() };
      } catch (err) {
        this.options.logger.warn({ err }, 'measuring the kernel capabilities failed');
      }
    }
    const controllers = await readNvmeControllers({
      sysfsRoot: this.options.sysfsRoot,
      mountsPath: this.options.mountsPath,
      ...(this.options.swapsPath ? { swapsPath: this.options.swapsPath } : {}),
    });
    const devices: NvmeDeviceInventory[] = [];
    for (const controller of controllers) {
      devices.push({ ...controller, led: await this.led.read(controller.pciAddress) });
    }
    const content = { facts: this.facts, devices, journalDeviceSerial: this.options.journalDeviceSerial };
    const key = JSON.stringify(content);
    if (this.snapshot && key === this.contentKey) return this.snapshot;
    this.contentKey = key;
    this.snapshot = Object.freeze({
      sequence: (this.snapshot?.sequence ?? 0) + 1,
      ...content,
      takenAt: new Date().toISOString(),
    });
    this.options.logger.info(
      { sequence: this.snapshot.sequence, devices: devices.map((d) => d.serial) },
      'inventory changed',
    );
    for (const listener of this.listeners) {
      try {
        listener(this.snapshot);
      } catch (err) {
        this.options.logger.error({ err }, 'inventory listener failed');
      }
    }
    return this.snapshot;
  }
}
