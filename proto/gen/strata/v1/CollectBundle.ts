// Original file: proto/strata.proto


export interface CollectBundle {
  'days_of_logs'?: (number);
  'skip_statistics'?: (boolean);
  'statistics_cycles'?: (number);
  'statistics_interval_seconds'?: (number);
  'capture_cpu_and_tcpdump'?: (boolean);
  'services_only'?: (boolean);
  'skip_var_log'?: (boolean);
  'io_nice'?: (boolean);
}

export interface CollectBundle__Output {
  'days_of_logs': (number);
  'skip_statistics': (boolean);
  'statistics_cycles': (number);
  'statistics_interval_seconds': (number);
  'capture_cpu_and_tcpdump': (boolean);
  'services_only': (boolean);
  'skip_var_log': (boolean);
  'io_nice': (boolean);
}
