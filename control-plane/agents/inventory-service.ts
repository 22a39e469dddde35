// Turns an agent's Inventory report into stored records. Reports from one agent process carry
// increasing sequence numbers; an older one arriving late (after a failover) is dropped.
import type { Inventory__Output } from '../../proto/gen/strata/v1/Inventory.js';
import type { LedPattern__Output } from '../../proto/gen/strata/v1/LedPattern.js';
import type { DeviceRecord, LedState, ServerFactsRecord } from '../../lib/records.js';
import type { InventoryStore } from './inventory-store.js';

const ledStateOf: Record<LedPattern__Output, LedState> = {
  LED_PATTERN_UNSPECIFIED: 'off',
  LED_OFF: 'off',
  LED_LOCATE: 'locate',
  LED_REBUILD: 'rebuild',
};

export class InventoryService {
  /** Highest sequence persisted per "serverUUID/agentInstance". */
  private readonly persisted = new Map<string, bigint>();

  constructor(private readonly store: InventoryStore, private readonly instanceId: string) {}

  /** Persists the report; returns false when it was stale and ignored. */
  async record(serverUUID: string, agentInstance: string, inventory: Inventory__Output): Promise<boolean> {
    const sequence = BigInt(inventory.sequence || '0');
    const streamKey = `${serverUUID}/${agentInstance}`;
    const last = this.persisted.get(streamKey);
    if (last !== undefined && sequence <= last) return false;
    const now = new Date().toISOString();
    const facts = inventory.facts;
    const factsRecord: ServerFactsRecord = {
      serverUUID,
      hostname: facts?.hostname ?? '',
      productVersion: facts?.product_version ?? '',
      tpm2IsSupported: facts?.tpm2_supported ?? false,
      cpuCores: facts?.cpu_cores ?? 0,
      memoryBytes: facts?.memory_bytes ?? '0',
      os: facts?.os ?? '',
      kernel: facts?.kernel ?? '',
      ...(facts?.kernel_capabilities
        ? {
            kernelCapabilities: {
              nvmetInBandAuth: facts.kernel_capabilities.nvmet_in_band_auth,
              nvmeTcpTls: facts.kernel_capabilities.nvme_tcp_tls,
              tlshd: facts.kernel_capabilities.tlshd,
              ublk: facts.kernel_capabilities.ublk,
              dmVdo: facts.kernel_capabilities.dm_vdo,
            },
          }
        : {}),
      journalDeviceSerial: inventory.journal_device_serial,
      reportedAt: now,
      reportedTo: this.instanceId,
    };
    const devices: DeviceRecord[] = inventory.devices.map((d) => ({
      serial: d.serial,
      model: d.model,
      sizeBytes: d.size_bytes,
      numaNode: d.numa_node,
      firmware: d.firmware,
      pciAddress: d.pci_address,
      controller: d.controller,
      serverUUID,
      holdsOS: d.holds_os,
      ledState: ledStateOf[d.led] ?? 'off',
      present: true,
      reportedAt: now,
    }));
    await this.store.save(serverUUID, { facts: factsRecord, devices });
    this.persisted.set(streamKey, sequence);
    return true;
  }
}
