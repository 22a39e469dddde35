// Wire encoding shared by the inventory resources (wire-conventions §1), and the decisions
// behind it.
//
// Integers. The spec's type column comes from the API's OpenAPI document, which is generated
// from protobuf: there a 32-bit proto integer is written `integer, format int64` (shown as
// "int64" in the spec), while a real 64-bit proto integer is written `string` (JSON carries
// it as a string, e.g. `size`, the byte counts, `kekGeneration`). wire-conventions §1 proves
// it: `port`, `replicaCount` and `nsid` are "int64" in the spec yet JSON numbers on the wire.
// So every field the spec types as "int64" (currentMaxReplicas, supportedMaxReplicas, the
// health counts, ProgressStep/ProgressTotal, localRebuildProgress, maxNvmeDevices,
// powerupProgress, the devices' data-integrity error counts) is a JSON number here, and every
// field the spec types as a string of bytes is a decimal string. The node statistics' four
// unnamed fields follow the same rule: the error counts are numbers like the devices' ones,
// metadataUtilization (a percentage) a number.
//
// Unset values. Responses carry every field (protobuf JSON with unpopulated fields emitted):
// an unset timestamp or duration is `null`, an unset string '', an unset number 0.
import { errors } from '../../lib/errors.js';
import type { Stored } from './inventory-reader.js';

/** A 64-bit count as its decimal string. */
export function int64(value: bigint | number): string {
  return typeof value === 'bigint' ? value.toString(10) : BigInt(Math.trunc(value)).toString(10);
}

/**
 * A stored error count (decimal string) as the API's integer: 0 when it was not measured (the
 * documented "not measured" value, docs/api.md), capped at 2^53 - 1.
 */
export function errorCountWire(count: string | undefined): number {
  if (count === undefined || !/^\d+$/.test(count)) return 0;
  const value = BigInt(count);
  return value > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(value);
}

/** A stored ISO timestamp as RFC 3339 UTC; null when unset or unparsable. */
export function timestamp(value: string | undefined | null): string | null {
  if (!value) return null;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? null : new Date(ms).toISOString();
}

/** ETag of a stored record: its etcd mod_revision, which changes on every write of the record. */
export function etagOf(stored: Stored<unknown>): string {
  return stored.modRevision;
}

/** Upgrade status enum (cluster lastUpgrade.Status, server LastUpgrade.Status). */
export const upgradeStatuses = ['Unknown', 'None', 'UpgradeFailed', 'Upgrading'] as const;

/** `lastUpgrade` of the cluster and `LastUpgrade` of a server: capitalized keys (wire-conventions §7). */
export interface LastUpgradeWire {
  Status: (typeof upgradeStatuses)[number];
  StartTime: string | null;
  EndTime: string | null;
  TargetVersion: string;
  ErrorMessage: string;
  ProgressStep: number;
  ProgressTotal: number;
}

/** No upgrade has ever run (upgrades are a later feature). */
export function noUpgrade(): LastUpgradeWire {
  return { Status: 'None', StartTime: null, EndTime: null, TargetVersion: '', ErrorMessage: '', ProgressStep: 0, ProgressTotal: 0 };
}

/**
 * An enum query value: its name (exact, else case-insensitively) or its number (the index in
 * `values`, wire-conventions §1). Anything else is a 400 naming the valid values.
 */
export function parseEnum<T extends string>(name: string, raw: string, values: readonly T[]): T {
  const exact = values.find((v) => v === raw);
  if (exact) return exact;
  const folded = values.find((v) => v.toLowerCase() === raw.toLowerCase());
  if (folded) return folded;
  if (/^\d+$/.test(raw)) {
    const byNumber = values[Number(raw)];
    if (byNumber) return byNumber;
  }
  throw errors.invalid(`${name} must be one of ${values.join(', ')}; got "${raw}"`);
}

/** The storage figures nodes and the cluster share (spec 2.7, 2.12): byte counts as strings. */
export interface StorageStatisticsWire {
  managedPhysicalStorage: string;
  effectivePhysicalStorage: string;
  logicalStorage: string;
  logicalUsedStorage: string;
  physicalUsedStorage: string;
  physicalUsedStorageIncludingParity: string;
  freePhysicalStorage: string;
  estimatedFreeLogicalStorage: string;
  estimatedLogicalStorage: string;
  /** logicalUsed divided by physicalUsed; 1 while nothing is used. */
  compressionRatio: number;
}
