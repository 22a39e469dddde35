import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createFakeSysfs, type FakeSysfs } from '../../test/helpers/sysfs-fixture.js';
import { hasTpm2 } from './server-facts.js';
import { readNvmeControllers } from './sysfs-nvme.js';

describe('readNvmeControllers', () => {
  let sysfs: FakeSysfs;
  before(() => {
    sysfs = createFakeSysfs();
    // Controller numbers deliberately out of serial order.
    sysfs.addController({
      name: 'nvme2',
      serial: 'S3EVNX0K100001',
      model: 'Samsung SSD 970 EVO 1TB',
      firmware: '2B2QEXE7',
      pciAddress: '0000:03:00.0',
      numa: { value: 1, at: 'controller' },
      namespaces: [
        { name: 'nvme2n1', sectors: 1953525168 },
        { name: 'nvme2n2', sectors: 2048 },
      ],
    });
    sysfs.addController({
      name: 'nvme0',
      serial: 'PHLJ000000002',
      model: 'INTEL SSDPE2KX020T8',
      pciAddress: '0000:01:00.0',
      numa: { value: 0, at: 'device' },
      namespaces: [{ name: 'nvme0n1', sectors: 3907029168, partitions: ['nvme0n1p1', 'nvme0n1p2'] }],
    });
    sysfs.addController({
      name: 'nvme10',
      serial: 'NOTNUMA0003',
      pciAddress: '0000:0a:00.0',
      // multipath path device; the block device is nvme10n1
      namespaces: [{ name: 'nvme10c10n1', sectors: 1000 }],
    });
    // A fabrics controller (a remote Strata volume connected over TCP): never inventoried.
    sysfs.addController({
      name: 'nvme5',
      serial: 'remote-volume-serial',
      transport: 'tcp',
      namespaces: [{ name: 'nvme5n1', sectors: 4096 }],
    });
    sysfs.setMounts(['/dev/nvme0n1p2 / ext4 rw,relatime 0 0', '/dev/nvme0n1p1 /boot/efi vfat rw 0 0', 'tmpfs /run tmpfs rw 0 0']);
  });
  after(() => sysfs.cleanup());

  it('reads every PCIe controller keyed by trimmed serial, sorted by serial', async () => {
    const devices = await readNvmeControllers({ sysfsRoot: sysfs.root, mountsPath: sysfs.mountsPath, swapsPath: sysfs.swapsPath });
    assert.deepEqual(
      devices.map((d) => d.serial),
      ['NOTNUMA0003', 'PHLJ000000002', 'S3EVNX0K100001'],
    );
    const samsung = devices.find((d) => d.serial === 'S3EVNX0K100001');
    assert.deepEqual(samsung, {
      serial: 'S3EVNX0K100001',
      model: 'Samsung SSD 970 EVO 1TB',
      firmware: '2B2QEXE7',
      pciAddress: '0000:03:00.0',
      numaNode: 1,
      controller: 'nvme2',
      sizeBytes: String((1953525168 + 2048) * 512),
      namespaces: ['nvme2n1', 'nvme2n2'],
      holdsOS: false,
    });
  });

  it('takes numa_node from the controller or its PCI device, -1 when absent', async () => {
    const devices = await readNvmeControllers({ sysfsRoot: sysfs.root, mountsPath: sysfs.mountsPath });
    const numa = Object.fromEntries(devices.map((d) => [d.serial, d.numaNode]));
    assert.deepEqual(numa, { NOTNUMA0003: -1, PHLJ000000002: 0, S3EVNX0K100001: 1 });
  });

  it('maps multipath path devices (nvmeXcYnZ) to their block device and sums sizes in 512-byte sectors', async () => {
    const devices = await readNvmeControllers({ sysfsRoot: sysfs.root, mountsPath: sysfs.mountsPath });
    const multipath = devices.find((d) => d.serial === 'NOTNUMA0003');
    assert.equal(multipath?.sizeBytes, '512000');
    assert.deepEqual(multipath?.namespaces, ['nvme10n1']);
  });

  it('marks the device whose partition is mounted as holding the OS', async () => {
    const devices = await readNvmeControllers({ sysfsRoot: sysfs.root, mountsPath: sysfs.mountsPath });
    assert.deepEqual(
      devices.filter((d) => d.holdsOS).map((d) => d.serial),
      ['PHLJ000000002'],
    );
  });

  it('sizes beyond 2^53 bytes stay exact', async () => {
    const big = createFakeSysfs();
    try {
      big.addController({ name: 'nvme0', serial: 'HUGE', pciAddress: '0000:01:00.0', namespaces: [{ name: 'nvme0n1', sectors: 2n ** 50n + 1n }] });
      const [device] = await readNvmeControllers({ sysfsRoot: big.root, mountsPath: big.mountsPath });
      assert.equal(device?.sizeBytes, ((2n ** 50n + 1n) * 512n).toString());
    } finally {
      big.cleanup();
    }
  });
});

describe('OS-disk detection', () => {
  const cases: { name: string; mounts: string[]; setup?: (s: FakeSysfs) => void; holdsOS: boolean }[] = [
    { name: 'whole namespace mounted', mounts: ['/dev/nvme0n1 /data xfs rw 0 0'], holdsOS: true },
    { name: 'partition mounted', mounts: ['/dev/nvme0n1p3 / ext4 rw 0 0'], holdsOS: true },
    { name: 'another disk mounted', mounts: ['/dev/nvme1n1p1 / ext4 rw 0 0', '/dev/sda1 /boot ext4 rw 0 0'], holdsOS: false },
    { name: 'nothing mounted', mounts: [], holdsOS: false },
    {
      name: 'LVM on a partition, mounted through /dev/mapper',
      mounts: ['/dev/mapper/vg0-root / ext4 rw 0 0'],
      setup: (s) => s.addDeviceMapper('dm-0', 'vg0-root'),
      holdsOS: true,
    },
    {
      name: 'LVM volume of the disk not mounted',
      mounts: ['/dev/mapper/other-root / ext4 rw 0 0'],
      setup: (s) => {
        s.addDeviceMapper('dm-0', 'vg0-root');
        s.addDeviceMapper('dm-1', 'other-root');
      },
      holdsOS: false,
    },
    {
      name: 'partition used as swap',
      mounts: [],
      setup: (s) => s.write('proc-swaps', 'Filename Type Size Used Priority\n/dev/nvme0n1p2 partition 1 0 -2\n'),
      holdsOS: true,
    },
  ];
  for (const c of cases) {
    it(c.name, async (t) => {
      const sysfs = createFakeSysfs();
      t.after(() => sysfs.cleanup());
      sysfs.addController({
        name: 'nvme0',
        serial: 'OSDISK',
        pciAddress: '0000:01:00.0',
        namespaces: [
          { name: 'nvme0n1', sectors: 100, partitions: ['nvme0n1p1', 'nvme0n1p2', 'nvme0n1p3'], partitionHolders: { nvme0n1p3: ['dm-0'] } },
        ],
      });
      c.setup?.(sysfs);
      sysfs.setMounts(c.mounts);
      const [device] = await readNvmeControllers({ sysfsRoot: sysfs.root, mountsPath: sysfs.mountsPath, swapsPath: sysfs.swapsPath });
      assert.equal(device?.holdsOS, c.holdsOS);
    });
  }

  it('fails when the mount table cannot be read rather than calling every disk free', async (t) => {
    const sysfs = createFakeSysfs();
    t.after(() => sysfs.cleanup());
    sysfs.addController({ name: 'nvme0', serial: 'X', namespaces: [{ name: 'nvme0n1', sectors: 1 }] });
    await assert.rejects(readNvmeControllers({ sysfsRoot: sysfs.root, mountsPath: `${sysfs.root}/missing` }), /ENOENT/);
  });
});

describe('hasTpm2', () => {
  it('is true only when some tpm reports major version 2', async (t) => {
    const sysfs = createFakeSysfs();
    t.after(() => sysfs.cleanup());
    assert.equal(await hasTpm2(sysfs.root), false);
    sysfs.addTpm('tpm0', 1);
    assert.equal(await hasTpm2(sysfs.root), false);
    sysfs.addTpm('tpm1', 2);
    assert.equal(await hasTpm2(sysfs.root), true);
  });
});
