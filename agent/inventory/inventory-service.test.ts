import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { createFakeSysfs, type FakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { InventoryService, type InventorySnapshot } from './inventory-service.js';
import { PciSlotLedDriver } from './pci-slot-led.js';
import type { ServerFacts } from './server-facts.js';

const facts: ServerFacts = {
  hostname: 'node-a',
  productVersion: '0.1.0',
  tpm2Supported: false,
  cpuCores: 4,
  memoryBytes: '1024',
  os: 'Debian GNU/Linux 12',
  kernel: '6.1.0',
};

function twoDrives(): FakeSysfs {
  const sysfs = createFakeSysfs();
  sysfs.addController({ name: 'nvme0', serial: 'DRIVE-B', pciAddress: '0000:02:00.0', namespaces: [{ name: 'nvme0n1', sectors: 100 }] });
  sysfs.addController({ name: 'nvme1', serial: 'DRIVE-A', pciAddress: '0000:01:00.0', namespaces: [{ name: 'nvme1n1', sectors: 200 }] });
  return sysfs;
}

function service(sysfs: FakeSysfs, rescanIntervalMs = 60_000): InventoryService {
  return new InventoryService({
    sysfsRoot: sysfs.root,
    mountsPath: sysfs.mountsPath,
    swapsPath: sysfs.swapsPath,
    hostname: 'node-a',
    journalDeviceSerial: 'DRIVE-B',
    rescanIntervalMs,
    logger: silentLogger(),
    collectFacts: async () => facts,
  });
}

describe('PciSlotLedDriver', () => {
  it('writes the attention indicator of the slot whose address matches the device (without function)', async (t) => {
    const sysfs = twoDrives();
    t.after(() => sysfs.cleanup());
    sysfs.addSlot('7', '0000:02:00', 0);
    const attention = sysfs.addSlot('3', '0000:01:00', 0);
    const led = new PciSlotLedDriver(sysfs.root);
    await led.set('0000:01:00.0', 'locate');
    assert.equal(readFileSync(attention, 'utf8'), '1');
    assert.equal(await led.read('0000:01:00.0'), 'locate');
    await led.set('0000:01:00.0', 'rebuild');
    assert.equal(readFileSync(attention, 'utf8'), '2');
    await led.set('0000:01:00.0', 'off');
    assert.equal(readFileSync(attention, 'utf8'), '0');
    assert.equal(await led.read('0000:01:00.0'), 'off');
  });

  it('fails clearly when the device is in no slot, and reads its LED as unknown', async (t) => {
    const sysfs = twoDrives();
    t.after(() => sysfs.cleanup());
    sysfs.addSlot('7', '0000:09:00', 0);
    const led = new PciSlotLedDriver(sysfs.root);
    await assert.rejects(led.set('0000:01:00.0', 'locate', 'DRIVE-A'), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'UNIMPLEMENTED');
      assert.match(err.message, /DRIVE-A .* no PCIe hotplug slot/);
      return true;
    });
    assert.equal(await led.read('0000:01:00.0'), 'unknown');
    assert.equal(readFileSync(`${sysfs.root}/bus/pci/slots/7/attention`, 'utf8'), '0\n', 'other slot untouched');
  });
});

describe('InventoryService', () => {
  it('publishes a first snapshot, then a new sequence only when something changed', async (t) => {
    const sysfs = twoDrives();
    const inventory = service(sysfs);
    t.after(() => {
      inventory.stop();
      sysfs.cleanup();
    });
    const seen: InventorySnapshot[] = [];
    inventory.onChange((s) => seen.push(s));
    const first = await inventory.start();
    assert.equal(first.sequence, 1);
    assert.deepEqual(first.devices.map((d) => d.serial), ['DRIVE-A', 'DRIVE-B']);
    assert.equal(first.journalDeviceSerial, 'DRIVE-B');
    assert.deepEqual(first.facts, facts);
    assert.equal(first.devices[0]?.led, 'unknown');

    assert.equal((await inventory.rescan()).sequence, 1, 'unchanged: same sequence');
    sysfs.addController({ name: 'nvme7', serial: 'DRIVE-C', pciAddress: '0000:07:00.0', namespaces: [{ name: 'nvme7n1', sectors: 1 }] });
    const second = await inventory.rescan();
    assert.equal(second.sequence, 2);
    assert.deepEqual(second.devices.map((d) => d.serial), ['DRIVE-A', 'DRIVE-B', 'DRIVE-C']);
    sysfs.removeController('nvme0');
    assert.deepEqual((await inventory.rescan()).devices.map((d) => d.serial), ['DRIVE-A', 'DRIVE-C']);
    assert.deepEqual(seen.map((s) => s.sequence), [1, 2, 3]);
  });

  it('rescans periodically', async (t) => {
    const sysfs = twoDrives();
    const inventory = service(sysfs, 50);
    t.after(() => {
      inventory.stop();
      sysfs.cleanup();
    });
    await inventory.start();
    const changed = new Promise<InventorySnapshot>((resolve) => inventory.onChange(resolve));
    sysfs.removeController('nvme1');
    const snapshot = await changed;
    assert.deepEqual(snapshot.devices.map((d) => d.serial), ['DRIVE-B']);
  });

  it('sets an LED by serial and reports the new LED state in a new inventory', async (t) => {
    const sysfs = twoDrives();
    const attention = sysfs.addSlot('slot1', '0000:01:00', 0);
    const inventory = service(sysfs);
    t.after(() => {
      inventory.stop();
      sysfs.cleanup();
    });
    const first = await inventory.start();
    assert.equal(first.devices.find((d) => d.serial === 'DRIVE-A')?.led, 'off');
    await inventory.setLed('DRIVE-A', 'locate');
    assert.equal(readFileSync(attention, 'utf8'), '1');
    const after = inventory.current();
    assert.equal(after?.sequence, 2);
    assert.equal(after?.devices.find((d) => d.serial === 'DRIVE-A')?.led, 'locate');

    await assert.rejects(inventory.setLed('NO-SUCH-SERIAL', 'locate'), /NVMe device NO-SUCH-SERIAL not found/);
    await assert.rejects(inventory.setLed('DRIVE-B', 'locate'), /no PCIe hotplug slot/);
  });

  it('keeps the previous snapshot when a periodic scan fails', async (t) => {
    const sysfs = twoDrives();
    const inventory = service(sysfs);
    t.after(() => {
      inventory.stop();
      sysfs.cleanup();
    });
    const first = await inventory.start();
    sysfs.write('proc-mounts', '');
    const { rmSync } = await import('node:fs');
    rmSync(sysfs.mountsPath);
    assert.equal(await inventory.rescan(), first);
  });
});
