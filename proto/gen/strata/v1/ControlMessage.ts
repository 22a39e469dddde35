// Original file: proto/strata.proto

import type { Welcome as _strata_v1_Welcome, Welcome__Output as _strata_v1_Welcome__Output } from '../../strata/v1/Welcome.js';
import type { InventoryAck as _strata_v1_InventoryAck, InventoryAck__Output as _strata_v1_InventoryAck__Output } from '../../strata/v1/InventoryAck.js';
import type { Command as _strata_v1_Command, Command__Output as _strata_v1_Command__Output } from '../../strata/v1/Command.js';
import type { VolumeReportAck as _strata_v1_VolumeReportAck, VolumeReportAck__Output as _strata_v1_VolumeReportAck__Output } from '../../strata/v1/VolumeReportAck.js';
import type { PoolReportAck as _strata_v1_PoolReportAck, PoolReportAck__Output as _strata_v1_PoolReportAck__Output } from '../../strata/v1/PoolReportAck.js';
import type { BundleCredit as _strata_v1_BundleCredit, BundleCredit__Output as _strata_v1_BundleCredit__Output } from '../../strata/v1/BundleCredit.js';
import type { BundleCancel as _strata_v1_BundleCancel, BundleCancel__Output as _strata_v1_BundleCancel__Output } from '../../strata/v1/BundleCancel.js';

export interface ControlMessage {
  'welcome'?: (_strata_v1_Welcome | null);
  'inventory_ack'?: (_strata_v1_InventoryAck | null);
  'command'?: (_strata_v1_Command | null);
  'volume_report_ack'?: (_strata_v1_VolumeReportAck | null);
  'pool_report_ack'?: (_strata_v1_PoolReportAck | null);
  'bundle_credit'?: (_strata_v1_BundleCredit | null);
  'bundle_cancel'?: (_strata_v1_BundleCancel | null);
  'body'?: "welcome"|"inventory_ack"|"command"|"volume_report_ack"|"pool_report_ack"|"bundle_credit"|"bundle_cancel";
}

export interface ControlMessage__Output {
  'welcome'?: (_strata_v1_Welcome__Output | null);
  'inventory_ack'?: (_strata_v1_InventoryAck__Output | null);
  'command'?: (_strata_v1_Command__Output | null);
  'volume_report_ack'?: (_strata_v1_VolumeReportAck__Output | null);
  'pool_report_ack'?: (_strata_v1_PoolReportAck__Output | null);
  'bundle_credit'?: (_strata_v1_BundleCredit__Output | null);
  'bundle_cancel'?: (_strata_v1_BundleCancel__Output | null);
  'body'?: "welcome"|"inventory_ack"|"command"|"volume_report_ack"|"pool_report_ack"|"bundle_credit"|"bundle_cancel";
}
