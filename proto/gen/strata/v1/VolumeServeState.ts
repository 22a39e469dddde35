// Original file: proto/strata.proto

export const VolumeServeState = {
  VOLUME_SERVE_STATE_UNSPECIFIED: 'VOLUME_SERVE_STATE_UNSPECIFIED',
  VOLUME_SERVED: 'VOLUME_SERVED',
  VOLUME_FAILED: 'VOLUME_FAILED',
  VOLUME_ABSENT: 'VOLUME_ABSENT',
} as const;

export type VolumeServeState =
  | 'VOLUME_SERVE_STATE_UNSPECIFIED'
  | 0
  | 'VOLUME_SERVED'
  | 1
  | 'VOLUME_FAILED'
  | 2
  | 'VOLUME_ABSENT'
  | 3

export type VolumeServeState__Output = typeof VolumeServeState[keyof typeof VolumeServeState]
