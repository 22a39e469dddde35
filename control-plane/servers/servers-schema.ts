// Query of GET /api/v2/servers (spec 4.12): UUID, Name (capital N), RiskOfServiceLoss (an enum
// name or number; anything else is a 400). Names are case-sensitive; unknown names are ignored.
import { queryValue } from '../http/body.js';
import { parseEnum } from '../inventory/wire.js';
import { riskOfServiceLossStates, type ServerFilters } from './servers-service.js';

export type Query = Record<string, string | string[] | undefined>;

export function parseServerListQuery(query: Query): ServerFilters {
  const UUID = queryValue(query, 'UUID');
  const name = queryValue(query, 'Name');
  const risk = queryValue(query, 'RiskOfServiceLoss');
  return {
    ...(UUID !== undefined ? { UUID } : {}),
    ...(name !== undefined ? { name } : {}),
    ...(risk !== undefined ? { riskOfServiceLoss: parseEnum('RiskOfServiceLoss', risk, riskOfServiceLossStates) } : {}),
  };
}
