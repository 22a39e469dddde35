// Facts about the server itself, reported with every inventory.
import { cpus, availableParallelism, release, totalmem, type as osType, version as osVersion } from 'node:os';
import { join } from 'node:path';
import si from 'systeminformation';
import type { KernelCapabilities } from '../../lib/contract/kernel-capabilities.js';
import { productVersion } from '../../lib/paths.js';
import { listDir, readAttr } from './sysfs-nvme.js';

export interface ServerFacts {
  readonly hostname: string;
  readonly productVersion: string;
  readonly tpm2Supported: boolean;
  readonly cpuCores: number;
  /** Decimal string: the proto field is uint64. */
  readonly memoryBytes: string;
  /** Distribution and release, e.g. "Debian GNU/Linux 12". */
  readonly os: string;
  readonly kernel: string;
  /** Measured by the inventory once the data path decided on the kernel target; absent before. */
  readonly kernelCapabilities?: KernelCapabilities;
}

/** True when some <sysfs>/class/tpm/tpmN reports TPM major version 2. */
export async function hasTpm2(sysfsRoot: string): Promise<boolean> {
  const classDir = join(sysfsRoot, 'class', 'tpm');
  for (const entry of await listDir(classDir)) {
    if (!/^tpm\d+$/.test(entry)) continue;
    if ((await readAttr(join(classDir, entry, 'tpm_version_major'))) === '2') return true;
  }
  return false;
}

/**
 * Collects the server facts. systeminformation names the distribution (it reads os-release);
 * node:os answers the rest at no cost and is the fallback when systeminformation fails or is
 * slow (it can shell out on some platforms).
 */
export async function collectServerFacts(options: { hostname: string; sysfsRoot: string; timeoutMs?: number }): Promise<ServerFacts> {
  const timeoutMs = options.timeoutMs ?? 3000;
  let distro = '';
  let kernel = release();
  let memoryBytes = BigInt(totalmem());
  try {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('systeminformation timed out')), timeoutMs);
    });
    try {
      const [osInfo, mem] = await Promise.race([Promise.all([si.osInfo(), si.mem()]), timeout]);
      distro = [osInfo.distro, osInfo.release].filter((s) => s && s !== 'unknown').join(' ');
      if (osInfo.kernel) kernel = osInfo.kernel;
      if (mem.total > 0) memoryBytes = BigInt(mem.total);
    } finally {
      clearTimeout(timer);
    }
  } catch {
    // keep the node:os values
  }
  return {
    hostname: options.hostname,
    productVersion,
    tpm2Supported: await hasTpm2(options.sysfsRoot),
    cpuCores: typeof availableParallelism === 'function' ? availableParallelism() : cpus().length,
    memoryBytes: memoryBytes.toString(),
    os: distro || `${osType()} ${osVersion()}`.trim(),
    kernel,
  };
}
