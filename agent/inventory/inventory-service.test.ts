import assert from 'node:assert/strict';
import { readFileSync, rmSync, symlinkSync } from 'node:fs';
import { describe, it } from 'node:test';
import { createFakeSysfs, type FakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { InventoryService, type InventorySnapshot } from './inventory-service.js';
import { DriveLedDriver } from './drive-led.js';
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

describe('DriveLedDriver', () => {
  const read = (file: string) => readFileSync(file, 'utf8').trim();
  const refusal = (serial: string, pattern: RegExp) => (err: Error & { code?: string }) => {
    assert.equal(err.code, 'UNIMPLEMENTED');
    assert.match(err.message, new RegExp(`NVMe device ${serial}\\b`));
    assert.match(err.message, pattern);
    return true;
  };

  it('writes the attention indicator of the slot whose address matches the device (without function)', async (t) => {
    const sysfs = twoDrives();
    t.after(() => sysfs.cleanup());
    sysfs.addSlot('7', '0000:02:00', 0);
    const attention = sysfs.addSlot('3', '0000:01:00', 0);
    const led = new DriveLedDriver(sysfs.root);
    await led.set('0000:01:00.0', 'locate');
    assert.equal(read(attention), '1');
    assert.equal(await led.read('0000:01:00.0'), 'locate');
    await led.set('0000:01:00.0', 'rebuild');
    assert.equal(read(attention), '2');
    await led.set('0000:01:00.0', 'off');
    assert.equal(read(attention), '0');
    assert.equal(await led.read('0000:01:00.0'), 'off');
    assert.equal(read(`${sysfs.root}/bus/pci/slots/7/attention`), '0', 'other slot untouched');
  });

  it('fails clearly when the device has neither enclosure LEDs nor a slot, and reads its LED as unknown', async (t) => {
    const sysfs = twoDrives();
    t.after(() => sysfs.cleanup());
    sysfs.addSlot('7', '0000:09:00', 0);
    sysfs.addEnclosureLed('0000:09:00.0', 'locate');
    const led = new DriveLedDriver(sysfs.root);
    await assert.rejects(led.set('0000:01:00.0', 'locate', 'DRIVE-A'), refusal('DRIVE-A', /no enclosure LEDs \(NPEM \/ _DSM\) and is in no PCIe hotplug slot with an attention indicator/));
    assert.equal(await led.read('0000:01:00.0'), 'unknown');
    assert.equal(read(`${sysfs.root}/bus/pci/slots/7/attention`), '0', 'other slot untouched');
    assert.equal(read(`${sysfs.root}/class/leds/0000:09:00.0:enclosure:locate/brightness`), '0', 'other device\'s LED untouched');
  });

  it('prefers the enclosure LEDs of the drive\'s own function to its slot: locate and rebuild exclusive, locate-off turns both off, other indications untouched', async (t) => {
    const sysfs = twoDrives();
    t.after(() => sysfs.cleanup());
    const attention = sysfs.addSlot('3', '0000:01:00', 0);
    const locate = sysfs.addEnclosureLed('0000:01:00.0', 'locate');
    const rebuild = sysfs.addEnclosureLed('0000:01:00.0', 'rebuild');
    const fail = sysfs.addEnclosureLed('0000:01:00.0', 'fail', 1);
    const led = new DriveLedDriver(sysfs.root);
    assert.equal(await led.read('0000:01:00.0'), 'off');
    await led.set('0000:01:00.0', 'locate');
    assert.deepEqual([read(locate), read(rebuild)], ['1', '0']);
    assert.equal(await led.read('0000:01:00.0'), 'locate');
    await led.set('0000:01:00.0', 'rebuild');
    assert.deepEqual([read(locate), read(rebuild)], ['0', '1']);
    assert.equal(await led.read('0000:01:00.0'), 'rebuild');
    await led.set('0000:01:00.0', 'off');
    assert.deepEqual([read(locate), read(rebuild)], ['0', '0']);
    assert.equal(await led.read('0000:01:00.0'), 'off');
    assert.equal(read(fail), '1', 'the fail indication is not ours');
    assert.equal(read(attention), '0', 'the slot indicator is not used when the enclosure has LEDs');
  });

  it('uses the enclosure LEDs of the port the drive sits behind when the function has none', async (t) => {
    const sysfs = twoDrives();
    t.after(() => sysfs.cleanup());
    sysfs.addPciFunction('0000:01:00.0', '0000:00:1c.0');
    sysfs.addPciFunction('0000:02:00.0');
    const locate = sysfs.addEnclosureLed('0000:00:1c.0', 'locate');
    const led = new DriveLedDriver(sysfs.root);
    await led.set('0000:01:00.0', 'locate', 'DRIVE-A');
    assert.equal(read(locate), '1');
    assert.equal(await led.read('0000:01:00.0'), 'locate');
    await led.set('0000:01:00.0', 'off', 'DRIVE-A');
    assert.equal(read(locate), '0');
    // A drive on the root bus has no port above it: nothing to use.
    await assert.rejects(led.set('0000:02:00.0', 'locate', 'DRIVE-B'), refusal('DRIVE-B', /no enclosure LEDs/));
  });

  it('refuses a pattern the enclosure has no indication for (never approximated through the slot)', async (t) => {
    const sysfs = twoDrives();
    t.after(() => sysfs.cleanup());
    const attention = sysfs.addSlot('3', '0000:01:00', 0);
    const locate = sysfs.addEnclosureLed('0000:01:00.0', 'locate', 1);
    const led = new DriveLedDriver(sysfs.root);
    await assert.rejects(led.set('0000:01:00.0', 'rebuild', 'DRIVE-A'), refusal('DRIVE-A', /enclosure LEDs of PCI 0000:01:00.0 have no rebuild indication \(only locate\)/));
    assert.equal(read(locate), '1', 'unchanged by the refusal');
    assert.equal(read(attention), '0');
    await led.set('0000:01:00.0', 'off', 'DRIVE-A');
    assert.equal(read(locate), '0');
  });

  it('reports what the kernel reads back: an indicator that does not hold the value fails the command', async (t) => {
    const sysfs = twoDrives();
    t.after(() => sysfs.cleanup());
    // Writes vanish and reads come back empty: as an indicator whose value the kernel cannot read.
    sysfs.addSlot('3', '0000:01:00', 0);
    rmSync(`${sysfs.root}/bus/pci/slots/3/attention`);
    symlinkSync('/dev/null', `${sysfs.root}/bus/pci/slots/3/attention`);
    const led = new DriveLedDriver(sysfs.root);
    await assert.rejects(led.set('0000:01:00.0', 'locate', 'DRIVE-A'), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'INTERNAL');
      assert.match(err.message, /LED of NVMe device DRIVE-A reads unknown after setting locate through .*slots\/3\/attention/);
      return true;
    });
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
