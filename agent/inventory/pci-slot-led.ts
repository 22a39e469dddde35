// Drives a drive's LED through the attention indicator of the PCIe hotplug slot it sits in
// (pciehp / acpiphp: <sysfs>/bus/pci/slots/<slot>/{address,attention}). A slot's `address`
// is domain:bus:device without the function, e.g. 0000:01:00 for the drive at 0000:01:00.0.
// The attention values are the PCIe indicator states: 0 off, 1 on, 2 blink; a read comes from
// the slot control register (pciehp), so it is what the hardware holds.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { LedState } from '../../lib/records.js';
import { StrataError } from '../../lib/errors.js';
import { listDir, readAttr } from './sysfs-nvme.js';
import type { ObservedLedState } from './drive-led.js';

const attentionValue: Record<LedState, string> = { off: '0', locate: '1', rebuild: '2' };
const stateOfAttention: Record<string, LedState> = { '0': 'off', '1': 'locate', '2': 'rebuild' };

export class PciSlotLedDriver {
  constructor(private readonly sysfsRoot: string) {}

  /** The readable attention file of the slot holding the PCI function, or undefined. */
  async find(pciAddress: string): Promise<string | undefined> {
    const slotAddress = pciAddress.toLowerCase().replace(/\.[0-7]$/, '');
    if (!/^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}$/.test(slotAddress)) return undefined;
    const slotsDir = join(this.sysfsRoot, 'bus', 'pci', 'slots');
    for (const slot of await listDir(slotsDir)) {
      const address = (await readAttr(join(slotsDir, slot, 'address')))?.toLowerCase();
      if (address !== slotAddress) continue;
      const attention = join(slotsDir, slot, 'attention');
      if ((await readAttr(attention)) !== undefined) return attention;
    }
    return undefined;
  }

  async read(attention: string): Promise<ObservedLedState> {
    return stateOfAttention[(await readAttr(attention)) ?? ''] ?? 'unknown';
  }

  async set(attention: string, state: LedState, deviceLabel: string): Promise<void> {
    try {
      await fs.writeFile(attention, attentionValue[state]);
    } catch (err) {
      throw new StrataError('INTERNAL', `setting the LED of NVMe device ${deviceLabel} through ${attention} failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
}
