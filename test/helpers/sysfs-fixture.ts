// Builds fake sysfs trees in a temp dir for the agent's tests (real files, no mocks), shaped as
// the kernel lays them out: class/nvme/nvmeN/..., bus/pci/slots/..., bus/pci/devices/..., class/leds/..., class/tpm/...
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export interface FakeNamespace {
  /** nvme0n1, or nvme0c0n1 for a multipath path device. */
  readonly name: string;
  /** 512-byte sectors. */
  readonly sectors: number | bigint;
  readonly partitions?: readonly string[];
  /** Holder devices (dm-0, md0) stacked on the namespace itself. */
  readonly holders?: readonly string[];
  /** Holder devices stacked on a partition, by partition name. */
  readonly partitionHolders?: Readonly<Record<string, readonly string[]>>;
}

export interface FakeController {
  readonly name: string;
  readonly serial: string;
  readonly model?: string;
  readonly firmware?: string;
  readonly transport?: string;
  readonly pciAddress?: string;
  /** Where numa_node is written: on the controller, on its PCI device, or nowhere. */
  readonly numa?: { readonly value: number; readonly at: 'controller' | 'device' };
  readonly namespaces?: readonly FakeNamespace[];
}

export interface FakeSysfs {
  readonly root: string;
  readonly mountsPath: string;
  readonly swapsPath: string;
  addController(controller: FakeController): void;
  removeController(name: string): void;
  addSlot(slot: string, address: string, attention?: number): string;
  /**
   * A PCI function under devices/pci0000:00/[<port>/]<address>, linked from bus/pci/devices/<address>
   * (how the kernel shows which port a drive sits behind); the port is added the same way first.
   */
  addPciFunction(address: string, port?: string): void;
  /** An LED class device <owner>:enclosure:<indication> (NPEM / _DSM); returns its brightness file. */
  addEnclosureLed(owner: string, indication: string, brightness?: number): string;
  addTpm(name: string, major: number): void;
  addDeviceMapper(kernelName: string, dmName: string): void;
  setMounts(lines: readonly string[]): void;
  write(relativePath: string, content: string): void;
  cleanup(): void;
}

export function createFakeSysfs(): FakeSysfs {
  const root = mkdtempSync(join(tmpdir(), 'strata-sysfs-'));
  const mountsPath = join(root, 'proc-mounts');
  const swapsPath = join(root, 'proc-swaps');
  const write = (relativePath: string, content: string) => {
    const path = join(root, relativePath);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, content);
  };
  writeFileSync(mountsPath, 'proc /proc proc rw 0 0\nsysfs /sys sysfs rw 0 0\n');
  writeFileSync(swapsPath, 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n');
  mkdirSync(join(root, 'class', 'nvme'), { recursive: true });
  return {
    root,
    mountsPath,
    swapsPath,
    addController(c) {
      const base = join('class', 'nvme', c.name);
      // sysfs pads serials to 20 and models to 40 with spaces, and ends attributes with \n.
      write(join(base, 'serial'), `${c.serial.padEnd(20, ' ')}\n`);
      write(join(base, 'model'), `${(c.model ?? 'Fake NVMe SSD').padEnd(40, ' ')}\n`);
      write(join(base, 'firmware_rev'), `${(c.firmware ?? '1.0').padEnd(8, ' ')}\n`);
      write(join(base, 'transport'), `${c.transport ?? 'pcie'}\n`);
      if (c.pciAddress !== undefined) write(join(base, 'address'), `${c.pciAddress}\n`);
      if (c.numa?.at === 'controller') write(join(base, 'numa_node'), `${c.numa.value}\n`);
      if (c.numa?.at === 'device') write(join(base, 'device', 'numa_node'), `${c.numa.value}\n`);
      mkdirSync(join(root, base, 'device'), { recursive: true });
      for (const ns of c.namespaces ?? []) {
        write(join(base, ns.name, 'size'), `${ns.sectors}\n`);
        mkdirSync(join(root, base, ns.name, 'holders'), { recursive: true });
        for (const holder of ns.holders ?? []) mkdirSync(join(root, base, ns.name, 'holders', holder), { recursive: true });
        for (const part of ns.partitions ?? []) {
          write(join(base, ns.name, part, 'size'), '2048\n');
          mkdirSync(join(root, base, ns.name, part, 'holders'), { recursive: true });
          for (const holder of ns.partitionHolders?.[part] ?? []) {
            mkdirSync(join(root, base, ns.name, part, 'holders', holder), { recursive: true });
          }
        }
      }
    },
    removeController(name) {
      rmSync(join(root, 'class', 'nvme', name), { recursive: true, force: true });
    },
    addSlot(slot, address, attention = 0) {
      write(join('bus', 'pci', 'slots', slot, 'address'), `${address}\n`);
      write(join('bus', 'pci', 'slots', slot, 'attention'), `${attention}\n`);
      return join(root, 'bus', 'pci', 'slots', slot, 'attention');
    },
    addPciFunction(address, port) {
      const add = (dir: string, name: string) => {
        mkdirSync(join(root, dir, name), { recursive: true });
        mkdirSync(join(root, 'bus', 'pci', 'devices'), { recursive: true });
        symlinkSync(join(root, dir, name), join(root, 'bus', 'pci', 'devices', name));
      };
      if (port) add(join('devices', 'pci0000:00'), port);
      add(port ? join('devices', 'pci0000:00', port) : join('devices', 'pci0000:00'), address);
    },
    addEnclosureLed(owner, indication, brightness = 0) {
      const file = join('class', 'leds', `${owner}:enclosure:${indication}`, 'brightness');
      write(file, `${brightness}\n`);
      return join(root, file);
    },
    addTpm(name, major) {
      write(join('class', 'tpm', name, 'tpm_version_major'), `${major}\n`);
    },
    addDeviceMapper(kernelName, dmName) {
      write(join('class', 'block', kernelName, 'dm', 'name'), `${dmName}\n`);
      mkdirSync(join(root, 'class', 'block', kernelName, 'holders'), { recursive: true });
    },
    setMounts(lines) {
      writeFileSync(mountsPath, `${lines.join('\n')}\n`);
    },
    write,
    cleanup() {
      rmSync(root, { recursive: true, force: true });
    },
  };
}
