// Original file: proto/strata.proto

export const PoolDeviceState = {
  POOL_DEVICE_STATE_UNSPECIFIED: 'POOL_DEVICE_STATE_UNSPECIFIED',
  POOL_DEVICE_HEALTHY: 'POOL_DEVICE_HEALTHY',
  POOL_DEVICE_ADDING: 'POOL_DEVICE_ADDING',
  POOL_DEVICE_REBUILDING: 'POOL_DEVICE_REBUILDING',
  POOL_DEVICE_FAILED: 'POOL_DEVICE_FAILED',
} as const;

export type PoolDeviceState =
  | 'POOL_DEVICE_STATE_UNSPECIFIED'
  | 0
  | 'POOL_DEVICE_HEALTHY'
  | 1
  | 'POOL_DEVICE_ADDING'
  | 2
  | 'POOL_DEVICE_REBUILDING'
  | 3
  | 'POOL_DEVICE_FAILED'
  | 4

export type PoolDeviceState__Output = typeof PoolDeviceState[keyof typeof PoolDeviceState]
