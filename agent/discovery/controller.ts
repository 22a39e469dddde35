// One host connection to the discovery controller: the NVMe/TCP connection setup (ICReq/ICResp),
// the Fabrics Connect that creates the controller, and the admin commands a discovery controller
// serves. Commands are answered in order as they arrive; only Asynchronous Event Requests wait,
// until the host's log page changes.
//
// Failure handling: a malformed PDU (framing, lengths, sequence) is a fatal transport error,
// answered with a C2HTermReq and a closed connection; a bad command gets an NVMe error status
// and the connection lives on. Timers bound every wait on the host: the connection setup, the
// keep-alive timeout from Connect (or Set Features), and an idle limit when keep-alive is off.
import type { Socket } from 'node:net';
import type { Logger } from '../../lib/logger.js';
import type { HostLogHandle, HostLogs } from './host-logs.js';
import type { PresentedHosts } from './presented-hosts.js';
import {
  AdminOpcode,
  AEC_DISCOVERY_LOG_CHANGE,
  AEN_DISCOVERY_LOG_CHANGE,
  AER_LIMIT_0BASED,
  capabilities,
  CC_ENABLE,
  CC_SHUTDOWN_MASK,
  CONNECT_DATA_BYTES,
  ConnectOffset,
  CSTS_READY,
  CSTS_SHUTDOWN_COMPLETE,
  decodeConnect,
  decodeConnectData,
  DISCOVERY_NQN,
  encodeCqe,
  encodeIdentifyController,
  FabricsType,
  FeatureId,
  IDENTIFY_BYTES,
  IdentifyCns,
  invalidParameter,
  isNqn,
  LogPageId,
  MAX_QUEUE_ENTRIES_0BASED,
  MAX_TRANSFER_BYTES,
  NVME_VERSION,
  Property,
  SGL_IN_CAPSULE_DATA,
  SGL_TRANSPORT_DATA_BLOCK,
  Sqe,
  Status,
  type NvmeStatus,
} from './nvme.js';
import {
  decodeCapsuleCmd,
  decodeICReq,
  decodeTermReq,
  encodeC2HData,
  encodeCapsuleResp,
  encodeICResp,
  encodeTermReq,
  HeaderField,
  PduError,
  PduFramer,
  PduType,
  TermReqFes,
  type Pdu,
} from './pdu.js';

export interface ControllerLimits {
  /** Largest PDU a host may send (a Connect capsule is 1096 bytes). */
  readonly maxPduBytes: number;
  /** ICReq and Connect must arrive within this time of the TCP connect. */
  readonly setupTimeoutMs: number;
  /** With keep-alive off (KATO 0), a connection without any command for this long is closed. */
  readonly idleTimeoutMs: number;
  /** Replies the host has not read yet; past this the host is not reading and is dropped. */
  readonly maxUnreadBytes: number;
}

export const DEFAULT_LIMITS: ControllerLimits = {
  maxPduBytes: 72 + 8192,
  setupTimeoutMs: 10_000,
  // NVMe over Fabrics: a discovery controller without keep-alive may end the association after
  // two minutes without commands.
  idleTimeoutMs: 120_000,
  maxUnreadBytes: 4 * 1024 * 1024,
};

/** What a connection needs from the server around it. */
export interface ControllerContext {
  readonly logs: HostLogs;
  readonly limits: ControllerLimits;
  readonly identity: { readonly serial: string; readonly model: string; readonly firmware: string };
  /** A controller ID unique among this server's live controllers; undefined when none is free. */
  allocateCntlid(): number | undefined;
  releaseCntlid(cntlid: number): void;
  /** Told each host NQN a host presented, with the address it came from (names connected hosts). */
  readonly presented?: PresentedHosts;
  readonly logger: Logger;
}

/** H2C data never applies here (no R2T is ever sent), so ICResp's MAXH2CDATA is the minimum. */
const MAX_H2C_DATA = 4096;
/** C2HData PDUs carry at most this much data each. */
const C2H_CHUNK_BYTES = 64 * 1024;

type Phase = 'awaiting-icreq' | 'awaiting-connect' | 'connected' | 'closed';

export class DiscoveryConnection {
  private phase: Phase = 'awaiting-icreq';
  private readonly framer: PduFramer;
  /** C2H data alignment from the host's ICReq (HPDA). */
  private dataAlignment = 4;
  private sqhd = 0;
  private sqsize = MAX_QUEUE_ENTRIES_0BASED;
  private cntlid: number | undefined;
  private hostNQN = '';
  private subNQN = '';
  private katoMs = 0;
  private cc = 0;
  private csts = 0;
  private aec = 0;
  private readonly pendingAers: number[] = [];
  /** The log changed since the host last heard of it. */
  private eventQueued = false;
  /** An event was reported and the host has not read the log since (events of a type are masked). */
  private eventMasked = false;
  private log: HostLogHandle | undefined;
  private setupTimer: NodeJS.Timeout | undefined;
  private activityTimer: NodeJS.Timeout | undefined;
  private closeListener: (() => void) | undefined;
  private readonly logger: Logger;

  constructor(
    private readonly socket: Socket,
    private readonly ctx: ControllerContext,
  ) {
    this.logger = ctx.logger.child({ peer: `${socket.remoteAddress}:${socket.remotePort}` });
    this.framer = new PduFramer(ctx.limits.maxPduBytes);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('error', (err) => this.logger.debug({ err: err.message }, 'discovery connection error'));
    socket.on('close', () => this.close('the host closed the connection'));
    this.setupTimer = setTimeout(() => this.close('no ICReq and Connect in time'), ctx.limits.setupTimeoutMs);
  }

  /** Called once, when the connection is gone (for the server's bookkeeping). */
  onClose(listener: () => void): void {
    this.closeListener = listener;
  }

  get closed(): boolean {
    return this.phase === 'closed';
  }

  /**
   * Ends the connection, releasing everything it holds. Idempotent. With `lastWords`, those bytes
   * are flushed first (a TermReq) and the socket is destroyed a second later at the latest.
   */
  close(reason: string, lastWords?: Buffer): void {
    if (this.phase === 'closed') return;
    this.phase = 'closed';
    clearTimeout(this.setupTimer);
    clearTimeout(this.activityTimer);
    this.log?.detach();
    this.log = undefined;
    if (this.cntlid !== undefined) this.ctx.releaseCntlid(this.cntlid);
    this.pendingAers.length = 0;
    const socket = this.socket;
    if (lastWords && socket.writable) {
      socket.end(lastWords);
      const timer = setTimeout(() => socket.destroy(), 1000);
      socket.once('close', () => clearTimeout(timer));
    } else if (!socket.destroyed) {
      socket.destroy();
    }
    this.logger.debug({ reason, hostNQN: this.hostNQN || undefined, cntlid: this.cntlid }, 'discovery connection closed');
    this.closeListener?.();
  }

  // --- PDUs ------------------------------------------------------------------------------------

  private receive(chunk: Buffer): void {
    if (this.phase === 'closed') return;
    try {
      for (const pdu of this.framer.push(chunk)) {
        this.handlePdu(pdu);
        if (this.closed) return;
      }
    } catch (err) {
      if (err instanceof PduError) return this.terminate(err);
      // A bug must cost one connection, never the agent.
      this.logger.error({ err }, 'discovery connection failed');
      this.close('internal error');
    }
  }

  private handlePdu(pdu: Pdu): void {
    const { type } = pdu.header;
    if (type === PduType.H2CTermReq) {
      const term = decodeTermReq(pdu);
      return this.close(`the host terminated the connection (FES ${term.fes}, FEI ${term.fei})`);
    }
    if (this.phase === 'awaiting-icreq') {
      if (type !== PduType.ICReq) throw new PduError(TermReqFes.PduSequenceError, 0, 'the first PDU must be an ICReq', pdu.bytes);
      return this.initializeConnection(pdu);
    }
    if (type === PduType.CapsuleCmd) return this.command(pdu);
    // A second ICReq, or H2CData without an R2T (none is ever sent).
    throw new PduError(TermReqFes.PduSequenceError, 0, `unexpected PDU type ${type}`, pdu.bytes);
  }

  private initializeConnection(pdu: Pdu): void {
    if (pdu.header.plen !== pdu.header.hlen) throw new PduError(TermReqFes.InvalidHeaderField, HeaderField.plen, 'ICReq plen must be 128', pdu.bytes);
    const icreq = decodeICReq(pdu);
    if (icreq.pfv !== 0) throw new PduError(TermReqFes.UnsupportedParameter, 8, `PDU format version ${icreq.pfv} is not supported`, pdu.bytes);
    if (icreq.hpda > 31) throw new PduError(TermReqFes.InvalidHeaderField, 10, `HPDA ${icreq.hpda} is out of range`, pdu.bytes);
    this.dataAlignment = (icreq.hpda + 1) * 4;
    if (icreq.digest !== 0) {
      // Digests are not offered: the ICResp says so and the host decides (Linux refuses to go on
      // with "header/data digest mismatch"; no data flows without the digests it asked for).
      this.logger.info({ digest: icreq.digest }, 'the host asked for digests; answering without (not supported)');
    }
    this.phase = 'awaiting-connect';
    this.send(encodeICResp({ pfv: 0, cpda: 0, digest: 0, maxh2cdata: MAX_H2C_DATA }));
  }

  private command(pdu: Pdu): void {
    const { sqe: bytes, data } = decodeCapsuleCmd(pdu);
    const sqe = new Sqe(bytes);
    this.sqhd = (this.sqhd + 1) % (this.sqsize + 1);
    this.armActivityTimer();
    if (sqe.opcode === AdminOpcode.Fabrics) return this.fabrics(sqe, data);
    if (this.phase !== 'connected' || !(this.cc & CC_ENABLE)) return this.respond(sqe.cid, Status.CommandSequenceError);
    switch (sqe.opcode) {
      case AdminOpcode.Identify:
        return this.identify(sqe);
      case AdminOpcode.GetLogPage:
        return this.getLogPage(sqe);
      case AdminOpcode.SetFeatures:
        return this.setFeatures(sqe);
      case AdminOpcode.GetFeatures:
        return this.getFeatures(sqe);
      case AdminOpcode.AsyncEventRequest:
        return this.asyncEventRequest(sqe);
      case AdminOpcode.KeepAlive:
        return this.respond(sqe.cid, Status.Success);
      default:
        return this.respond(sqe.cid, Status.InvalidOpcode);
    }
  }

  // --- Fabrics commands ------------------------------------------------------------------------

  private fabrics(sqe: Sqe, data: Buffer): void {
    if (sqe.fctype === FabricsType.Connect) return this.connect(sqe, data);
    if (this.phase !== 'connected') return this.respond(sqe.cid, Status.CommandSequenceError);
    if (sqe.fctype === FabricsType.PropertyGet) return this.propertyGet(sqe);
    if (sqe.fctype === FabricsType.PropertySet) return this.propertySet(sqe);
    this.respond(sqe.cid, Status.InvalidOpcode);
  }

  private connect(sqe: Sqe, data: Buffer): void {
    if (this.phase !== 'awaiting-connect') return this.respond(sqe.cid, Status.CommandSequenceError);
    const invalid = (inData: boolean, offset: number) => this.respond(sqe.cid, Status.ConnectInvalidParameters, invalidParameter(inData, offset));
    const connect = decodeConnect(sqe);
    if (connect.recfmt !== 0) return this.respond(sqe.cid, Status.ConnectIncompatibleFormat);
    // A discovery controller has only the admin queue.
    if (connect.qid !== 0) return invalid(false, ConnectOffset.qid);
    if (connect.sqsize < 1 || connect.sqsize > MAX_QUEUE_ENTRIES_0BASED) return invalid(false, ConnectOffset.sqsize);
    const sgl = sqe.sgl;
    const offset = Number(sgl.address);
    if (sgl.id !== SGL_IN_CAPSULE_DATA || sgl.length !== CONNECT_DATA_BYTES || sgl.address > BigInt(data.length) || offset + CONNECT_DATA_BYTES > data.length) {
      return this.respond(sqe.cid, Status.DataSglLengthInvalid);
    }
    const fields = decodeConnectData(data.subarray(offset, offset + CONNECT_DATA_BYTES));
    if (!isNqn(fields.hostnqn)) return invalid(true, ConnectOffset.hostnqn);
    const view = this.ctx.logs.view();
    const accepted = fields.subnqn === DISCOVERY_NQN || (view !== undefined && view.clusterSubsystemNQN !== '' && fields.subnqn === view.clusterSubsystemNQN);
    if (!accepted) {
      this.logger.info({ subNQN: fields.subnqn, hostNQN: fields.hostnqn }, 'Connect refused: not a discovery NQN of this cluster');
      return invalid(true, ConnectOffset.subnqn);
    }
    // Until etcd was read once there is no truthful log page: the host may retry.
    if (!view) return this.respond(sqe.cid, Status.ConnectControllerBusy);
    const cntlid = this.ctx.allocateCntlid();
    if (cntlid === undefined) return this.respond(sqe.cid, Status.ConnectControllerBusy);
    this.cntlid = cntlid;
    this.hostNQN = fields.hostnqn;
    this.subNQN = fields.subnqn!;
    this.sqsize = connect.sqsize;
    this.katoMs = connect.kato;
    this.phase = 'connected';
    clearTimeout(this.setupTimer);
    this.setupTimer = undefined;
    this.log = this.ctx.logs.attach(this.hostNQN, () => this.logChanged());
    this.ctx.presented?.record(this.socket.remoteAddress, this.hostNQN);
    this.armActivityTimer();
    this.logger.info({ hostNQN: this.hostNQN, subNQN: this.subNQN, cntlid, katoMs: this.katoMs }, 'discovery controller connected');
    this.respond(sqe.cid, Status.Success, cntlid);
  }

  private propertyGet(sqe: Sqe): void {
    const eightBytes = (sqe.bytes[40]! & 1) === 1;
    const offset = sqe.bytes.readUInt32LE(44);
    if (eightBytes) {
      if (offset !== Property.CAP) return this.respond(sqe.cid, Status.InvalidField);
      const cap = capabilities();
      return this.respond(sqe.cid, Status.Success, Number(cap & 0xffffffffn), Number(cap >> 32n));
    }
    const value = offset === Property.VS ? NVME_VERSION : offset === Property.CC ? this.cc : offset === Property.CSTS ? this.csts : undefined;
    if (value === undefined) return this.respond(sqe.cid, Status.InvalidField);
    this.respond(sqe.cid, Status.Success, value);
  }

  private propertySet(sqe: Sqe): void {
    const eightBytes = (sqe.bytes[40]! & 1) === 1;
    const offset = sqe.bytes.readUInt32LE(44);
    if (eightBytes || offset !== Property.CC) return this.respond(sqe.cid, Status.InvalidField);
    const cc = sqe.bytes.readUInt32LE(48);
    const wasEnabled = (this.cc & CC_ENABLE) !== 0;
    this.cc = cc;
    if (wasEnabled && !(cc & CC_ENABLE)) {
      // A controller reset: outstanding requests end with it.
      this.pendingAers.length = 0;
      this.aec = 0;
    }
    this.csts = (cc & CC_ENABLE ? CSTS_READY : 0) | (cc & CC_SHUTDOWN_MASK ? CSTS_SHUTDOWN_COMPLETE : 0);
    this.respond(sqe.cid, Status.Success);
  }

  // --- Admin commands --------------------------------------------------------------------------

  private identify(sqe: Sqe): void {
    if ((sqe.cdw(10) & 0xff) !== IdentifyCns.Controller) return this.respond(sqe.cid, Status.InvalidField);
    const transfer = this.checkTransfer(sqe, IDENTIFY_BYTES);
    if (transfer) return this.respond(sqe.cid, transfer);
    const { serial, model, firmware } = this.ctx.identity;
    this.sendData(sqe.cid, encodeIdentifyController({ serial, model, firmware, cntlid: this.cntlid!, subnqn: this.subNQN }));
  }

  private getLogPage(sqe: Sqe): void {
    const cdw10 = sqe.cdw(10);
    const lid = cdw10 & 0xff;
    const dwords = (((sqe.cdw(11) & 0xffff) * 0x10000) + (cdw10 >>> 16)) + 1;
    const length = dwords * 4;
    const offset = sqe.cdw(13) * 2 ** 32 + sqe.cdw(12);
    if (lid !== LogPageId.Discovery) return this.respond(sqe.cid, Status.InvalidLogPage);
    if (offset % 4 !== 0 || length > MAX_TRANSFER_BYTES) return this.respond(sqe.cid, Status.InvalidField);
    const transfer = this.checkTransfer(sqe, length);
    if (transfer) return this.respond(sqe.cid, transfer);
    const page = this.log!.page();
    if (offset > page.length) return this.respond(sqe.cid, Status.InvalidField);
    const data = Buffer.alloc(length);
    page.copy(data, 0, offset, Math.min(page.length, offset + length));
    // Any read of the log re-arms its event. (RAE is not honoured on purpose: nvme-cli reads the
    // header with RAE set and stops there when the log is empty, which would mask the event for
    // good; see docs/discovery.md.)
    this.eventMasked = false;
    this.eventQueued = false;
    this.sendData(sqe.cid, data);
  }

  private setFeatures(sqe: Sqe): void {
    const cdw10 = sqe.cdw(10);
    const value = sqe.cdw(11);
    if (cdw10 & 0x80000000) return this.respond(sqe.cid, Status.FeatureNotSaveable);
    switch (cdw10 & 0xff) {
      case FeatureId.KeepAliveTimer:
        this.katoMs = value;
        this.armActivityTimer();
        return this.respond(sqe.cid, Status.Success);
      case FeatureId.AsyncEventConfig:
        if ((value & ~AEC_DISCOVERY_LOG_CHANGE) !== 0) return this.respond(sqe.cid, Status.InvalidField);
        this.aec = value;
        this.respond(sqe.cid, Status.Success);
        return this.deliverEvent();
      default:
        return this.respond(sqe.cid, Status.InvalidField);
    }
  }

  private getFeatures(sqe: Sqe): void {
    const cdw10 = sqe.cdw(10);
    const select = (cdw10 >>> 8) & 0x7;
    const fid = cdw10 & 0xff;
    const current = fid === FeatureId.KeepAliveTimer ? this.katoMs : fid === FeatureId.AsyncEventConfig ? this.aec : undefined;
    if (current === undefined || select > 3) return this.respond(sqe.cid, Status.InvalidField);
    // Select: 0 current, 1 default, 2 saved (= current: nothing is saved), 3 capabilities (changeable).
    const values = [current, 0, current, 0x4];
    this.respond(sqe.cid, Status.Success, values[select]!);
  }

  private asyncEventRequest(sqe: Sqe): void {
    if (this.pendingAers.length > AER_LIMIT_0BASED) return this.respond(sqe.cid, Status.AsyncEventLimitExceeded);
    this.pendingAers.push(sqe.cid);
    this.deliverEvent();
  }

  /** The host's log page changed: report it through an Asynchronous Event Request. */
  private logChanged(): void {
    this.eventQueued = true;
    this.deliverEvent();
  }

  private deliverEvent(): void {
    if (!this.eventQueued || this.eventMasked || !(this.aec & AEC_DISCOVERY_LOG_CHANGE)) return;
    const cid = this.pendingAers.shift();
    if (cid === undefined) return;
    this.eventQueued = false;
    this.eventMasked = true;
    this.logger.debug({ hostNQN: this.hostNQN, genctr: String(this.log?.genctr()) }, 'discovery log change event sent');
    this.respond(cid, Status.Success, AEN_DISCOVERY_LOG_CHANGE);
  }

  // --- Replies and timers ----------------------------------------------------------------------

  /** The data of a controller-to-host command must be asked for as a transport data block of exactly its size. */
  private checkTransfer(sqe: Sqe, length: number): NvmeStatus | undefined {
    const sgl = sqe.sgl;
    if (sgl.id !== SGL_TRANSPORT_DATA_BLOCK) return Status.SglDescriptorTypeInvalid;
    if (sgl.length !== length) return Status.DataSglLengthInvalid;
    return undefined;
  }

  private respond(cid: number, status: NvmeStatus, dw0 = 0, dw1 = 0): void {
    this.send(encodeCapsuleResp(encodeCqe({ dw0, dw1, sqhd: this.sqhd, sqid: 0, cid, status })));
  }

  private sendData(cid: number, data: Buffer): void {
    for (let offset = 0; offset < data.length; offset += C2H_CHUNK_BYTES) {
      const chunk = data.subarray(offset, offset + C2H_CHUNK_BYTES);
      this.send(encodeC2HData({ cccid: cid, datao: offset, data: chunk, last: offset + chunk.length >= data.length }, this.dataAlignment));
    }
    this.respond(cid, Status.Success);
  }

  private send(bytes: Buffer): void {
    if (this.phase === 'closed') return;
    this.socket.write(bytes);
    if (this.socket.writableLength > this.ctx.limits.maxUnreadBytes) this.close('the host does not read its replies');
  }

  /** A fatal transport error: C2HTermReq naming the field, then the connection ends. */
  private terminate(err: PduError): void {
    this.logger.info({ fes: err.fes, fei: err.fei, reason: err.message }, 'terminating a discovery connection: malformed PDU');
    this.close(`malformed PDU: ${err.message}`, encodeTermReq(PduType.C2HTermReq, err.fes, err.fei, err.header));
  }

  /**
   * Keep-alive: no command within KATO ends the association. Half a KATO of tolerance (rounded
   * up to whole seconds): hosts send a Keep Alive every KATO/2 (Linux since 5.x) or, older ones,
   * every KATO, and a loaded host must not lose its connection over a few milliseconds.
   */
  private armActivityTimer(): void {
    if (this.phase !== 'connected') return;
    clearTimeout(this.activityTimer);
    const timeout = this.katoMs > 0 ? Math.ceil((this.katoMs * 1.5) / 1000) * 1000 : this.ctx.limits.idleTimeoutMs;
    const reason = this.katoMs > 0 ? `keep-alive timeout (${timeout} ms without a command)` : `idle for ${timeout} ms with keep-alive off`;
    this.activityTimer = setTimeout(() => {
      this.logger.info({ hostNQN: this.hostNQN, cntlid: this.cntlid }, `discovery connection closed: ${reason}`);
      this.close(reason);
    }, timeout);
  }
}
