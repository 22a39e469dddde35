// Tests only: a small NVMe/TCP host that speaks to a discovery controller the way Linux's
// nvme-tcp and nvme-cli do (ICReq, Fabrics Connect, Property Get/Set, Identify, Get Log Page,
// Set/Get Features, Asynchronous Event Requests, Keep Alive), plus raw bytes for the fuzz tests.
import { connect as tcpConnect, type Socket } from 'node:net';
import { decodeDiscoveryLog, DISCOVERY_LOG_ENTRY_BYTES, DISCOVERY_LOG_HEADER_BYTES, type DecodedDiscoveryLog } from '../../../agent/discovery/log-page.js';
import {
  AdminOpcode,
  CC_ENABLE,
  decodeCqe,
  encodeConnect,
  encodeConnectData,
  encodeSqe,
  FabricsType,
  IDENTIFY_BYTES,
  LogPageId,
  Property,
  SGL_TRANSPORT_DATA_BLOCK,
  type Completion,
} from '../../../agent/discovery/nvme.js';
import {
  CONTROLLER_PDU_TYPES,
  decodeC2HData,
  decodeCapsuleResp,
  decodeICResp,
  decodeTermReq,
  encodeCapsuleCmd,
  encodeICReq,
  PduFramer,
  PduType,
  type ICResp,
  type Pdu,
  type TermReq,
} from '../../../agent/discovery/pdu.js';

export interface CommandResult {
  readonly completion: Completion;
  /** Data the controller sent for the command (C2HData), in order. */
  readonly data: Buffer;
}

interface Waiting {
  readonly chunks: Buffer[];
  resolve(result: CommandResult): void;
  reject(err: Error): void;
}

export class NvmeTcpTestClient {
  private readonly framer = new PduFramer(1 << 24, CONTROLLER_PDU_TYPES);
  private readonly waiting = new Map<number, Waiting>();
  private icresp: { resolve(r: ICResp): void; reject(err: Error): void } | undefined;
  private nextCid = 1;
  /** The C2HTermReq the controller sent, if any. */
  termReq: TermReq | undefined;
  /** Resolves when the connection is closed (by either side). */
  readonly closed: Promise<void>;
  /** Every PDU received, in order (for assertions on framing). */
  readonly received: Pdu[] = [];

  private constructor(readonly socket: Socket) {
    this.closed = new Promise((resolve) => socket.once('close', () => resolve()));
    socket.on('data', (chunk: Buffer) => {
      try {
        for (const pdu of this.framer.push(chunk)) this.handle(pdu);
      } catch (err) {
        this.failAll(err as Error);
        socket.destroy();
      }
    });
    socket.on('error', () => undefined);
    socket.on('close', () => this.failAll(new Error('connection closed')));
  }

  static async open(host: string, port: number): Promise<NvmeTcpTestClient> {
    const socket = tcpConnect({ host, port, noDelay: true });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return new NvmeTcpTestClient(socket);
  }

  /** ICReq → ICResp. */
  icreq(fields: Partial<{ pfv: number; hpda: number; digest: number; maxr2t: number }> = {}): Promise<ICResp> {
    return new Promise((resolve, reject) => {
      this.icresp = { resolve, reject };
      this.sendRaw(encodeICReq({ pfv: 0, hpda: 0, digest: 0, maxr2t: 0, ...fields }));
    });
  }

  /** Fabrics Connect on the admin queue (KATO in ms). */
  connectAdmin(options: { subnqn: string; hostnqn: string; katoMs?: number; sqsize?: number; qid?: number }): Promise<CommandResult> {
    const cid = this.cid();
    const sqe = encodeConnect(cid, { recfmt: 0, qid: options.qid ?? 0, sqsize: options.sqsize ?? 31, cattr: 0, kato: options.katoMs ?? 0 });
    const data = encodeConnectData({ hostid: Buffer.alloc(16, 0xab), cntlid: 0xffff, subnqn: options.subnqn, hostnqn: options.hostnqn });
    return this.submit(cid, sqe, data);
  }

  async propertyGet(offset: number, bytes: 4 | 8 = 4): Promise<{ completion: Completion; value: bigint }> {
    const cid = this.cid();
    const raw = Buffer.alloc(8);
    raw[0] = bytes === 8 ? 1 : 0;
    raw.writeUInt32LE(offset, 4);
    const { completion } = await this.submit(cid, encodeSqe({ opcode: AdminOpcode.Fabrics, cid, fctype: FabricsType.PropertyGet, raw: [{ offset: 40, bytes: raw }] }));
    return { completion, value: (BigInt(completion.dw1) << 32n) | BigInt(completion.dw0) };
  }

  async propertySet(offset: number, value: number): Promise<Completion> {
    const cid = this.cid();
    const raw = Buffer.alloc(16);
    raw.writeUInt32LE(offset, 4);
    raw.writeUInt32LE(value, 8);
    return (await this.submit(cid, encodeSqe({ opcode: AdminOpcode.Fabrics, cid, fctype: FabricsType.PropertySet, raw: [{ offset: 40, bytes: raw }] }))).completion;
  }

  /** What Linux does after Connect: read CAP, write CC.EN=1, see CSTS.RDY. */
  async enable(): Promise<void> {
    await this.propertyGet(Property.CAP, 8);
    const done = await this.propertySet(Property.CC, CC_ENABLE | (6 << 16) | (4 << 20));
    if (done.status.sc !== 0) throw new Error(`CC.EN failed: ${JSON.stringify(done.status)}`);
  }

  identify(cns = 1, transferBytes = IDENTIFY_BYTES): Promise<CommandResult> {
    const cid = this.cid();
    return this.submit(cid, encodeSqe({ opcode: AdminOpcode.Identify, cid, sgl: dataBlock(transferBytes), cdw: { 10: cns } }));
  }

  /** Get Log Page: `length` bytes (a multiple of 4) at `offset`. */
  getLogPage(options: { offset?: number; length: number; rae?: boolean; lid?: number; transferBytes?: number }): Promise<CommandResult> {
    const cid = this.cid();
    const numd = options.length / 4 - 1;
    const offset = options.offset ?? 0;
    const cdw10 = (options.lid ?? LogPageId.Discovery) | (options.rae ? 1 << 15 : 0) | ((numd & 0xffff) << 16);
    return this.submit(
      cid,
      encodeSqe({
        opcode: AdminOpcode.GetLogPage,
        cid,
        sgl: dataBlock(options.transferBytes ?? options.length),
        cdw: { 10: cdw10 >>> 0, 11: numd >>> 16, 12: offset % 2 ** 32, 13: Math.floor(offset / 2 ** 32) },
      }),
    );
  }

  /** The whole log as nvme-cli reads it: header, entries, header again until genctr holds still. */
  async readDiscoveryLog(maxRetries = 10): Promise<DecodedDiscoveryLog> {
    for (let attempt = 0; attempt < maxRetries; attempt++) {
      const head = await this.getLogPage({ length: DISCOVERY_LOG_HEADER_BYTES, rae: true });
      assertOk(head.completion, 'log page header');
      const header = decodeDiscoveryLog(head.data);
      if (header.numrec === 0n) return header;
      const entries = await this.getLogPage({ offset: DISCOVERY_LOG_HEADER_BYTES, length: Number(header.numrec) * DISCOVERY_LOG_ENTRY_BYTES, rae: true });
      assertOk(entries.completion, 'log page entries');
      const again = await this.getLogPage({ length: DISCOVERY_LOG_HEADER_BYTES });
      assertOk(again.completion, 'log page header again');
      if (decodeDiscoveryLog(again.data).genctr === header.genctr) return decodeDiscoveryLog(Buffer.concat([head.data, entries.data]));
    }
    throw new Error('the discovery log kept changing');
  }

  async setFeatures(fid: number, value: number, save = false): Promise<Completion> {
    const cid = this.cid();
    return (await this.submit(cid, encodeSqe({ opcode: AdminOpcode.SetFeatures, cid, cdw: { 10: (fid | (save ? 0x80000000 : 0)) >>> 0, 11: value >>> 0 } }))).completion;
  }

  async getFeatures(fid: number, select = 0): Promise<Completion> {
    const cid = this.cid();
    return (await this.submit(cid, encodeSqe({ opcode: AdminOpcode.GetFeatures, cid, cdw: { 10: fid | (select << 8) } }))).completion;
  }

  /** Posts an Asynchronous Event Request; the promise settles when the controller completes it. */
  asyncEvent(): Promise<Completion> {
    const cid = this.cid();
    return this.submit(cid, encodeSqe({ opcode: AdminOpcode.AsyncEventRequest, cid })).then((r) => r.completion);
  }

  async keepAlive(): Promise<Completion> {
    const cid = this.cid();
    return (await this.submit(cid, encodeSqe({ opcode: AdminOpcode.KeepAlive, cid }))).completion;
  }

  /** Any command (its cid is taken from the entry). */
  submit(cid: number, sqe: Buffer, data?: Buffer): Promise<CommandResult> {
    return new Promise((resolve, reject) => {
      this.waiting.set(cid, { chunks: [], resolve, reject });
      this.sendRaw(encodeCapsuleCmd(sqe, data));
    });
  }

  /** Connection setup as `nvme discover` does it: ICReq, Connect, CC.EN. */
  async attach(hostnqn: string, options: { subnqn?: string; katoMs?: number } = {}): Promise<Completion> {
    await this.icreq();
    const { completion } = await this.connectAdmin({ subnqn: options.subnqn ?? 'nqn.2014-08.org.nvmexpress.discovery', hostnqn, katoMs: options.katoMs ?? 0 });
    assertOk(completion, 'Connect');
    await this.enable();
    return completion;
  }

  sendRaw(bytes: Buffer): void {
    if (!this.socket.destroyed) this.socket.write(bytes);
  }

  cid(): number {
    const cid = this.nextCid;
    this.nextCid = (this.nextCid % 0xfffe) + 1;
    return cid;
  }

  close(): void {
    this.socket.destroy();
  }

  private handle(pdu: Pdu): void {
    this.received.push(pdu);
    switch (pdu.header.type) {
      case PduType.ICResp:
        this.icresp?.resolve(decodeICResp(pdu));
        this.icresp = undefined;
        return;
      case PduType.C2HData: {
        const data = decodeC2HData(pdu);
        this.waiting.get(data.cccid)?.chunks.push(Buffer.from(data.data));
        return;
      }
      case PduType.CapsuleResp: {
        const completion = decodeCqe(decodeCapsuleResp(pdu));
        const waiting = this.waiting.get(completion.cid);
        if (!waiting) return;
        this.waiting.delete(completion.cid);
        waiting.resolve({ completion, data: Buffer.concat(waiting.chunks) });
        return;
      }
      case PduType.C2HTermReq:
        this.termReq = decodeTermReq(pdu);
        return;
      default:
        throw new Error(`unexpected PDU type ${pdu.header.type}`);
    }
  }

  private failAll(err: Error): void {
    this.icresp?.reject(err);
    this.icresp = undefined;
    for (const waiting of this.waiting.values()) waiting.reject(err);
    this.waiting.clear();
  }
}

function dataBlock(length: number) {
  return { address: 0n, length, id: SGL_TRANSPORT_DATA_BLOCK };
}

export function assertOk(c: Completion, what: string): void {
  if (c.status.sct !== 0 || c.status.sc !== 0) throw new Error(`${what} failed: sct ${c.status.sct} sc 0x${c.status.sc.toString(16)}`);
}
