// Original file: proto/strata.proto

import type { Hello as _strata_v1_Hello, Hello__Output as _strata_v1_Hello__Output } from '../../strata/v1/Hello.js';
import type { Inventory as _strata_v1_Inventory, Inventory__Output as _strata_v1_Inventory__Output } from '../../strata/v1/Inventory.js';
import type { CommandResult as _strata_v1_CommandResult, CommandResult__Output as _strata_v1_CommandResult__Output } from '../../strata/v1/CommandResult.js';
import type { Heartbeat as _strata_v1_Heartbeat, Heartbeat__Output as _strata_v1_Heartbeat__Output } from '../../strata/v1/Heartbeat.js';
import type { VolumeReport as _strata_v1_VolumeReport, VolumeReport__Output as _strata_v1_VolumeReport__Output } from '../../strata/v1/VolumeReport.js';
import type { PoolReport as _strata_v1_PoolReport, PoolReport__Output as _strata_v1_PoolReport__Output } from '../../strata/v1/PoolReport.js';
import type { TokenRenewal as _strata_v1_TokenRenewal, TokenRenewal__Output as _strata_v1_TokenRenewal__Output } from '../../strata/v1/TokenRenewal.js';
import type { BundleChunk as _strata_v1_BundleChunk, BundleChunk__Output as _strata_v1_BundleChunk__Output } from '../../strata/v1/BundleChunk.js';

export interface AgentMessage {
  'hello'?: (_strata_v1_Hello | null);
  'inventory'?: (_strata_v1_Inventory | null);
  'command_result'?: (_strata_v1_CommandResult | null);
  'heartbeat'?: (_strata_v1_Heartbeat | null);
  'volume_report'?: (_strata_v1_VolumeReport | null);
  'pool_report'?: (_strata_v1_PoolReport | null);
  'token_renewal'?: (_strata_v1_TokenRenewal | null);
  'bundle_chunk'?: (_strata_v1_BundleChunk | null);
  'body'?: "hello"|"inventory"|"command_result"|"heartbeat"|"volume_report"|"pool_report"|"token_renewal"|"bundle_chunk";
}

export interface AgentMessage__Output {
  'hello'?: (_strata_v1_Hello__Output | null);
  'inventory'?: (_strata_v1_Inventory__Output | null);
  'command_result'?: (_strata_v1_CommandResult__Output | null);
  'heartbeat'?: (_strata_v1_Heartbeat__Output | null);
  'volume_report'?: (_strata_v1_VolumeReport__Output | null);
  'pool_report'?: (_strata_v1_PoolReport__Output | null);
  'token_renewal'?: (_strata_v1_TokenRenewal__Output | null);
  'bundle_chunk'?: (_strata_v1_BundleChunk__Output | null);
  'body'?: "hello"|"inventory"|"command_result"|"heartbeat"|"volume_report"|"pool_report"|"token_renewal"|"bundle_chunk";
}
