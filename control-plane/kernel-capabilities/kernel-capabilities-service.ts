// The kernel capabilities of the cluster's servers and nodes, as their agents measured them
// (lib/contract/kernel-capabilities.ts), and the one check every feature that needs one makes:
// require() refuses with KERNEL_CAPABILITY_MISSING (400) naming each node whose kernel lacks it
// (or whose agent never reported it), so a request is never accepted and silently not applied.
import { errors, StrataError } from '../../lib/errors.js';
import {
  KERNEL_CAPABILITY_DESCRIPTIONS,
  NO_KERNEL_CAPABILITIES,
  type KernelCapabilities,
  type KernelCapability,
} from '../../lib/contract/kernel-capabilities.js';
import type { InventorySnapshot, InventorySource } from '../inventory/inventory-reader.js';

/** One server in GET /api/v2/kernelCapabilities (a Strata extension). */
export interface ServerKernelCapabilitiesWire {
  serverUUID: string;
  name: string;
  NodesUUIDs: string[];
  /** `uname -r` as the agent reported it; '' before its first report. */
  kernel: string;
  /** False when the agent has not reported capabilities (older agent, no report yet): all count as missing. */
  measured: boolean;
  capabilities: KernelCapabilities;
}

function capabilitiesOf(snapshot: InventorySnapshot, serverUUID: string): { measured: boolean; capabilities: KernelCapabilities; kernel: string } {
  const facts = snapshot.serverFacts.get(serverUUID)?.record;
  return {
    measured: facts?.kernelCapabilities !== undefined,
    capabilities: { ...NO_KERNEL_CAPABILITIES, ...(facts?.kernelCapabilities ?? {}) },
    kernel: facts?.kernel ?? '',
  };
}

export class KernelCapabilitiesService {
  constructor(private readonly inventory: InventorySource) {}

  async list(): Promise<ServerKernelCapabilitiesWire[]> {
    const snapshot = await this.inventory.read();
    return [...snapshot.servers.values()].map(({ record: server }) => ({
      serverUUID: server.UUID,
      name: server.name,
      NodesUUIDs: [...server.nodeUUIDs],
      ...capabilitiesOf(snapshot, server.UUID),
    }));
  }

  /**
   * Refuses `action` unless every node in `nodeUUIDs` (default: every node of the cluster) runs on
   * a kernel with `capability`. The message names the nodes (name and UUID) and their kernels.
   */
  async require(capability: KernelCapability, action: string, nodeUUIDs?: readonly string[]): Promise<void> {
    const snapshot = await this.inventory.read();
    const involved = nodeUUIDs ?? [...snapshot.nodes.keys()];
    const lacking: { UUID: string; name: string; kernel: string }[] = [];
    for (const uuid of involved) {
      const node = snapshot.nodes.get(uuid)?.record;
      if (!node) throw errors.notFound('node', uuid);
      const { capabilities, kernel, measured } = capabilitiesOf(snapshot, node.serverUUID);
      if (!capabilities[capability]) lacking.push({ UUID: node.UUID, name: node.name, kernel: measured ? kernel : `${kernel || 'unknown kernel'}, not reported` });
    }
    if (lacking.length === 0) return;
    lacking.sort((a, b) => a.name.localeCompare(b.name) || a.UUID.localeCompare(b.UUID));
    const named = lacking.map((n) => `${n.name} (${n.UUID}, kernel ${n.kernel})`).join(', ');
    throw new StrataError(
      'KERNEL_CAPABILITY_MISSING',
      `cannot ${action}: the kernel of node${lacking.length > 1 ? 's' : ''} ${named} lacks ${KERNEL_CAPABILITY_DESCRIPTIONS[capability]}`,
      { details: [{ capability, nodes: lacking.map((n) => n.UUID) }] },
    );
  }
}
