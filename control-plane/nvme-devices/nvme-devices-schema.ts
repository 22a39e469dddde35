// Query of GET /api/v2/nvmeDevices (spec 4.9): nodeUUID, serverUUID (filters, combined with
// AND), deviceUsages (repeated and/or comma-separated; each an enum name or number, anything
// else is a 400). Names are case-sensitive; unknown names are ignored.
import { z } from 'zod';
import { errors } from '../../lib/errors.js';
import { queryList, queryValue } from '../http/body.js';
import { optional, parseInput } from '../http/lenient.js';
import { UUID_DOC, UUID_PATTERN, uuidSchema } from '../../lib/contract/uuid.js';
import { deviceUsages } from '../inventory/inventory-view.js';
import { parseEnum } from '../inventory/wire.js';
import { object } from '../projects/projects-schema.js';
import type { NvmeDeviceFilters } from './nvme-devices-service.js';

export type Query = Record<string, string | string[] | undefined>;

export const nvmeDeviceListQuery = z.object({
  nodeUUID: optional(uuidSchema),
  serverUUID: optional(uuidSchema),
  deviceUsages: optional(z.string().meta({ description: `repeated and/or comma-separated: ${deviceUsages.join(', ')} (or their numbers)` })),
});

export function parseNvmeDeviceListQuery(query: Query): NvmeDeviceFilters {
  const { nodeUUID, serverUUID } = parseInput(nvmeDeviceListQuery.pick({ nodeUUID: true, serverUUID: true }), { nodeUUID: queryValue(query, 'nodeUUID'), serverUUID: queryValue(query, 'serverUUID') });
  const usages = queryList(query['deviceUsages']).map((u) => parseEnum('deviceUsages', u, deviceUsages));
  return {
    ...(nodeUUID !== undefined ? { nodeUUID } : {}),
    ...(serverUUID !== undefined ? { serverUUID } : {}),
    ...(usages.length > 0 ? { deviceUsages: [...new Set(usages)] } : {}),
  };
}

// Body of POST /api/v2/nvmeDevices (spec 4.9): {serialNumber, nodeUUID}, both required. Lenient
// (wire-conventions §1): null means not given, unknown keys are ignored, a serial may arrive as a
// JSON number; surrounding spaces are not part of a serial or a UUID.
const text = z.union([z.string(), z.number().transform(String)], { error: 'must be a string' }).transform((v) => v.trim());
// Bounded (issue 17): a serial is what NVMe's Identify Controller SN field can hold (20 ASCII
// characters); a node UUID is a UUID. "" stays "not given" (required below).
/** NVMe serial numbers: at most 20 printable ASCII characters (the SN field of Identify Controller). */
export const SERIAL_PATTERN = /^[\x20-\x7e]{1,20}$/;
const serial = text.refine((v) => v === '' || SERIAL_PATTERN.test(v), 'must be at most 20 printable ASCII characters (an NVMe serial number)')
  .meta({ description: 'an NVMe serial number: at most 20 printable ASCII characters', pattern: SERIAL_PATTERN.source, maxLength: 20 });
const nodeUuid = text.refine((v) => v === '' || UUID_PATTERN.test(v), 'must be a UUID').transform((v) => v.toLowerCase())
  .meta(UUID_DOC);
export const attachNvmeDeviceBody = object({ serialNumber: optional(serial), nodeUUID: optional(nodeUuid) });

export interface AttachNvmeDeviceInput {
  readonly serialNumber: string;
  readonly nodeUUID: string;
}

export function parseAttachNvmeDevice(body: Record<string, unknown>): AttachNvmeDeviceInput {
  const input = parseInput(attachNvmeDeviceBody, body);
  const missing = [!input.serialNumber ? 'serialNumber is required' : '', !input.nodeUUID ? 'nodeUUID is required' : ''].filter((s) => s !== '');
  if (missing.length > 0) throw errors.invalid(`invalid request: ${missing.join('; ')}`);
  return { serialNumber: input.serialNumber!, nodeUUID: input.nodeUUID! };
}

/** The path's serial of a change (LED): typed like the body's (at most 20 printable ASCII characters). */
export const nvmeDeviceParams = z.object({ serial: z.string().regex(SERIAL_PATTERN, 'must be at most 20 printable ASCII characters (an NVMe serial number)') });
/**
 * The path's serial of a read: 1 to 20 characters, whatever they are. The SN field is 20 bytes
 * of ASCII by the NVMe spec, but a read must find every serial an agent reported as the kernel
 * decoded it, non-ASCII bytes included.
 */
export const nvmeDeviceReadParams = z.object({ serial: z.string().min(1).max(20, 'must be at most 20 characters (an NVMe serial number)') });

// Body of POST /api/v2/nvmeDevices/{serialNumber} (spec 4.9): {serverUUID, ledPattern}, both
// required; ledPattern is locate, rebuild or locate-off (any case). Lenient like the POST above.
export const ledPatterns = ['locate', 'rebuild', 'locate-off'] as const;
export type LedPatternName = (typeof ledPatterns)[number];
const ledPattern = text
  .transform((v) => v.toLowerCase())
  .refine((v) => v === '' || (ledPatterns as readonly string[]).includes(v), `must be one of ${ledPatterns.join(', ')}`);
export const setNvmeDeviceLedBody = object({ serverUUID: optional(nodeUuid), ledPattern: optional(ledPattern) });

export interface SetNvmeDeviceLedInput {
  readonly serialNumber: string;
  readonly serverUUID: string;
  readonly ledPattern: LedPatternName;
}

export function parseSetNvmeDeviceLed(serialNumber: string, body: Record<string, unknown>): SetNvmeDeviceLedInput {
  const input = parseInput(setNvmeDeviceLedBody, body);
  const missing = [
    !SERIAL_PATTERN.test(serialNumber) ? 'serialNumber must be at most 20 printable ASCII characters (an NVMe serial number)' : '',
    !input.serverUUID ? 'serverUUID is required' : '',
    !input.ledPattern ? `ledPattern is required (one of ${ledPatterns.join(', ')})` : '',
  ].filter((s) => s !== '');
  if (missing.length > 0) throw errors.invalid(`invalid request: ${missing.join('; ')}`);
  return { serialNumber, serverUUID: input.serverUUID!, ledPattern: input.ledPattern as LedPatternName };
}

// ---- the answer (spec 2.13; NvmeDeviceWire) ----

export const nvmeDeviceAnswer = z.object({
  size: z.string(),
  numaNodeID: z.string(),
  model: z.string(),
  serial: z.string(),
  serverUUID: z.string(),
  state: z.enum(['None', 'Healthy', 'Adding', 'Rebuilding', 'Failed']),
  failureTime: z.string().nullable(),
  rebuildCompletionTime: z.string().nullable(),
  name: z.string(),
  nodeUUID: z.string(),
  ETag: z.string(),
  statistics: z.object({ UnrecoverableDataIntegrityErrors: z.number().int(), RecoverableDataIntegrityErrors: z.number().int() }).nullable(),
  deviceUsage: z.enum(deviceUsages),
});
export const nvmeDeviceListAnswer = z.object({ NvmeDevices: z.array(nvmeDeviceAnswer) });
