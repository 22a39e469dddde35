// Wire input of the volume routes (spec 2.15, 4.11; wire-conventions §1, §2, §7, §8) as zod
// schemas over the lenient primitives: null means "not given", numbers may be strings, enums
// names or numbers, sizes in every accepted form. Unknown keys are ignored. A failure is one
// 400 naming every bad field. docs/volumes.md records the decisions taken here.
import { isIP } from 'node:net';
import { z } from 'zod';
import type { PlacementRestriction } from '../../lib/records.js';
import { queryValue } from '../http/body.js';
import { NAME_PATTERN, boolean, compression, enumeration, integer, optional, parseInput, size } from '../http/lenient.js';
import { ALLOW_ANY, ALLOW_NONE, isAclPseudoValue, mixesPseudoValues } from '../../lib/contract/acl.js';
import { hostNqnProblem } from '../../lib/contract/nqn.js';
import { uuidSchema } from '../../lib/contract/uuid.js';

/** Entries per access list: far more hosts than a volume is shared with, small enough for a record. */
export const MAX_ACCESS_LIST_ENTRIES = 1024;
export const MAX_LABELS = 16;
export const MAX_PLACEMENT_RESTRICTIONS = 16;
/** Page size of GET volumes: default and maximum (spec §8). */
export const MAX_PAGE = 1000;

const NAME_MESSAGE = 'must be 1 to 253 characters from a-z, A-Z, 0-9, hyphen, underscore, period';

function ipProblem(value: string): string | null {
  return isIP(value) === 0 ? `must be an IPv4 or IPv6 address, ${ALLOW_ANY} or ${ALLOW_NONE}` : null;
}

/** `null` and `''` mean "not given" (protobuf clients send empty strings for unset fields). */
function text<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => (v === null || v === '' ? undefined : v), schema.optional());
}

const nameString = z.string({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a string') }).regex(NAME_PATTERN, NAME_MESSAGE);
/** A required name (volume name on create). */
const requiredName = z.preprocess((v) => (v === null ? undefined : v), nameString);
/** An optional name: absent, null or ''. */
const optionalName = text(nameString);
/** UUIDs of this and other resources (volumes, policies, snapshots): the one UUID schema. */
const optionalUuid = text(uuidSchema);

/**
 * `acl` / `IPAcl`: `{values: [...]}`. Either entries of one kind (validated by `problem`) or
 * exactly one of ALLOW_ANY / ALLOW_NONE. Absent, null, `{}` or `{values: []}` give undefined
 * ("not given"): create applies the default, update leaves the list unchanged.
 */
function accessList(problem: (value: string) => string | null) {
  return optional(
    z.object(
      { values: optional(z.array(z.string({ error: 'must be a string' }), { error: 'must be an array of strings' }).max(MAX_ACCESS_LIST_ENTRIES, `at most ${MAX_ACCESS_LIST_ENTRIES} entries`)) },
      { error: 'must be an object {"values": [...]}' },
    ),
  ).transform((list, ctx) => {
    const values = list?.values ?? [];
    if (values.length === 0) return undefined;
    if (mixesPseudoValues(values)) {
      ctx.addIssue({ code: 'custom', message: `${ALLOW_ANY} and ${ALLOW_NONE} must be the only entry (never mixed with others)`, path: ['values'] });
      return z.NEVER;
    }
    values.forEach((value, i) => {
      if (isAclPseudoValue(value)) return;
      const why = problem(value);
      if (why) ctx.addIssue({ code: 'custom', message: why, path: ['values', i] });
    });
    return [...values];
  });
}

export const SECTOR_SIZE_NAMES = ['sectorSize_Default', 'sectorSize_512B', 'sectorSize_4K'] as const;
/** sectorSize by name, protobuf index (0/1/2) or bytes (512/4096); Default → undefined. */
const sectorSize = optional(
  enumeration(SECTOR_SIZE_NAMES, { '512': 'sectorSize_512B', '4096': 'sectorSize_4K', '512B': 'sectorSize_512B', '4K': 'sectorSize_4K' }),
).transform((v): 512 | 4096 | undefined => (v === 'sectorSize_512B' ? 512 : v === 'sectorSize_4K' ? 4096 : undefined));

const label = z.object(
  { key: z.preprocess((v) => (v === null ? undefined : v), nameString), value: z.preprocess((v) => (v === null ? undefined : v), nameString) },
  { error: 'must be an object {"key", "value"}' },
);
/** Labels: at most 16, unique keys. An empty list counts as "not given". */
const labels = optional(z.array(label, { error: 'must be an array of {"key", "value"}' }).max(MAX_LABELS, `at most ${MAX_LABELS} labels`)).transform((list, ctx) => {
  if (!list || list.length === 0) return undefined;
  const seen = new Set<string>();
  list.forEach((l, i) => {
    if (seen.has(l.key)) ctx.addIssue({ code: 'custom', message: `duplicate label key "${l.key}"`, path: [i, 'key'] });
    seen.add(l.key);
  });
  return list.map((l) => ({ key: l.key, value: l.value }));
});

/** placementRestrictions (wire-conventions §7): operator In; keys FD, PrimaryFD, ClusterID. */
const placementRestriction = z.object(
  {
    operator: enumeration(['Unknown', 'In']).refine((op) => op === 'In', 'must be In'),
    labelValueKeyPairs: z
      .array(
        z.object(
          {
            key: enumeration(['Unknown', 'FD', 'PrimaryFD', 'ClusterID']).refine((k) => k !== 'Unknown', 'must be FD, PrimaryFD or ClusterID'),
            value: z.string({ error: 'must be a string' }).min(1, 'must not be empty').max(253, 'must be at most 253 characters'),
          },
          { error: 'must be an object {"key", "value"}' },
        ),
        { error: 'must be an array' },
      )
      .min(1, 'must name at least one key/value pair')
      .max(64, 'at most 64 pairs'),
  },
  { error: 'must be an object {"operator", "labelValueKeyPairs"}' },
);
const placementRestrictions = optional(
  z.array(placementRestriction, { error: 'must be an array' }).max(MAX_PLACEMENT_RESTRICTIONS, `at most ${MAX_PLACEMENT_RESTRICTIONS} restrictions`),
).transform((list): PlacementRestriction[] | undefined =>
  list && list.length > 0
    ? list.map((r) => ({ operator: 'In', labelValueKeyPairs: r.labelValueKeyPairs.map((p) => ({ key: p.key as PlacementRestriction['labelValueKeyPairs'][number]['key'], value: p.value })) }))
    : undefined,
);

// ---- create ----

export const createVolumeSchema = z
  .object(
    {
      name: requiredName,
      size: optional(size),
      acl: accessList(hostNqnProblem),
      IPAcl: accessList(ipProblem),
      compression: optional(compression),
      replicaCount: optional(integer({ min: 1, max: 3 })),
      // Spec: "Not used". Accepted (and type-checked) so clients that send it keep working.
      minReplicas: optional(integer({ min: 0 })),
      sectorSize,
      projectName: optionalName,
      sourceSnapshotUUID: optionalUuid,
      sourceSnapshotName: optionalName,
      placementRestrictions,
      qosPolicyUUID: optionalUuid,
      qosPolicyName: optionalName,
      labels,
      unencrypted: optional(boolean),
    },
    { error: 'must be a JSON object' },
  )
  .superRefine((body, ctx) => {
    if (body.sourceSnapshotUUID !== undefined && body.sourceSnapshotName !== undefined) {
      ctx.addIssue({ code: 'custom', message: 'give sourceSnapshotUUID or sourceSnapshotName, not both', path: ['sourceSnapshotName'] });
    }
  });

export type CreateVolumeBody = z.output<typeof createVolumeSchema>;

/** The create request; `pathProject` (project-scoped route) overrides the body's projectName. */
export function parseCreateVolume(body: unknown, pathProject?: string): CreateVolumeBody {
  const parsed = parseInput(createVolumeSchema, body);
  return pathProject === undefined ? parsed : { ...parsed, projectName: pathProject };
}

// ---- update ----

export const updateVolumeSchema = z.object(
  {
    acl: accessList(hostNqnProblem),
    IPAcl: accessList(ipProblem),
    size: optional(size),
    compression: optional(compression),
    projectName: optionalName,
    qosPolicyUUID: optionalUuid,
    qosPolicyName: optionalName,
    Force: optional(boolean),
    name: optionalName,
    UUID: optionalUuid,
    labels,
    newName: optionalName,
    // Read so that a change is refused rather than ignored (it cannot be applied yet).
    replicaCount: optional(integer({ min: 1, max: 3 })),
  },
  { error: 'must be a JSON object' },
);

export type UpdateVolumeBody = z.output<typeof updateVolumeSchema>;

export function parseUpdateVolume(body: unknown): UpdateVolumeBody {
  return parseInput(updateVolumeSchema, body);
}

// ---- rollback ----

export const rollbackSchema = z
  .object({ srcSnapshotUUID: optionalUuid, srcSnapshotName: optionalName, projectName: optionalName }, { error: 'must be a JSON object' })
  .superRefine((body, ctx) => {
    const given = [body.srcSnapshotUUID, body.srcSnapshotName].filter((v) => v !== undefined).length;
    if (given !== 1) ctx.addIssue({ code: 'custom', message: 'give exactly one of srcSnapshotUUID, srcSnapshotName', path: ['srcSnapshotUUID'] });
  });

export type RollbackBody = z.output<typeof rollbackSchema>;

export function parseRollback(body: unknown): RollbackBody {
  return parseInput(rollbackSchema, body);
}

// ---- query strings and path parameters ----

export type Query = Record<string, string | string[] | undefined>;

/** Picks single query values (a repeated name is a 400; '' is absent) for a schema to check. */
function pick(query: Query, names: readonly string[]): Record<string, string | undefined> {
  return Object.fromEntries(names.map((n) => [n, queryValue(query, n)]));
}

export const listQuerySchema = z.object({
  UUID: optionalUuid,
  name: optionalName,
  failureDomain: text(z.string().max(253, 'must be at most 253 characters')),
  offsetUUID: optionalUuid,
  // 0 (a protobuf client's unset value) means the default; above the maximum is clamped.
  limit: optional(integer({ min: 0 })).transform((v) => (v === undefined || v === 0 ? MAX_PAGE : Math.min(v, MAX_PAGE))),
  projectName: optionalName,
  snapshotUUID: optionalUuid,
  showAll: optional(boolean).transform((v) => v ?? false),
});

export type ListVolumesQuery = z.output<typeof listQuerySchema>;

export function parseListQuery(query: Query, pathProject?: string): ListVolumesQuery {
  const parsed = parseInput(listQuerySchema, pick(query, ['UUID', 'name', 'failureDomain', 'offsetUUID', 'limit', 'projectName', 'snapshotUUID', 'showAll']));
  return pathProject === undefined ? parsed : { ...parsed, projectName: pathProject };
}

export const targetQuerySchema = z.object({ UUID: optionalUuid, name: optionalName, projectName: optionalName });

/** Identity fields in a GET/PUT/DELETE query string (`?name=X&projectName=P`, or `UUID`). */
export function parseTargetQuery(query: Query): { UUID?: string; name?: string; projectName?: string } {
  return parseInput(targetQuerySchema, pick(query, ['UUID', 'name', 'projectName']));
}

/** A volume UUID in the path: a 400 when it is not a UUID (no lookup for garbage). */
export function parsePathUuid(value: string | undefined): string {
  return parseInput(z.object({ UUID: uuidSchema }), { UUID: value ?? '' }).UUID;
}

/** A project name in the path. */
export function parsePathProject(value: string | undefined): string {
  return parseInput(z.object({ projectName: nameString }), { projectName: value ?? '' }).projectName;
}

/** The path parameters of a volume route: `{projectName}` on project-scoped paths, `{uuid}` on item paths. */
export function volumePathParams(path: string) {
  return z.object({
    ...(path.includes(':projectName') ? { projectName: nameString } : {}),
    ...(path.includes(':uuid') ? { uuid: uuidSchema } : {}),
  });
}

// ---- the answers (VolumeWire, VolumeConnectionWire) ----

const byteCount = z.string();
export const volumeAnswer = z.object({
  name: z.string(),
  size: byteCount,
  acl: z.object({ values: z.array(z.string()) }),
  IPAcl: z.object({ values: z.array(z.string()) }),
  compression: z.enum(['true', 'false']),
  replicaCount: z.number().int(),
  minReplicas: z.number().int(),
  sectorSize: z.number().int(),
  projectName: z.string(),
  sourceSnapshotUUID: z.string(),
  sourceSnapshotName: z.string(),
  placementRestrictions: z.array(z.object({ operator: z.enum(['Unknown', 'In']), labelValueKeyPairs: z.array(z.object({ key: z.enum(['Unknown', 'FD', 'PrimaryFD', 'ClusterID']), value: z.string() })) })),
  qosPolicyUUID: z.string(),
  qosPolicyName: z.string(),
  labels: z.array(z.object({ key: z.string(), value: z.string() })),
  state: z.enum(['Creating', 'Available', 'Deleting', 'Failed', 'Updating', 'Rollback']),
  protectionState: z.enum(['Unknown', 'FullyProtected', 'Degraded', 'ReadOnly', 'NotAvailable']),
  nodeList: z.array(z.string()),
  UUID: z.string(),
  nsid: z.number().int(),
  rebuildProgress: z.string(),
  statistics: z.object({
    logicalUsedStorage: byteCount,
    physicalUsedStorage: byteCount,
    compressionRatio: z.number(),
    totalCompressionRatio: z.number(),
    physicalCapacity: byteCount,
    physicalOwnedCapacity: byteCount,
    physicalOwnedMemory: byteCount,
    physicalMemory: byteCount,
    userWritten: byteCount,
    unrecoverableDataIntegrityErrors: z.number().int(),
    recoverableDataIntegrityErrors: z.number().int(),
  }),
  ETag: z.string(),
  connectedHosts: z.array(z.string()),
  primaryNodeUUID: z.string(),
  creationTime: z.string(),
  clusterId: z.string(),
  pgUUID: z.string(),
  encrypted: z.boolean(),
  missingNodesAccess: z.array(z.string()),
});
export const volumeListAnswer = z.object({ volumes: z.array(volumeAnswer) });
export const volumeConnectionAnswer = z.object({
  UUID: z.string(),
  name: z.string(),
  projectName: z.string(),
  state: z.string(),
  transport: z.literal('tcp'),
  subsystemNQN: z.string(),
  nsid: z.number().int(),
  paths: z.array(z.object({ nodeUUID: z.string(), address: z.string(), port: z.number().int(), primary: z.boolean(), served: z.boolean() })),
  discoveryEndpoints: z.array(z.string()),
  devicePath: z.string(),
  acl: z.array(z.string()),
  IPAcl: z.array(z.string()),
  commands: z.object({ connect: z.array(z.string()), discover: z.array(z.string()), connectAll: z.array(z.string()) }),
  clusterSubsystem: z.object({ subsystemNQN: z.string(), directConnect: z.literal('refused'), reason: z.string(), instead: z.array(z.string()) }),
});
