// Answer schemas the inventory views share (nodes, servers, the cluster): the storage figures
// and the upgrade record, as zod schemas for the OpenAPI document (control-plane/openapi/).
import { z } from 'zod';
import { upgradeStatuses } from './wire.js';

/** A 64-bit count of bytes: a decimal string (wire-conventions §1). */
export const int64String = z.string().regex(/^\d+$/).meta({ description: 'a 64-bit integer as a decimal string' });
/** An ISO-8601 UTC time, or null when it never happened. */
export const optionalTime = z.string().nullable();

export const storageStatisticsShape = {
  managedPhysicalStorage: int64String,
  effectivePhysicalStorage: int64String,
  logicalStorage: int64String,
  logicalUsedStorage: int64String,
  physicalUsedStorage: int64String,
  physicalUsedStorageIncludingParity: int64String,
  freePhysicalStorage: int64String,
  estimatedFreeLogicalStorage: int64String,
  estimatedLogicalStorage: int64String,
  compressionRatio: z.number(),
};

export const lastUpgradeSchema = z.object({
  Status: z.enum(upgradeStatuses),
  StartTime: optionalTime,
  EndTime: optionalTime,
  TargetVersion: z.string(),
  ErrorMessage: z.string(),
  ProgressStep: z.number().int(),
  ProgressTotal: z.number().int(),
});
