// What a server's running kernel can do, as its agent measured it (agent/inventory/
// kernel-capabilities.ts) and the control plane stores with the server's facts. One list for the
// agent, the control plane and the API: the names below are the API's (`kernelCapabilities`, an
// extension of the spec's server and node records, docs/kernel-capabilities.md).

export const KERNEL_CAPABILITIES = ['nvmetInBandAuth', 'nvmeTcpTls', 'tlshd', 'ublk', 'dmVdo'] as const;
export type KernelCapability = (typeof KERNEL_CAPABILITIES)[number];

/** true / false as measured; a server whose agent did not report them (older agent, no report yet) has none. */
export type KernelCapabilities = Readonly<Record<KernelCapability, boolean>>;

/** What each capability means, for messages ("lacks <description>"). */
export const KERNEL_CAPABILITY_DESCRIPTIONS: Readonly<Record<KernelCapability, string>> = {
  nvmetInBandAuth: 'NVMe target in-band authentication (DH-HMAC-CHAP, NVME_TARGET_AUTH)',
  nvmeTcpTls: 'TLS on the NVMe/TCP target (NVME_TARGET_TCP_TLS)',
  // Not the kernel's, but the kernel's TLS is nothing without it: every handshake goes to tlshd.
  tlshd: 'the TLS handshake daemon (tlshd, ktls-utils) running',
  ublk: 'userspace block devices (ublk, BLK_DEV_UBLK)',
  dmVdo: 'device-mapper VDO (DM_VDO)',
};

export const NO_KERNEL_CAPABILITIES: KernelCapabilities = Object.freeze({ nvmetInBandAuth: false, nvmeTcpTls: false, tlshd: false, ublk: false, dmVdo: false });
