// Prepares this machine for the e2e suite: installs the Debian packages the lab needs (when
// missing), fetches Debian's kernel and builds the guest initramfs. With --boot it also boots a
// guest once and reports the boot time.
//   node dist/test/e2e/lab/setup.js [--boot]
import { fetchKernel } from './kernel.js';
import { buildInitramfs } from './initramfs.js';
import { startGuest } from './guest.js';
import { installPackages } from './packages.js';
import { cacheDir, since } from './util.js';

async function main(): Promise<void> {
  const boot = process.argv.includes('--boot');
  const total = performance.now();
  let start = performance.now();
  const added = await installPackages();
  console.log(added.length > 0 ? `packages: installed ${added.join(' ')} (${since(start)} ms)` : `packages: all present (${since(start)} ms)`);

  console.log(`cache: ${cacheDir()}`);
  start = performance.now();
  const kernel = await fetchKernel();
  console.log(`kernel: ${kernel.package} ${kernel.debVersion} ${kernel.fetched ? 'downloaded and extracted' : 'cached'} (${since(start)} ms)`);
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
  console.log(`done in ${since(total)} ms`);
}

main().catch((error: unknown) => {
  console.error(`setup failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
