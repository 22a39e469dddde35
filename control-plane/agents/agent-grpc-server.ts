// Transport: the AgentReporting gRPC service. Each agent keeps one Session stream open. The call
// must carry a valid agent token (agent-authenticator.ts); the first message must be Hello, for
// the token's server and nodes. Inventory is persisted, then acknowledged by sequence. The token
// must be renewed on the stream (TokenRenewal) before it expires, or the session ends.
import * as grpc from '@grpc/grpc-js';
import type { AgentTokenClaims } from '../../lib/agent-token.js';
import { UUID_PATTERN } from '../../lib/contract/uuid.js';
import { errors, StrataError } from '../../lib/errors.js';
import { loadStrataProto } from '../../lib/grpc/proto.js';
import type { Logger } from '../../lib/logger.js';
import type { AgentMessage__Output } from '../../proto/gen/strata/v1/AgentMessage.js';
import type { ControlMessage } from '../../proto/gen/strata/v1/ControlMessage.js';
import type { AgentReportingHandlers } from '../../proto/gen/strata/v1/AgentReporting.js';
import type { AgentAuthenticator } from './agent-authenticator.js';
import type { AgentSessionHandle, AgentSessions } from './agent-sessions.js';
import type { InventoryService } from './inventory-service.js';
import type { PoolReportService } from './pool-report-service.js';
import type { VolumeReportService } from './volume-report-service.js';

export interface AgentGrpcServerDeps {
  readonly logger: Logger;
  readonly sessions: AgentSessions;
  /** Checks every call's agent token; there is no unauthenticated mode. */
  readonly authenticator: AgentAuthenticator;
  readonly inventory: InventoryService;
  readonly volumeReports: VolumeReportService;
  /** Node pool reports; without it they are not acknowledged (the agent keeps re-sending). */
  readonly poolReports?: PoolReportService;
  readonly instanceId: string;
  readonly clusterUUID: string;
}

export function createAgentGrpcServer(deps: AgentGrpcServerDeps): grpc.Server {
  const proto = loadStrataProto();
  const server = new grpc.Server({
    'grpc.keepalive_time_ms': 10_000,
    'grpc.keepalive_timeout_ms': 5_000,
    'grpc.keepalive_permit_without_calls': 1,
    'grpc.max_receive_message_length': 4 * 1024 * 1024,
  });
  const handlers: AgentReportingHandlers = {
    Session: (call) => {
      const peer = call.getPeer();
      let session: AgentSessionHandle | undefined;
      let agentNodes: readonly string[] = [];
      /** The token last verified on this call (set before any message is handled). */
      let claims: AgentTokenClaims | undefined;
      let tokenExpiry: NodeJS.Timeout | undefined;
      let ended = false;
      const write = (message: ControlMessage) => {
        if (!ended) call.write(message);
      };
      const end = (status?: { code: grpc.status; details: string }) => {
        if (ended) return;
        ended = true;
        clearTimeout(tokenExpiry);
        if (session) deps.sessions.closed(session);
        // grpc-js turns an 'error' emitted on a server stream into the call's final status.
        if (status) call.emit('error', Object.assign(new Error(status.details), status));
        else call.end();
      };
      const fail = (err: Error) => {
        if (ended) return;
        // A coded error (a refused token, a bad report) carries its gRPC status; anything else is internal.
        const code = err instanceof StrataError ? err.grpc : grpc.status.INTERNAL;
        if (code === grpc.status.UNAUTHENTICATED || code === grpc.status.PERMISSION_DENIED) {
          deps.authenticator.refused(peer, err as StrataError);
          return end({ code, details: err.message });
        }
        if (code === grpc.status.INTERNAL) deps.logger.error({ err, serverUUID: session?.serverUUID }, 'agent message failed');
        end({ code, details: `control plane could not process the message: ${err.message}` });
      };
      /** Accepts a verified token: the session lives until it expires, unless renewed. */
      const accept = (verified: AgentTokenClaims) => {
        claims = verified;
        clearTimeout(tokenExpiry);
        tokenExpiry = setTimeout(
          () => fail(errors.unauthenticated('agent token expired and was not renewed')),
          Math.max(0, deps.authenticator.deadlineOf(verified) - Date.now()),
        );
        tokenExpiry.unref();
      };
      // The token first, then messages one at a time, in order: an ack never overtakes its
      // write, and nothing is handled for a caller that has not proved who it is.
      let queue = deps.authenticator.authenticateCall(call.metadata).then(accept).catch(fail);
      call.on('data', (message: AgentMessage__Output) => {
        queue = queue.then(() => handle(message)).catch(fail);
      });
      call.on('end', () => end());
      call.on('cancelled', () => end());

      async function handle(message: AgentMessage__Output): Promise<void> {
        if (ended || !claims) return;
        if (!session) {
          const hello = message.hello;
          if (message.body !== 'hello' || !hello) {
            return end({ code: grpc.status.FAILED_PRECONDITION, details: 'the first message of a session must be Hello' });
          }
          if (!UUID_PATTERN.test(hello.server_uuid)) {
            return end({ code: grpc.status.INVALID_ARGUMENT, details: 'Hello.server_uuid must be a UUID' });
          }
          if (hello.cluster_uuid && hello.cluster_uuid !== deps.clusterUUID) {
            return end({ code: grpc.status.FAILED_PRECONDITION, details: `agent belongs to cluster ${hello.cluster_uuid}, not ${deps.clusterUUID}` });
          }
          await deps.authenticator.authorizeHello(claims, { serverUUID: hello.server_uuid, nodeUUIDs: hello.node_uuids });
          if (ended) return;
          deps.authenticator.accepted(peer);
          session = {
            serverUUID: hello.server_uuid,
            agentInstance: hello.agent_instance,
            send: (command) => write({ command }),
            control: (message) => write(message),
            close: (reason) => end({ code: grpc.status.ABORTED, details: reason }),
          };
          agentNodes = [...hello.node_uuids];
          deps.sessions.open(session);
          deps.logger.info({ serverUUID: hello.server_uuid, agentVersion: hello.agent_version }, 'agent session opened');
          write({ welcome: { control_plane_instance: deps.instanceId, cluster_uuid: deps.clusterUUID } });
          return;
        }
        switch (message.body) {
          case 'inventory':
            if (message.inventory) {
              await deps.inventory.record(session.serverUUID, session.agentInstance, message.inventory);
              // Acked even when stale-and-dropped: a newer report already covers it.
              write({ inventory_ack: { sequence: message.inventory.sequence } });
            }
            return;
          case 'volume_report':
            if (message.volume_report) {
              await deps.volumeReports.record(agentNodes, message.volume_report);
              write({ volume_report_ack: { sequence: message.volume_report.sequence } });
            }
            return;
          case 'pool_report':
            if (message.pool_report && deps.poolReports) {
              await deps.poolReports.record(session.serverUUID, session.agentInstance, agentNodes, message.pool_report);
              // Acked even when stale-and-dropped: a newer report already covers it.
              write({ pool_report_ack: { sequence: message.pool_report.sequence } });
            }
            return;
          case 'bundle_chunk':
            if (message.bundle_chunk) deps.sessions.bundleChunk(session.serverUUID, message.bundle_chunk);
            return;
          case 'command_result':
            if (message.command_result) deps.sessions.commandResult(message.command_result);
            return;
          case 'token_renewal': {
            const renewed = await deps.authenticator.verify(message.token_renewal?.token ?? '');
            deps.authenticator.authorizeRenewal({ serverUUID: session.serverUUID, nodeUUIDs: agentNodes }, renewed);
            if (!ended) accept(renewed);
            return;
          }
          case 'heartbeat':
            return;
          default:
            return end({ code: grpc.status.INVALID_ARGUMENT, details: 'unexpected message in session' });
        }
      }
    },
  };
  server.addService(proto.strata.v1.AgentReporting.service, handlers);
  return server;
}

/** Binds the agents' service: over TLS with the control plane's certificate (plain text only in tests that pass none). */
export async function bindGrpcServer(server: grpc.Server, host: string, port: number, credentials: grpc.ServerCredentials = grpc.ServerCredentials.createInsecure()): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host}:${port}`, credentials, (err, bound) => (err ? reject(err) : resolve(bound)));
  });
}
