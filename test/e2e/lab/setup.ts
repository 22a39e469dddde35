// Prepares this machine for the e2e suite: installs the Debian packages the lab needs (when
// missing), fetches Debian's kernel and builds the guest initramfs, for the lab's suite
// ($STRATA_E2E_KERNEL_SUITE, default trixie) or each suite of --kernels (tools/setup.sh:
// trixie,bookworm), and the guests' Debian 13 userland for TLS on NVMe/TCP (userland.ts: tlshd,
// nvme-cli 2.13; STRATA_E2E_USERLAND=0 skips it). With --boot it also boots a guest of each once
// and reports the boot time.
//   node dist/test/e2e/lab/setup.js [--kernels trixie,bookworm] [--boot]
import { fetchKernel, labKernelSuite } from './kernel.js';
import { buildInitramfs } from './initramfs.js';
import { startGuest } from './guest.js';
import { installPackages } from './packages.js';
import { prepareUserland } from './userland.js';
import { cacheDir, since } from './util.js';

async function main(): Promise<void> {
  const boot = process.argv.includes('--boot');
  const total = performance.now();
  let start = performance.now();
  const added = await installPackages();
  console.log(added.length > 0 ? `packages: installed ${added.join(' ')} (${since(start)} ms)` : `packages: all present (${since(start)} ms)`);

  console.log(`cache: ${cacheDir()}`);
  const at = process.argv.indexOf('--kernels');
  const suites = at > 0 ? (process.argv[at + 1] ?? '').split(',').filter(Boolean) : [labKernelSuite()];
  if (suites.length === 0) throw new Error('--kernels: give a comma-separated list of Debian suites (trixie,bookworm)');
  for (const suite of suites) await prepare(labKernelSuite(suite), boot);
  if (process.env['STRATA_E2E_USERLAND'] !== '0') {
    start = performance.now();
    const userland = await prepareUserland();
    console.log(`userland: ${userland.built ? 'built' : 'cached'} ${userland.root} (${since(start)} ms)`);
  }
  console.log(`done in ${since(total)} ms`);
}

async function prepare(suite: string, boot: boolean): Promise<void> {
  let start = performance.now();
  const kernel = await fetchKernel({ suite });
  console.log(`kernel (${suite}): ${kernel.package} ${kernel.debVersion} ${kernel.fetched ? 'downloaded and extracted' : 'cached'} (${since(start)} ms)`);
  console.log(`  vmlinux ${kernel.vmlinux}`);

  start = performance.now();
  const initramfs = await buildInitramfs(kernel);
  console.log(`initramfs: ${initramfs.built ? 'built' : 'cached'}, ${initramfs.modules.length} modules, ${(initramfs.bytes / 1e6).toFixed(1)} MB (${since(start)} ms)`);
  console.log(`  ${initramfs.path}`);

  if (boot) {
    start = performance.now();
    const guest = await startGuest({ name: 'setup-check', nvmeDrives: [{ serial: 'STRATA-SETUP-0001', sizeMiB: 64 }], lab: { kernel, initramfs } });
    try {
      console.log(`boot: guest ready in ${guest.bootMs} ms (console ${guest.consoleLog})`);
      if (guest.moduleLoadFailures.length > 0) console.log(`  modules that failed to load: ${guest.moduleLoadFailures.join(' ')}`);
      const t = performance.now();
      const result = await guest.runOk(['uname', '-r']);
      console.log(`  job round trip ${since(t)} ms: uname -r = ${result.stdout.trim()}`);
    } finally {
      const t = performance.now();
      await guest.stop();
      console.log(`  stopped in ${since(t)} ms`);
    }
  }
}

main().catch((error: unknown) => {
  console.error(`setup failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
