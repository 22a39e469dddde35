// Original file: proto/strata.proto


export interface KernelCapabilities {
  'nvmet_in_band_auth'?: (boolean);
  'nvme_tcp_tls'?: (boolean);
  'ublk'?: (boolean);
  'dm_vdo'?: (boolean);
  'tlshd'?: (boolean);
}

export interface KernelCapabilities__Output {
  'nvmet_in_band_auth': (boolean);
  'nvme_tcp_tls': (boolean);
  'ublk': (boolean);
  'dm_vdo': (boolean);
  'tlshd': (boolean);
}
