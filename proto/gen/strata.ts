import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { AgentMessage as _strata_v1_AgentMessage, AgentMessage__Output as _strata_v1_AgentMessage__Output } from './strata/v1/AgentMessage.js';
import type { AgentReportingClient as _strata_v1_AgentReportingClient, AgentReportingDefinition as _strata_v1_AgentReportingDefinition } from './strata/v1/AgentReporting.js';
import type { BundleCancel as _strata_v1_BundleCancel, BundleCancel__Output as _strata_v1_BundleCancel__Output } from './strata/v1/BundleCancel.js';
import type { BundleChunk as _strata_v1_BundleChunk, BundleChunk__Output as _strata_v1_BundleChunk__Output } from './strata/v1/BundleChunk.js';
import type { BundleCredit as _strata_v1_BundleCredit, BundleCredit__Output as _strata_v1_BundleCredit__Output } from './strata/v1/BundleCredit.js';
import type { BundleEnd as _strata_v1_BundleEnd, BundleEnd__Output as _strata_v1_BundleEnd__Output } from './strata/v1/BundleEnd.js';
import type { BundleEntry as _strata_v1_BundleEntry, BundleEntry__Output as _strata_v1_BundleEntry__Output } from './strata/v1/BundleEntry.js';
import type { CollectBundle as _strata_v1_CollectBundle, CollectBundle__Output as _strata_v1_CollectBundle__Output } from './strata/v1/CollectBundle.js';
import type { Command as _strata_v1_Command, Command__Output as _strata_v1_Command__Output } from './strata/v1/Command.js';
import type { CommandResult as _strata_v1_CommandResult, CommandResult__Output as _strata_v1_CommandResult__Output } from './strata/v1/CommandResult.js';
import type { ConnectedHost as _strata_v1_ConnectedHost, ConnectedHost__Output as _strata_v1_ConnectedHost__Output } from './strata/v1/ConnectedHost.js';
import type { ControlMessage as _strata_v1_ControlMessage, ControlMessage__Output as _strata_v1_ControlMessage__Output } from './strata/v1/ControlMessage.js';
import type { ErrorCount as _strata_v1_ErrorCount, ErrorCount__Output as _strata_v1_ErrorCount__Output } from './strata/v1/ErrorCount.js';
import type { Heartbeat as _strata_v1_Heartbeat, Heartbeat__Output as _strata_v1_Heartbeat__Output } from './strata/v1/Heartbeat.js';
import type { Hello as _strata_v1_Hello, Hello__Output as _strata_v1_Hello__Output } from './strata/v1/Hello.js';
import type { Inventory as _strata_v1_Inventory, Inventory__Output as _strata_v1_Inventory__Output } from './strata/v1/Inventory.js';
import type { InventoryAck as _strata_v1_InventoryAck, InventoryAck__Output as _strata_v1_InventoryAck__Output } from './strata/v1/InventoryAck.js';
import type { KernelCapabilities as _strata_v1_KernelCapabilities, KernelCapabilities__Output as _strata_v1_KernelCapabilities__Output } from './strata/v1/KernelCapabilities.js';
import type { NodePool as _strata_v1_NodePool, NodePool__Output as _strata_v1_NodePool__Output } from './strata/v1/NodePool.js';
import type { NvmeDevice as _strata_v1_NvmeDevice, NvmeDevice__Output as _strata_v1_NvmeDevice__Output } from './strata/v1/NvmeDevice.js';
import type { PoolDevice as _strata_v1_PoolDevice, PoolDevice__Output as _strata_v1_PoolDevice__Output } from './strata/v1/PoolDevice.js';
import type { PoolReport as _strata_v1_PoolReport, PoolReport__Output as _strata_v1_PoolReport__Output } from './strata/v1/PoolReport.js';
import type { PoolReportAck as _strata_v1_PoolReportAck, PoolReportAck__Output as _strata_v1_PoolReportAck__Output } from './strata/v1/PoolReportAck.js';
import type { QosStatus as _strata_v1_QosStatus, QosStatus__Output as _strata_v1_QosStatus__Output } from './strata/v1/QosStatus.js';
import type { ReplicaLegStatus as _strata_v1_ReplicaLegStatus, ReplicaLegStatus__Output as _strata_v1_ReplicaLegStatus__Output } from './strata/v1/ReplicaLegStatus.js';
import type { ServerFacts as _strata_v1_ServerFacts, ServerFacts__Output as _strata_v1_ServerFacts__Output } from './strata/v1/ServerFacts.js';
import type { SetLed as _strata_v1_SetLed, SetLed__Output as _strata_v1_SetLed__Output } from './strata/v1/SetLed.js';
import type { SnapshotStatus as _strata_v1_SnapshotStatus, SnapshotStatus__Output as _strata_v1_SnapshotStatus__Output } from './strata/v1/SnapshotStatus.js';
import type { TokenRenewal as _strata_v1_TokenRenewal, TokenRenewal__Output as _strata_v1_TokenRenewal__Output } from './strata/v1/TokenRenewal.js';
import type { VolumeReport as _strata_v1_VolumeReport, VolumeReport__Output as _strata_v1_VolumeReport__Output } from './strata/v1/VolumeReport.js';
import type { VolumeReportAck as _strata_v1_VolumeReportAck, VolumeReportAck__Output as _strata_v1_VolumeReportAck__Output } from './strata/v1/VolumeReportAck.js';
import type { VolumeStatus as _strata_v1_VolumeStatus, VolumeStatus__Output as _strata_v1_VolumeStatus__Output } from './strata/v1/VolumeStatus.js';
import type { Welcome as _strata_v1_Welcome, Welcome__Output as _strata_v1_Welcome__Output } from './strata/v1/Welcome.js';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  strata: {
    v1: {
      AgentMessage: MessageTypeDefinition<_strata_v1_AgentMessage, _strata_v1_AgentMessage__Output>
      AgentReporting: SubtypeConstructor<typeof grpc.Client, _strata_v1_AgentReportingClient> & { service: _strata_v1_AgentReportingDefinition }
      BundleCancel: MessageTypeDefinition<_strata_v1_BundleCancel, _strata_v1_BundleCancel__Output>
      BundleChunk: MessageTypeDefinition<_strata_v1_BundleChunk, _strata_v1_BundleChunk__Output>
      BundleCredit: MessageTypeDefinition<_strata_v1_BundleCredit, _strata_v1_BundleCredit__Output>
      BundleEnd: MessageTypeDefinition<_strata_v1_BundleEnd, _strata_v1_BundleEnd__Output>
      BundleEntry: MessageTypeDefinition<_strata_v1_BundleEntry, _strata_v1_BundleEntry__Output>
      CollectBundle: MessageTypeDefinition<_strata_v1_CollectBundle, _strata_v1_CollectBundle__Output>
      Command: MessageTypeDefinition<_strata_v1_Command, _strata_v1_Command__Output>
      CommandResult: MessageTypeDefinition<_strata_v1_CommandResult, _strata_v1_CommandResult__Output>
      ConnectedHost: MessageTypeDefinition<_strata_v1_ConnectedHost, _strata_v1_ConnectedHost__Output>
      ControlMessage: MessageTypeDefinition<_strata_v1_ControlMessage, _strata_v1_ControlMessage__Output>
      ErrorCount: MessageTypeDefinition<_strata_v1_ErrorCount, _strata_v1_ErrorCount__Output>
      Heartbeat: MessageTypeDefinition<_strata_v1_Heartbeat, _strata_v1_Heartbeat__Output>
      Hello: MessageTypeDefinition<_strata_v1_Hello, _strata_v1_Hello__Output>
      Inventory: MessageTypeDefinition<_strata_v1_Inventory, _strata_v1_Inventory__Output>
      InventoryAck: MessageTypeDefinition<_strata_v1_InventoryAck, _strata_v1_InventoryAck__Output>
      KernelCapabilities: MessageTypeDefinition<_strata_v1_KernelCapabilities, _strata_v1_KernelCapabilities__Output>
      LedPattern: EnumTypeDefinition
      NodePool: MessageTypeDefinition<_strata_v1_NodePool, _strata_v1_NodePool__Output>
      NvmeDevice: MessageTypeDefinition<_strata_v1_NvmeDevice, _strata_v1_NvmeDevice__Output>
      PoolDevice: MessageTypeDefinition<_strata_v1_PoolDevice, _strata_v1_PoolDevice__Output>
      PoolDeviceState: EnumTypeDefinition
      PoolReport: MessageTypeDefinition<_strata_v1_PoolReport, _strata_v1_PoolReport__Output>
      PoolReportAck: MessageTypeDefinition<_strata_v1_PoolReportAck, _strata_v1_PoolReportAck__Output>
      PoolState: EnumTypeDefinition
      QosStatus: MessageTypeDefinition<_strata_v1_QosStatus, _strata_v1_QosStatus__Output>
      ReplicaLegStatus: MessageTypeDefinition<_strata_v1_ReplicaLegStatus, _strata_v1_ReplicaLegStatus__Output>
      ServerFacts: MessageTypeDefinition<_strata_v1_ServerFacts, _strata_v1_ServerFacts__Output>
      SetLed: MessageTypeDefinition<_strata_v1_SetLed, _strata_v1_SetLed__Output>
      SnapshotStatus: MessageTypeDefinition<_strata_v1_SnapshotStatus, _strata_v1_SnapshotStatus__Output>
      TokenRenewal: MessageTypeDefinition<_strata_v1_TokenRenewal, _strata_v1_TokenRenewal__Output>
      VolumeReport: MessageTypeDefinition<_strata_v1_VolumeReport, _strata_v1_VolumeReport__Output>
      VolumeReportAck: MessageTypeDefinition<_strata_v1_VolumeReportAck, _strata_v1_VolumeReportAck__Output>
      VolumeServeState: EnumTypeDefinition
      VolumeStatus: MessageTypeDefinition<_strata_v1_VolumeStatus, _strata_v1_VolumeStatus__Output>
      Welcome: MessageTypeDefinition<_strata_v1_Welcome, _strata_v1_Welcome__Output>
    }
  }
}

