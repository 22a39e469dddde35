// Drives a drive's locate LED through the attention indicator of the PCIe hotplug slot it sits
// in (pciehp / acpiphp: <sysfs>/bus/pci/slots/<slot>/{address,attention}). A slot's `address`
// is domain:bus:device without the function, e.g. 0000:01:00 for the drive at 0000:01:00.0.
// The attention values are the PCIe indicator states: 0 off, 1 on, 2 blink.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { LedState } from '../../lib/records.js';
import { StrataError } from '../../lib/errors.js';
import { listDir, readAttr } from './sysfs-nvme.js';

/** The LED state of a drive; 'unknown' when it sits in no slot with an attention indicator. */
export type ObservedLedState = LedState | 'unknown';

const attentionValue: Record<LedState, string> = { off: '0', locate: '1', rebuild: '2' };

export class PciSlotLedDriver {
  constructor(private readonly sysfsRoot: string) {}

  /** The attention file of the slot holding the PCI function, or undefined. */
  async findAttentionFile(pciAddress: string): Promise<string | undefined> {
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

  async read(pciAddress: string): Promise<ObservedLedState> {
    const file = await this.findAttentionFile(pciAddress);
    if (!file) return 'unknown';
    switch (await readAttr(file)) {
      case '0':
        return 'off';
      case '1':
        return 'locate';
      case '2':
        return 'rebuild';
      default:
        return 'unknown';
    }
  }

  /** Sets the LED or throws: a drive in no slot with an indicator cannot be shown, and we never pretend it was. */
  async set(pciAddress: string, state: LedState, deviceLabel = pciAddress): Promise<void> {
    const file = await this.findAttentionFile(pciAddress);
    if (!file) {
      throw new StrataError(
        'UNIMPLEMENTED',
        `NVMe device ${deviceLabel} (PCI ${pciAddress || 'unknown'}) is in no PCIe hotplug slot with an attention indicator; its LED cannot be set`,
      );
    }
    try {
      await fs.writeFile(file, attentionValue[state]);
    } catch (err) {
      throw new StrataError('INTERNAL', `setting the LED of NVMe device ${deviceLabel} through ${file} failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
}
