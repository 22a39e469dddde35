// The e2e lab's public API (see docs/e2e.md).
export { startGuest, prepareLab, stopAllGuests, freeLoopbackPort, freeLoopbackPortRange, QEMU, QBOOT } from './guest.js';
export type { Guest, GuestOptions, NvmeDriveSpec, HostForwardSpec, ShareSpec, RunOptions, RunResult, Lab } from './guest.js';
export { createPrivateSegment, privateLinkArgs, linkAddress, linkMac } from './link.js';
export type { PrivateSegment, PrivateLinkSpec, SegmentKind } from './link.js';
export { fetchKernel, extractVmlinux, checkVmlinux, resolveKernelPackage, labKernelSuite, labKernelLabel, KERNEL_SUITES, DEFAULT_KERNEL_SUITE } from './kernel.js';
export type { KernelInfo, KernelOptions } from './kernel.js';
export { buildInitramfs } from './initramfs.js';
export type { InitramfsInfo, InitramfsOptions } from './initramfs.js';
export { LAB_MODULES, OPTIONAL_LAB_MODULES, resolveModules, modinfoRecords, parseModinfo } from './modules.js';
export { LAB_PACKAGES, installPackages } from './packages.js';
export { script, scriptsDir, repoRoot, cacheDir, execArgv, sha256, StepTimer, nvmeHostArgs } from './util.js';
export { prepareUserland, USERLAND_PACKAGES, USERLAND_SUITE } from './userland.js';
export type { UserlandInfo } from './userland.js';
