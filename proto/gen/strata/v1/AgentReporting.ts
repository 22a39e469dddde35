// Original file: proto/strata.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { AgentMessage as _strata_v1_AgentMessage, AgentMessage__Output as _strata_v1_AgentMessage__Output } from '../../strata/v1/AgentMessage.js';
import type { ControlMessage as _strata_v1_ControlMessage, ControlMessage__Output as _strata_v1_ControlMessage__Output } from '../../strata/v1/ControlMessage.js';

export interface AgentReportingClient extends grpc.Client {
  Session(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_strata_v1_AgentMessage, _strata_v1_ControlMessage__Output>;
  Session(options?: grpc.CallOptions): grpc.ClientDuplexStream<_strata_v1_AgentMessage, _strata_v1_ControlMessage__Output>;
  session(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_strata_v1_AgentMessage, _strata_v1_ControlMessage__Output>;
  session(options?: grpc.CallOptions): grpc.ClientDuplexStream<_strata_v1_AgentMessage, _strata_v1_ControlMessage__Output>;
  
}

export interface AgentReportingHandlers extends grpc.UntypedServiceImplementation {
  Session: grpc.handleBidiStreamingCall<_strata_v1_AgentMessage__Output, _strata_v1_ControlMessage>;
  
}

export interface AgentReportingDefinition extends grpc.ServiceDefinition {
  Session: MethodDefinition<_strata_v1_AgentMessage, _strata_v1_ControlMessage, _strata_v1_AgentMessage__Output, _strata_v1_ControlMessage__Output>
}
