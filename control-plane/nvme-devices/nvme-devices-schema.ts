// Query of GET /api/v2/nvmeDevices (spec 4.9): nodeUUID, serverUUID (filters, combined with
// AND), deviceUsages (repeated and/or comma-separated; each an enum name or number, anything
// else is a 400). Names are case-sensitive; unknown names are ignored.
import { queryList, queryValue } from '../http/body.js';
import { deviceUsages } from '../inventory/inventory-view.js';
import { parseEnum } from '../inventory/wire.js';
import type { NvmeDeviceFilters } from './nvme-devices-service.js';

export type Query = Record<string, string | string[] | undefined>;

export function parseNvmeDeviceListQuery(query: Query): NvmeDeviceFilters {
  const nodeUUID = queryValue(query, 'nodeUUID');
  const serverUUID = queryValue(query, 'serverUUID');
  const usages = queryList(query['deviceUsages']).map((u) => parseEnum('deviceUsages', u, deviceUsages));
  return {
    ...(nodeUUID !== undefined ? { nodeUUID } : {}),
    ...(serverUUID !== undefined ? { serverUUID } : {}),
    ...(usages.length > 0 ? { deviceUsages: [...new Set(usages)] } : {}),
  };
}
