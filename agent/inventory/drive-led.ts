// A drive's LED (issue 15 item 4): through the kernel's PCIe enclosure LEDs of the drive's PCI
// function or its slot's port when it has them (NPEM / _DSM, Linux 6.12+: enclosure-led.ts),
// else through the attention indicator of the PCIe hotplug slot it sits in (pci-slot-led.ts),
// else not at all: the command fails with the reason, and the drive's LED reads 'unknown'.
// Every set is read back from the kernel; what it reads is the result, never what was asked.
import type { LedState } from '../../lib/records.js';
import { StrataError } from '../../lib/errors.js';
import { EnclosureLedDriver } from './enclosure-led.js';
import { PciSlotLedDriver } from './pci-slot-led.js';

/** The LED state of a drive; 'unknown' when it has no indicator (or the kernel's value is unreadable). */
export type ObservedLedState = LedState | 'unknown';

export class DriveLedDriver {
  private readonly enclosure: EnclosureLedDriver;
  private readonly slot: PciSlotLedDriver;

  constructor(sysfsRoot: string) {
    this.enclosure = new EnclosureLedDriver(sysfsRoot);
    this.slot = new PciSlotLedDriver(sysfsRoot);
  }

  async read(pciAddress: string): Promise<ObservedLedState> {
    const leds = await this.enclosure.find(pciAddress);
    if (leds) return this.enclosure.read(leds);
    const attention = await this.slot.find(pciAddress);
    return attention ? this.slot.read(attention) : 'unknown';
  }

  /** Sets the LED and reads it back, or throws: a drive without an indicator cannot be shown, and we never pretend it was. */
  async set(pciAddress: string, state: LedState, deviceLabel = pciAddress): Promise<void> {
    let observed: ObservedLedState;
    let through: string;
    const leds = await this.enclosure.find(pciAddress);
    const attention = leds ? undefined : await this.slot.find(pciAddress);
    if (leds) {
      await this.enclosure.set(leds, state, deviceLabel);
      observed = await this.enclosure.read(leds);
      through = `the enclosure LEDs of PCI ${leds.owner}`;
    } else if (attention) {
      await this.slot.set(attention, state, deviceLabel);
      observed = await this.slot.read(attention);
      through = attention;
    } else {
      throw new StrataError(
        'UNIMPLEMENTED',
        `NVMe device ${deviceLabel} (PCI ${pciAddress || 'unknown'}) has no enclosure LEDs (NPEM / _DSM) and is in no PCIe hotplug slot with an attention indicator; its LED cannot be set`,
      );
    }
    if (observed !== state) {
      throw new StrataError('INTERNAL', `the LED of NVMe device ${deviceLabel} reads ${observed} after setting ${state} through ${through}`);
    }
  }
}
