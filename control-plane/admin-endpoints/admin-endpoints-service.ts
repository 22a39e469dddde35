// Admin endpoints (spec 2.5, 4.2, §3.3): which IP addresses may reach an administrative port.
// This build stores them only; servers do not enforce them yet (docs/admin-endpoints.md).
// A port Strata itself uses (API, gRPC, NVMe/TCP, discovery, the volume port range; the list
// comes from the composition root) is refused with 409: an admin endpoint there would fight
// the data path's own rules.
import { StrataError, errors } from '../../lib/errors.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import { LOST_RACE, retryLostRaces } from '../../lib/retry.js';
import type { AdminEndpointInput } from './admin-endpoints-schema.js';
import type { AdminEndpointRecord, AdminEndpointsStore } from './admin-endpoints-store.js';

/** Ports `from`..`to` (inclusive) are used by Strata for `purpose`. */
export interface ReservedPortRange {
  readonly from: number;
  readonly to: number;
  readonly purpose: string;
}

export interface AdminEndpointWire {
  port: number;
  ips: string[];
  ETag: string;
}

export function adminEndpointToWire(stored: Versioned<AdminEndpointRecord>): AdminEndpointWire {
  return { port: stored.record.port, ips: [...stored.record.ips], ETag: stored.revision };
}

const ATTEMPTS = 10;

export class AdminEndpointsService {
  constructor(
    private readonly store: AdminEndpointsStore,
    private readonly reservedPorts: readonly ReservedPortRange[],
  ) {}

  /** All endpoints, or the one on `port` (an empty list when there is none). */
  async list(port?: number): Promise<AdminEndpointWire[]> {
    const all = await this.store.list();
    return all.filter((e) => port === undefined || e.record.port === port).map(adminEndpointToWire);
  }

  async get(port: number): Promise<AdminEndpointWire> {
    return adminEndpointToWire(await this.require(port));
  }

  async create(input: AdminEndpointInput): Promise<AdminEndpointWire> {
    const reserved = this.reservedPorts.find((r) => input.port >= r.from && input.port <= r.to);
    if (reserved) throw new StrataError('ALREADY_EXISTS', `port ${input.port} is in use by Strata (${reserved.purpose})`);
    const record: AdminEndpointRecord = { port: input.port, ips: [...input.ips], createdAt: new Date().toISOString() };
    const result = await this.store.put(record, '0');
    if (!result.succeeded) throw errors.exists('admin endpoint on port', String(input.port));
    return adminEndpointToWire({ key: '', record, revision: result.revision });
  }

  async update(port: number, ips: readonly string[], expectedRevision: string | undefined): Promise<AdminEndpointWire> {
    return retryLostRaces(ATTEMPTS, async () => {
      const current = await this.require(port);
      if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('admin endpoint on port', String(port));
      if (JSON.stringify(current.record.ips) === JSON.stringify(ips)) return adminEndpointToWire(current);
      const record: AdminEndpointRecord = { ...current.record, ips: [...ips] };
      const result = await this.store.put(record, current.revision);
      return result.succeeded ? adminEndpointToWire({ key: current.key, record, revision: result.revision }) : LOST_RACE;
    }, () => busy(port));
  }

  async delete(port: number, expectedRevision: string | undefined): Promise<void> {
    await retryLostRaces<void>(ATTEMPTS, async () => {
      const current = await this.require(port);
      if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('admin endpoint on port', String(port));
      if (!(await this.store.delete(current))) return LOST_RACE;
    }, () => busy(port));
  }

  private async require(port: number): Promise<Versioned<AdminEndpointRecord>> {
    const stored = await this.store.get(port);
    if (!stored) throw errors.notFound('admin endpoint on port', String(port));
    return stored;
  }
}

function busy(port: number): StrataError {
  return new StrataError('OPERATION_IN_PROGRESS', `the admin endpoint on port ${port} is being changed by other requests; retry`);
}
