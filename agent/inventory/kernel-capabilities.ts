// Reads what the running kernel can do (lib/contract/kernel-capabilities.ts), from the kernel
// itself, never from its version number (docs/kernel-capabilities.md):
// - nvmetInBandAuth: an nvmet host entry has a `dhchap_key` attribute (configfs). With no host
//   entry yet, one probe entry is made and removed again.
// - nvmeTcpTls: nvmet-tcp has its `tls_handshake_timeout` parameter (only built with
//   NVME_TARGET_TCP_TLS): <sysfs>/module/nvmet_tcp/parameters/tls_handshake_timeout.
// - tlshd: a process named tlshd runs (/proc/<pid>/comm). The kernel hands every NVMe/TCP TLS
//   handshake to it (over netlink); without it a port that requires TLS admits no host.
// - ublk, dmVdo: the module is loaded or built in (<sysfs>/module/<name>), or the kernel's own
//   module lists name it (lib/modules/<release>/modules.builtin, modules.order: what the kernel
//   was built with and its package ships).
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { KernelCapabilities } from '../../lib/contract/kernel-capabilities.js';
import { pathExists } from '../../lib/files.js';

/** A host NQN that no real host uses, for the nvmet auth probe. */
export const CAPABILITY_PROBE_HOST = 'nqn.2024-01.io.strata:kernel-capability-probe';

export interface KernelCapabilityProbeOptions {
  readonly sysfsRoot: string;
  /** The nvmet configfs root the data path drives; undefined when the server has none. */
  readonly nvmetRoot: string | undefined;
  /** lib/modules/<release> of the running kernel. */
  readonly modulesDir: string;
  /** Default /proc. */
  readonly procRoot?: string;
}

async function nvmetHasAuth(nvmetRoot: string | undefined): Promise<boolean> {
  if (!nvmetRoot) return false;
  const hosts = join(nvmetRoot, 'hosts');
  const entries = await fs.readdir(hosts).catch(() => [] as string[]);
  const existing = entries.find((name) => name !== CAPABILITY_PROBE_HOST);
  if (existing !== undefined) return pathExists(join(hosts, existing, 'dhchap_key'));
  const probe = join(hosts, CAPABILITY_PROBE_HOST);
  try {
    await fs.mkdir(probe);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return false;
  }
  try {
    return await pathExists(join(probe, 'dhchap_key'));
  } finally {
    await fs.rmdir(probe).catch(() => undefined);
  }
}

async function moduleAvailable(options: KernelCapabilityProbeOptions, name: string, file: string): Promise<boolean> {
  if (await pathExists(join(options.sysfsRoot, 'module', name))) return true;
  for (const list of ['modules.builtin', 'modules.order']) {
    const text = await fs.readFile(join(options.modulesDir, list), 'utf8').catch(() => '');
    if (text.split('\n').some((line) => line.trim().endsWith(`/${file}`))) return true;
  }
  return false;
}

/** Whether a process named `name` runs (its /proc/<pid>/comm). */
export async function processRuns(name: string, procRoot = '/proc'): Promise<boolean> {
  const pids = (await fs.readdir(procRoot).catch(() => [] as string[])).filter((entry) => /^\d+$/.test(entry));
  for (const pid of pids) {
    const comm = await fs.readFile(join(procRoot, pid, 'comm'), 'utf8').catch(() => '');
    if (comm.trim() === name) return true;
  }
  return false;
}

export async function probeKernelCapabilities(options: KernelCapabilityProbeOptions): Promise<KernelCapabilities> {
  const [nvmetInBandAuth, nvmeTcpTls, tlshd, ublk, dmVdo] = await Promise.all([
    nvmetHasAuth(options.nvmetRoot),
    pathExists(join(options.sysfsRoot, 'module', 'nvmet_tcp', 'parameters', 'tls_handshake_timeout')),
    processRuns('tlshd', options.procRoot),
    moduleAvailable(options, 'ublk_drv', 'ublk_drv.ko'),
    moduleAvailable(options, 'dm_vdo', 'dm-vdo.ko'),
  ]);
  return { nvmetInBandAuth, nvmeTcpTls, tlshd, ublk, dmVdo };
}
