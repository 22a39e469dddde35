// The agent's gRPC session with the control plane (strata.v1.AgentReporting/Session), the
// transport layer of the agent. One long-lived bidi stream at a time:
//   agent → Hello, Inventory, VolumeReport and PoolReport (whenever they changed and are not yet acked),
//           Heartbeat, CommandResult
//   control plane → Welcome, InventoryAck{sequence}, VolumeReportAck{sequence}, PoolReportAck{sequence}, Command
// Any control-plane instance can take the session. When a stream fails or ends, the agent dials
// the next endpoint of its list after a capped, jittered exponential backoff, and re-sends the
// latest inventory and volume report unless a control plane already acknowledged that sequence
// (the ack means it was persisted in etcd, so no other instance needs it again).
// Every call carries a fresh agent token in its metadata (docs/agent-auth.md); the metadata is
// read once per call, so on the live stream the agent sends TokenRenewal halfway through each
// token's life, and the stream outlives any one token.
import { EventEmitter } from 'node:events';
import * as grpc from '@grpc/grpc-js';
import { AGENT_TOKEN_METADATA_KEY, type SignedAgentToken } from '../../lib/agent-token.js';
import { loadStrataProto } from '../../lib/grpc/proto.js';
import type { Logger } from '../../lib/logger.js';
import type { LedState } from '../../lib/records.js';
import type { AgentMessage } from '../../proto/gen/strata/v1/AgentMessage.js';
import type { Command__Output } from '../../proto/gen/strata/v1/Command.js';
import type { ControlMessage__Output } from '../../proto/gen/strata/v1/ControlMessage.js';
import type { LedPattern, LedPattern__Output } from '../../proto/gen/strata/v1/LedPattern.js';
import type { Inventory } from '../../proto/gen/strata/v1/Inventory.js';
import { Backoff, sleep, type BackoffOptions } from '../../lib/retry.js';
import { toPoolReportMessage, type PoolReportSource } from '../datapath/pool/pool-report.js';
import { toVolumeReportMessage, type VolumeReportSource } from '../datapath/reconcile/volume-report.js';
import type { AgentIdentity } from '../identity/identity-store.js';
import type { AgentTokenSource } from './agent-token-issuer.js';
import type { InventorySnapshot, InventorySource } from '../inventory/inventory-service.js';
import type { ObservedLedState } from '../inventory/drive-led.js';
import type { CollectBundle__Output } from '../../proto/gen/strata/v1/CollectBundle.js';
import type { BundleSink } from '../diagnostics/bundle-collector.js';
import { BundleCancelled, BundleUpload } from './bundle-upload.js';

/** What the control plane may ask of the agent. */
export interface AgentCommandHandler {
  setLed(serial: string, state: LedState): Promise<void>;
  /** Collects a diagnostic bundle into the sink until done or the signal aborts (absent: refused). */
  collectBundle?(options: CollectBundle__Output, sink: BundleSink, signal: AbortSignal): Promise<void>;
}

export interface ControlPlaneSessionOptions {
  /** host:port, tried in this order (then round-robin). */
  readonly endpoints: readonly string[];
  readonly identity: AgentIdentity;
  readonly agentVersion: string;
  readonly agentInstance: string;
  /** The cluster UUID known to the agent ('' before bootstrap), read at each dial. */
  readonly clusterUUID?: () => string;
  readonly inventory: InventorySource;
  /** The data path's volume reports (absent when the agent runs without one). */
  readonly volumeReports?: VolumeReportSource;
  /** The node pools' reports (absent when the agent runs without a data path). */
  readonly poolReports?: PoolReportSource;
  readonly commands: AgentCommandHandler;
  /** Agent tokens, one per call and per renewal. */
  readonly tokens: AgentTokenSource;
  readonly heartbeatMs: number;
  readonly reconnectBackoff?: BackoffOptions;
  /** A dialed endpoint that does not answer Welcome within this time is given up for the next. */
  readonly welcomeTimeoutMs?: number;
  readonly logger: Logger;
  /** The channel's credentials, or how to get them before each dial (the agent reads the cluster CA from etcd); default: plain text (tests only). */
  readonly credentials?: grpc.ChannelCredentials | (() => Promise<grpc.ChannelCredentials>);
  readonly channelOptions?: grpc.ChannelOptions;
}

export interface SessionState {
  /** True between the Welcome of a stream and its end. */
  readonly connected: boolean;
  /** The endpoint of the current stream (being dialed or connected). */
  readonly endpoint: string | undefined;
  readonly controlPlaneInstance: string | undefined;
  /** Highest inventory sequence a control plane acknowledged (0: none). */
  readonly lastAckedSequence: number;
  /** Highest inventory sequence written to any stream (0: none). */
  readonly lastSentSequence: number;
  /** Highest volume-report sequence a control plane acknowledged (0: none). */
  readonly lastAckedVolumeReportSequence: number;
  /** Highest pool-report sequence a control plane acknowledged (0: none). */
  readonly lastAckedPoolReportSequence: number;
  /** Number of welcomed streams so far. */
  readonly sessions: number;
}

export interface SessionEvents {
  state: [SessionState];
  connected: [SessionState];
  disconnected: [SessionState & { reason: string }];
}

interface ActiveStream {
  readonly endpoint: string;
  readonly call: grpc.ClientDuplexStream<AgentMessage, ControlMessage__Output>;
  /** Inventory sequence last written on this stream. */
  sentSequence: number;
  /** Volume-report sequence last written on this stream. */
  sentVolumeReportSequence: number;
  /** Pool-report sequence last written on this stream. */
  sentPoolReportSequence: number;
  welcomed: boolean;
  /** Cleared by Welcome. */
  welcomeTimer: NodeJS.Timeout | undefined;
  /** The next TokenRenewal. */
  renewalTimer: NodeJS.Timeout | undefined;
}

/** A renewal that could not get a token is tried again this soon (the token has half its life left). */
const RENEWAL_RETRY_MS = 2000;

const ledStateOfPattern: Partial<Record<LedPattern__Output, LedState>> = {
  LED_OFF: 'off',
  LED_LOCATE: 'locate',
  LED_REBUILD: 'rebuild',
};
const patternOfLedState: Record<ObservedLedState, LedPattern> = {
  off: 'LED_OFF',
  locate: 'LED_LOCATE',
  rebuild: 'LED_REBUILD',
  unknown: 'LED_PATTERN_UNSPECIFIED',
};

export class ControlPlaneSession extends EventEmitter<SessionEvents> {
  private stream: ActiveStream | undefined;
  private connected = false;
  private endpoint: string | undefined;
  private controlPlaneInstance: string | undefined;
  private lastAckedSequence = 0;
  private lastSentSequence = 0;
  private lastAckedVolumeReportSequence = 0;
  private lastAckedPoolReportSequence = 0;
  private sessions = 0;
  private stopped = false;
  private loop: Promise<void> | undefined;
  private readonly abort = new AbortController();
  private readonly unsubscribers: (() => void)[] = [];
  private endCurrentStream: ((reason: string) => void) | undefined;
  /** Diagnostic bundles being sent, by bundle id (the command id). */
  private readonly uploads = new Map<string, BundleUpload>();

  constructor(private readonly options: ControlPlaneSessionOptions) {
    super();
    if (options.endpoints.length === 0) throw new Error('ControlPlaneSession needs at least one endpoint');
  }

  state(): SessionState {
    return {
      connected: this.connected,
      endpoint: this.endpoint,
      controlPlaneInstance: this.controlPlaneInstance,
      lastAckedSequence: this.lastAckedSequence,
      lastSentSequence: this.lastSentSequence,
      lastAckedVolumeReportSequence: this.lastAckedVolumeReportSequence,
      lastAckedPoolReportSequence: this.lastAckedPoolReportSequence,
      sessions: this.sessions,
    };
  }

  start(): void {
    if (this.loop || this.stopped) return;
    this.unsubscribers.push(this.options.inventory.onChange(() => this.sendInventoryIfUnacked()));
    if (this.options.volumeReports) this.unsubscribers.push(this.options.volumeReports.onChange(() => this.sendVolumeReportIfUnacked()));
    if (this.options.poolReports) this.unsubscribers.push(this.options.poolReports.onChange(() => this.sendPoolReportIfUnacked()));
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    for (const unsubscribe of this.unsubscribers.splice(0)) unsubscribe();
    this.abort.abort();
    this.endCurrentStream?.('agent stopping');
    await this.loop;
  }

  private async run(): Promise<void> {
    const backoff = new Backoff(this.options.reconnectBackoff ?? { initialMs: 200, maxMs: 5000 });
    const endpoints = this.options.endpoints;
    let failedDials = 0;
    for (let attempt = 0; !this.stopped; attempt++) {
      const endpoint = endpoints[attempt % endpoints.length] as string;
      const outcome = await this.dial(endpoint);
      if (this.stopped) break;
      if (outcome.welcomed) {
        backoff.reset();
        failedDials = 0;
      } else {
        failedDials += 1;
      }
      const delay = backoff.next();
      const next = endpoints[(attempt + 1) % endpoints.length];
      const details = { endpoint, reason: outcome.reason, nextEndpoint: next, retryInMs: delay, failedDials };
      // A lost session is news; every refused dial while no control plane is up is not.
      if (outcome.welcomed) this.options.logger.warn(details, 'control-plane session ended; failing over');
      else if (failedDials === 1 || failedDials % 20 === 0) this.options.logger.warn(details, 'no control-plane session yet; still dialing');
      else this.options.logger.debug(details, 'control-plane dial failed');
      await sleep(delay, this.abort.signal);
    }
  }

  /** Gets a token, then runs one stream to its end; never rejects. */
  private async dial(endpoint: string): Promise<{ welcomed: boolean; reason: string }> {
    let token: SignedAgentToken | undefined;
    // stop() must not wait for etcd's deadline when etcd is slow or gone.
    let onStop: () => void = () => undefined;
    const stopping = new Promise<undefined>((resolve) => {
      onStop = () => resolve(undefined);
      this.abort.signal.addEventListener('abort', onStop, { once: true });
    });
    try {
      const issuing = this.options.tokens.issue();
      issuing.catch(() => undefined);
      token = await Promise.race([issuing, stopping]);
    } catch (err) {
      return { welcomed: false, reason: `cannot issue an agent token: ${(err as Error).message}` };
    } finally {
      this.abort.signal.removeEventListener('abort', onStop);
    }
    if (this.stopped || !token) return { welcomed: false, reason: 'agent stopping' };
    let credentials: grpc.ChannelCredentials;
    try {
      const given = this.options.credentials;
      credentials = typeof given === 'function' ? await given() : (given ?? grpc.credentials.createInsecure());
    } catch (err) {
      return { welcomed: false, reason: `cannot set up TLS to the control plane: ${(err as Error).message}` };
    }
    if (this.stopped) return { welcomed: false, reason: 'agent stopping' };
    return this.runStream(endpoint, token, credentials);
  }

  private runStream(endpoint: string, token: SignedAgentToken, credentials: grpc.ChannelCredentials): Promise<{ welcomed: boolean; reason: string }> {
    return new Promise((resolve) => {
      const proto = loadStrataProto();
      const client = new proto.strata.v1.AgentReporting(
        endpoint,
        credentials,
        {
          // A dead peer behind a silent network (no RST) is noticed by pings, not by writes.
          'grpc.keepalive_time_ms': 15_000,
          'grpc.keepalive_timeout_ms': 5_000,
          ...this.options.channelOptions,
        },
      );
      const metadata = new grpc.Metadata();
      metadata.set(AGENT_TOKEN_METADATA_KEY, `Bearer ${token.token}`);
      const call = client.Session(metadata);
      const stream: ActiveStream = {
        endpoint, call, sentSequence: 0, sentVolumeReportSequence: 0, sentPoolReportSequence: 0, welcomed: false, welcomeTimer: undefined, renewalTimer: undefined,
      };
      this.stream = stream;
      this.endpoint = endpoint;
      this.emitState();

      let heartbeat: NodeJS.Timeout | undefined;
      let finished = false;
      const finish = (reason: string) => {
        if (finished) return;
        finished = true;
        clearTimeout(stream.welcomeTimer);
        clearTimeout(stream.renewalTimer);
        if (heartbeat) clearInterval(heartbeat);
        this.endCurrentStream = undefined;
        // A bundle goes to the control plane that asked for it: with its stream, it is over.
        for (const upload of this.uploads.values()) upload.cancel(`the control-plane session ended: ${reason}`);
        call.removeAllListeners('data');
        call.on('error', () => undefined); // cancel() reports CANCELLED; nobody needs it
        call.cancel();
        client.close();
        const wasConnected = this.connected;
        this.stream = undefined;
        this.endpoint = undefined;
        this.connected = false;
        this.controlPlaneInstance = undefined;
        if (wasConnected) this.emit('disconnected', { ...this.state(), reason });
        this.emitState();
        resolve({ welcomed: stream.welcomed, reason });
      };
      this.endCurrentStream = finish;
      // A dialed endpoint that accepts the stream but never answers is given up for the next.
      stream.welcomeTimer = setTimeout(
        () => finish(`no Welcome within ${this.options.welcomeTimeoutMs ?? 10_000} ms`),
        this.options.welcomeTimeoutMs ?? 10_000,
      );

      call.on('data', (message: ControlMessage__Output) => this.onMessage(stream, message));
      call.on('error', (err: grpc.ServiceError) => finish(`stream error: ${err.code} ${err.details || err.message}`));
      call.on('end', () => finish('stream ended by the control plane'));

      this.write(stream, {
        hello: {
          server_uuid: this.options.identity.serverUUID,
          node_uuids: [...this.options.identity.nodeUUIDs],
          agent_version: this.options.agentVersion,
          agent_instance: this.options.agentInstance,
          cluster_uuid: this.options.clusterUUID?.() ?? '',
        },
      });
      // Pipelined after Hello (gRPC keeps order): a control plane that rejects Hello ends the
      // stream and the inventory is simply re-sent to the next one.
      this.sendInventoryIfUnacked();
      this.sendVolumeReportIfUnacked();
      this.sendPoolReportIfUnacked();
      heartbeat = setInterval(
        () => this.write(stream, { heartbeat: { sent_at: new Date().toISOString() } }),
        this.options.heartbeatMs,
      );
      this.scheduleRenewal(stream, token.expiresAtMs);
    });
  }

  /** Renews the stream's token when half its remaining life is gone. */
  private scheduleRenewal(stream: ActiveStream, expiresAtMs: number): void {
    const delay = Math.max(1000, (expiresAtMs - Date.now()) / 2);
    stream.renewalTimer = setTimeout(() => void this.renewToken(stream, expiresAtMs), delay);
  }

  private async renewToken(stream: ActiveStream, currentExpiresAtMs: number): Promise<void> {
    let token: SignedAgentToken;
    try {
      token = await this.options.tokens.issue();
    } catch (err) {
      if (stream !== this.stream) return;
      // The control plane ends the stream when the current token expires; until then, retry.
      this.options.logger.warn({ err: (err as Error).message, expiresAt: new Date(currentExpiresAtMs).toISOString() }, 'cannot renew the agent token; retrying');
      stream.renewalTimer = setTimeout(() => void this.renewToken(stream, currentExpiresAtMs), RENEWAL_RETRY_MS);
      return;
    }
    if (stream !== this.stream) return;
    this.write(stream, { token_renewal: { token: token.token } });
    this.options.logger.debug({ endpoint: stream.endpoint, expiresAt: new Date(token.expiresAtMs).toISOString() }, 'agent token renewed');
    this.scheduleRenewal(stream, token.expiresAtMs);
  }

  private onMessage(stream: ActiveStream, message: ControlMessage__Output): void {
    if (stream !== this.stream) return;
    switch (message.body) {
      case 'welcome': {
        clearTimeout(stream.welcomeTimer);
        stream.welcomed = true;
        this.connected = true;
        this.sessions += 1;
        this.controlPlaneInstance = message.welcome?.control_plane_instance ?? '';
        this.options.logger.info(
          { endpoint: stream.endpoint, controlPlaneInstance: this.controlPlaneInstance, lastAckedSequence: this.lastAckedSequence },
          'control-plane session established',
        );
        this.emit('connected', this.state());
        this.emitState();
        return;
      }
      case 'inventory_ack': {
        const sequence = Number(message.inventory_ack?.sequence ?? 0);
        if (sequence > this.lastAckedSequence) {
          this.lastAckedSequence = sequence;
          this.options.logger.debug({ sequence }, 'inventory acknowledged');
          this.emitState();
        }
        return;
      }
      case 'volume_report_ack': {
        const sequence = Number(message.volume_report_ack?.sequence ?? 0);
        if (sequence > this.lastAckedVolumeReportSequence) {
          this.lastAckedVolumeReportSequence = sequence;
          this.options.volumeReports?.acknowledged(sequence);
          this.emitState();
        }
        return;
      }
      case 'pool_report_ack': {
        const sequence = Number(message.pool_report_ack?.sequence ?? 0);
        if (sequence > this.lastAckedPoolReportSequence) {
          this.lastAckedPoolReportSequence = sequence;
          this.options.poolReports?.acknowledged(sequence);
          this.emitState();
        }
        return;
      }
      case 'command':
        if (message.command?.action === 'collect_bundle' && message.command.collect_bundle) void this.runBundle(stream, message.command.command_id, message.command.collect_bundle);
        else if (message.command) void this.runCommand(stream, message.command);
        return;
      case 'bundle_credit':
        if (message.bundle_credit) this.uploads.get(message.bundle_credit.bundle_id)?.grant(message.bundle_credit.chunks);
        return;
      case 'bundle_cancel':
        if (message.bundle_cancel) this.uploads.get(message.bundle_cancel.bundle_id)?.cancel(message.bundle_cancel.reason || 'cancelled by the control plane');
        return;
      default:
        this.options.logger.warn({ body: message.body }, 'ignoring an unknown control message');
    }
  }

  private async runCommand(stream: ActiveStream, command: Command__Output): Promise<void> {
    const log = this.options.logger.child({ commandId: command.command_id, action: command.action });
    let ok = true;
    let error = '';
    try {
      if (command.action === 'set_led' && command.set_led) {
        const state = ledStateOfPattern[command.set_led.pattern];
        if (!state) throw new Error(`invalid LED pattern ${command.set_led.pattern}`);
        await this.options.commands.setLed(command.set_led.serial, state);
      } else {
        throw new Error(`unsupported command ${command.action ?? '(none)'}`);
      }
    } catch (err) {
      ok = false;
      error = (err as Error).message;
    }
    log[ok ? 'info' : 'warn']({ ok, error }, 'command done');
    // The result goes back on the stream the command came on; if it broke meanwhile, the
    // control plane that sent it is gone too and its successor decides whether to resend.
    if (this.stream === stream) this.write(stream, { command_result: { command_id: command.command_id, ok, error } });
  }

  /** Collects a bundle and streams it up this stream (BundleChunk, paced by BundleCredit); no CommandResult. */
  private async runBundle(stream: ActiveStream, bundleId: string, options: CollectBundle__Output): Promise<void> {
    const log = this.options.logger.child({ bundleId });
    const upload = new BundleUpload(bundleId, (chunk) => {
      if (this.stream !== stream) throw new BundleCancelled('the control-plane session ended');
      this.write(stream, { bundle_chunk: chunk });
    });
    this.uploads.set(bundleId, upload);
    const started = Date.now();
    log.info({ options }, 'diagnostic bundle: collecting');
    try {
      if (!this.options.commands.collectBundle) throw new Error('this agent does not collect diagnostic bundles');
      await this.options.commands.collectBundle(options, upload, upload.signal);
      if (upload.signal.aborted) throw upload.signal.reason as Error;
      upload.end('');
      log.info({ ms: Date.now() - started }, 'diagnostic bundle: sent');
    } catch (err) {
      if (upload.signal.aborted) {
        log.info({ reason: (upload.signal.reason as Error).message, ms: Date.now() - started }, 'diagnostic bundle: collection cancelled');
      } else {
        log.warn({ err: (err as Error).message }, 'diagnostic bundle: collection failed');
        try {
          upload.end((err as Error).message);
        } catch {
          // the stream is gone: so is the control plane that asked
        }
      }
    } finally {
      this.uploads.delete(bundleId);
    }
  }

  private sendInventoryIfUnacked(): void {
    const stream = this.stream;
    const snapshot = this.options.inventory.current();
    if (!stream || !snapshot) return;
    if (snapshot.sequence <= this.lastAckedSequence || snapshot.sequence <= stream.sentSequence) return;
    stream.sentSequence = snapshot.sequence;
    this.lastSentSequence = Math.max(this.lastSentSequence, snapshot.sequence);
    this.write(stream, { inventory: toInventoryMessage(snapshot) });
    this.options.logger.debug({ sequence: snapshot.sequence, endpoint: stream.endpoint }, 'inventory sent');
    this.emitState();
  }

  private sendVolumeReportIfUnacked(): void {
    const report = this.options.volumeReports?.current();
    if (!report) return;
    this.sendReportIfUnacked('sentVolumeReportSequence', report.sequence, this.lastAckedVolumeReportSequence, () => ({ volume_report: toVolumeReportMessage(report) }), {
      report: 'volume',
      volumes: report.volumes.length,
    });
  }

  private sendPoolReportIfUnacked(): void {
    const report = this.options.poolReports?.current();
    if (!report) return;
    this.sendReportIfUnacked('sentPoolReportSequence', report.sequence, this.lastAckedPoolReportSequence, () => ({ pool_report: toPoolReportMessage(report) }), {
      report: 'pool',
      pools: report.pools.length,
    });
  }

  /** Writes a report on the current stream unless a control plane acked it or this stream has it. */
  private sendReportIfUnacked(
    sent: 'sentVolumeReportSequence' | 'sentPoolReportSequence',
    sequence: number,
    acked: number,
    message: () => AgentMessage,
    details: { report: string } & Record<string, string | number>,
  ): void {
    const stream = this.stream;
    if (!stream || sequence <= acked || sequence <= stream[sent]) return;
    stream[sent] = sequence;
    this.write(stream, message());
    this.options.logger.debug({ sequence, ...details, endpoint: stream.endpoint }, `${details.report} report sent`);
  }

  private write(stream: ActiveStream, message: AgentMessage): void {
    try {
      stream.call.write(message);
    } catch (err) {
      if (stream === this.stream) this.endCurrentStream?.(`write failed: ${(err as Error).message}`);
    }
  }

  private emitState(): void {
    this.emit('state', this.state());
  }
}

export function toInventoryMessage(snapshot: InventorySnapshot): Inventory {
  return {
    sequence: String(snapshot.sequence),
    facts: {
      hostname: snapshot.facts.hostname,
      product_version: snapshot.facts.productVersion,
      tpm2_supported: snapshot.facts.tpm2Supported,
      cpu_cores: snapshot.facts.cpuCores,
      memory_bytes: snapshot.facts.memoryBytes,
      os: snapshot.facts.os,
      kernel: snapshot.facts.kernel,
      ...(snapshot.facts.kernelCapabilities
        ? {
            kernel_capabilities: {
              nvmet_in_band_auth: snapshot.facts.kernelCapabilities.nvmetInBandAuth,
              nvme_tcp_tls: snapshot.facts.kernelCapabilities.nvmeTcpTls,
              tlshd: snapshot.facts.kernelCapabilities.tlshd,
              ublk: snapshot.facts.kernelCapabilities.ublk,
              dm_vdo: snapshot.facts.kernelCapabilities.dmVdo,
            },
          }
        : {}),
    },
    devices: snapshot.devices.map((d) => ({
      serial: d.serial,
      model: d.model,
      size_bytes: d.sizeBytes,
      numa_node: d.numaNode,
      firmware: d.firmware,
      pci_address: d.pciAddress,
      controller: d.controller,
      holds_os: d.holdsOS,
      led: patternOfLedState[d.led],
    })),
    journal_device_serial: snapshot.journalDeviceSerial,
  };
}
