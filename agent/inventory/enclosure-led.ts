// Drives a drive's LEDs through the kernel's PCIe enclosure LED interface (Linux 6.12+,
// drivers/pci/npem.c: Native PCIe Enclosure Management, or the PCI firmware's _DSM for PCIe SSD
// status LEDs where the platform has it). The kernel registers one LED class device per
// indication the hardware supports, named <PCI address>:enclosure:<indication>, e.g.
// <sysfs>/class/leds/0000:01:00.0:enclosure:locate; `brightness` is 0 or 1. The indications
// belong to the PCI device that has the NPEM capability or the _DSM: the drive's own function, or
// the downstream port of the slot the drive sits in (a port has one slot, so its indications are
// the drive's). Only `locate` and `rebuild` are touched; ok, fail, pfa, hotspare... are left alone.
import { promises as fs } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { LedState } from '../../lib/records.js';
import { StrataError } from '../../lib/errors.js';
import { readAttr } from './sysfs-nvme.js';
import type { ObservedLedState } from './drive-led.js';

const PCI_FUNCTION = /^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/;

/** The enclosure indications a drive's LED state uses. */
type Indication = 'locate' | 'rebuild';
const INDICATIONS: readonly Indication[] = ['locate', 'rebuild'];

/** The enclosure LEDs of one PCI device: the brightness file of each indication it has. */
export interface EnclosureLeds {
  /** The PCI device the LEDs belong to (the drive's function or its slot's port). */
  readonly owner: string;
  readonly brightness: Partial<Record<Indication, string>>;
}

export class EnclosureLedDriver {
  constructor(private readonly sysfsRoot: string) {}

  /**
   * The enclosure LEDs for the drive at this PCI function: its own when it has a locate or
   * rebuild indication, else those of the port above it; undefined when neither has one.
   */
  async find(pciAddress: string): Promise<EnclosureLeds | undefined> {
    const address = pciAddress.toLowerCase();
    if (!PCI_FUNCTION.test(address)) return undefined;
    for (const owner of [address, await this.upstreamPort(address)]) {
      if (!owner) continue;
      const brightness: Partial<Record<Indication, string>> = {};
      for (const indication of INDICATIONS) {
        const file = join(this.sysfsRoot, 'class', 'leds', `${owner}:enclosure:${indication}`, 'brightness');
        if ((await readAttr(file)) !== undefined) brightness[indication] = file;
      }
      if (Object.keys(brightness).length > 0) return { owner, brightness };
    }
    return undefined;
  }

  /** locate or rebuild when that indication is on (locate first), off when none is; unknown when unreadable. */
  async read(leds: EnclosureLeds): Promise<ObservedLedState> {
    for (const indication of INDICATIONS) {
      const file = leds.brightness[indication];
      if (!file) continue;
      const value = await readAttr(file);
      if (value === undefined || !/^\d+$/.test(value)) return 'unknown';
      if (value !== '0') return indication;
    }
    return 'off';
  }

  /**
   * Turns the state's indication on and the other one off (off: both off). A state whose
   * indication the enclosure lacks is refused, never approximated.
   */
  async set(leds: EnclosureLeds, state: LedState, deviceLabel: string): Promise<void> {
    if (state !== 'off' && !leds.brightness[state]) {
      throw new StrataError(
        'UNIMPLEMENTED',
        `NVMe device ${deviceLabel}: the enclosure LEDs of PCI ${leds.owner} have no ${state} indication (only ${Object.keys(leds.brightness).join(', ')}); its LED cannot show ${state}`,
      );
    }
    // The other indication off first, so the drive never shows both.
    const order = INDICATIONS.filter((i) => i !== state).concat(state === 'off' ? [] : [state]);
    for (const indication of order) {
      const file = leds.brightness[indication];
      if (!file) continue;
      try {
        await fs.writeFile(file, indication === state ? '1' : '0');
      } catch (err) {
        throw new StrataError('INTERNAL', `setting the LED of NVMe device ${deviceLabel} through ${file} failed: ${(err as Error).message}`, { cause: err });
      }
    }
  }

  /** The PCI device directly above the function (its slot's downstream port), if it is one. */
  private async upstreamPort(address: string): Promise<string | undefined> {
    try {
      const parent = basename(dirname(await fs.realpath(join(this.sysfsRoot, 'bus', 'pci', 'devices', address))));
      return PCI_FUNCTION.test(parent) ? parent : undefined;
    } catch {
      return undefined;
    }
  }
}
