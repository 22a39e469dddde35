// Original file: proto/strata.proto

export const LedPattern = {
  LED_PATTERN_UNSPECIFIED: 'LED_PATTERN_UNSPECIFIED',
  LED_OFF: 'LED_OFF',
  LED_LOCATE: 'LED_LOCATE',
  LED_REBUILD: 'LED_REBUILD',
} as const;

export type LedPattern =
  | 'LED_PATTERN_UNSPECIFIED'
  | 0
  | 'LED_OFF'
  | 1
  | 'LED_LOCATE'
  | 2
  | 'LED_REBUILD'
  | 3

export type LedPattern__Output = typeof LedPattern[keyof typeof LedPattern]
