// Original file: proto/strata.proto

export const PoolState = {
  POOL_STATE_UNSPECIFIED: 'POOL_STATE_UNSPECIFIED',
  POOL_READY: 'POOL_READY',
  POOL_GROWING: 'POOL_GROWING',
  POOL_REBUILDING: 'POOL_REBUILDING',
  POOL_DEGRADED: 'POOL_DEGRADED',
  POOL_FAILED: 'POOL_FAILED',
} as const;

export type PoolState =
  | 'POOL_STATE_UNSPECIFIED'
  | 0
  | 'POOL_READY'
  | 1
  | 'POOL_GROWING'
  | 2
  | 'POOL_REBUILDING'
  | 3
  | 'POOL_DEGRADED'
  | 4
  | 'POOL_FAILED'
  | 5

export type PoolState__Output = typeof PoolState[keyof typeof PoolState]
