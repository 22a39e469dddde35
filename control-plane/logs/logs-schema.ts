// Query of GET /api/v2/logs (spec 4.5, the diagnostic bundle): every parameter of the seed's
// table, with its default, plus serverUUID (the server to collect; default: the server this
// control plane runs on). Names are case-sensitive; unknown names are ignored; a bad value is 400.
import { z } from 'zod';
import { errors } from '../../lib/errors.js';
import { boolean, integer, optional, parseInput, uuid } from '../http/lenient.js';

export type Query = Record<string, string | string[] | undefined>;

export type BundleCompression = 'gzip' | 'xz' | 'none';

export interface BundleRequest {
  readonly serverUUID: string | undefined;
  readonly skipStatistics: boolean;
  readonly captureCpuAndTcpDump: boolean;
  readonly daysOfLogs: number;
  /** CollectServicesLbcliEtcd: service status, CLI outputs and the etcd dump only. */
  readonly servicesOnly: boolean;
  readonly statisticsIntervalSeconds: number;
  readonly skipVarLog: boolean;
  readonly filenamePrefix: string;
  readonly statisticsCycles: number;
  readonly compression: BundleCompression;
  readonly ioNice: boolean;
}

const single = (v: unknown) => (Array.isArray(v) ? { repeated: v } : v === '' ? undefined : v);
const field = <T extends z.ZodType>(schema: T) => z.preprocess(single, optional(schema));

export const bundleQuery = z.object({
  serverUUID: field(uuid),
  SkipStatistics: field(boolean),
  CaptureCpuAndTcpDump: field(boolean),
  NumOfDaysToCollectLogs: field(integer({ min: 1, max: 365 })),
  CollectServicesLbcliEtcd: field(boolean),
  IntervalBetweenBEReadCycles: field(integer({ min: 1, max: 3600 })),
  DontCollectlogs: field(boolean),
  LogFilename: field(z.string().regex(/^[A-Za-z0-9._-]{1,100}$/, 'must be 1 to 100 characters from a-z, A-Z, 0-9, period, hyphen, underscore (no spaces)')),
  NumOfstatisticsToCapture: field(integer({ min: 1, max: 100 })),
  DontCompressOutput: field(boolean),
  IoNice: field(boolean),
  UseHighCompression: field(boolean),
}).refine((q) => (q.NumOfstatisticsToCapture ?? 1) * (q.IntervalBetweenBEReadCycles ?? 5) <= 3600, {
  message: 'NumOfstatisticsToCapture × IntervalBetweenBEReadCycles must be at most 3600 seconds',
  path: ['NumOfstatisticsToCapture'],
});

export function parseBundleQuery(query: Query): BundleRequest {
  const q = parseInput(bundleQuery, query);
  if (q.DontCompressOutput && q.UseHighCompression) throw errors.invalid('invalid request: UseHighCompression and DontCompressOutput exclude each other');
  return {
    serverUUID: q.serverUUID,
    skipStatistics: q.SkipStatistics ?? false,
    captureCpuAndTcpDump: q.CaptureCpuAndTcpDump ?? false,
    daysOfLogs: q.NumOfDaysToCollectLogs ?? 2,
    servicesOnly: q.CollectServicesLbcliEtcd ?? false,
    statisticsIntervalSeconds: q.IntervalBetweenBEReadCycles ?? 5,
    skipVarLog: q.DontCollectlogs ?? false,
    filenamePrefix: q.LogFilename ?? 'strata-bundle',
    statisticsCycles: q.NumOfstatisticsToCapture ?? 1,
    compression: q.DontCompressOutput ? 'none' : q.UseHighCompression ? 'xz' : 'gzip',
    ioNice: q.IoNice ?? false,
  };
}
