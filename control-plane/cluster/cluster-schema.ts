// Answers of GET /api/v2/cluster (spec 2.7) and GET /api/v2/clusterinfo (spec 2.8) as zod
// schemas for the OpenAPI document; cluster-service.ts builds them (ClusterWire, ClusterInfoWire).
import { z } from 'zod';
import { int64String, lastUpgradeSchema, optionalTime, storageStatisticsShape } from '../inventory/wire-schemas.js';

const encryptionStatus = z.object({
  encryptionState: z.enum(['Disabled', 'Enabling', 'Enabled', 'Unknown']),
  kekGeneration: int64String,
  kekUpdateDate: optionalTime,
  previousKekGenerations: z.array(z.string()),
  rotationState: z.enum(['NoRotation', 'DistributingKEK', 'EncryptingDEKs', 'EncryptyingDEKs']),
});
const inBandAuthMode = z.enum(['UnKnown', 'Enabled', 'Disabled']);

/** The fields the cluster and its tenant view share. */
const common = {
  UUID: z.string(),
  subsystemNQN: z.string(),
  currentMaxReplicas: z.number().int(),
  supportedMaxReplicas: z.number().int(),
  ETag: z.string(),
  apiEndpoints: z.array(z.string()),
  discoveryEndpoints: z.array(z.string()),
  clusterName: z.string(),
  lastUpgrade: lastUpgradeSchema,
  inBandAuthMode,
  encryptionStatus,
};

export const clusterAnswer = z.object({
  ...common,
  statistics: z.object({ ...storageStatisticsShape, installedPhysicalStorage: int64String }),
  health: z.object({
    state: z.enum(['None', 'OK', 'Warning', 'Error']),
    numDegradedVolumes: z.number().int(),
    numReadOnlyVolumes: z.number().int(),
    numNotAvailableVolumes: z.number().int(),
    numInactiveNodes: z.number().int(),
    numHealthyVolumes: z.number().int(),
  }),
  MinVersionInCluster: z.string(),
  MinAllowedVersion: z.string(),
  MaxAllowedVersion: z.string(),
  federatedAuthenticationStatus: z.object({
    federatedAuthenticationEnabled: z.boolean(),
    idpHealthInfos: z.array(z.object({ serverName: z.string(), idpHealthStatus: z.string(), timestamp: optionalTime, healthErrorMessage: z.string() })),
  }),
});

export const clusterInfoAnswer = z.object({ ...common, nvmeEndpoints: z.array(z.string()) });
