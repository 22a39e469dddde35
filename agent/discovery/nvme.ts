// The NVMe command layer a discovery controller needs (NVMe base 2.0 and NVMe over Fabrics 1.1):
// opcodes, status codes, submission-entry fields, completion entries, controller properties and
// the Identify Controller data. Pure code.
import { NQN_MAX_BYTES } from '../../lib/contract/nqn.js';

export const AdminOpcode = {
  GetLogPage: 0x02,
  Identify: 0x06,
  SetFeatures: 0x09,
  GetFeatures: 0x0a,
  AsyncEventRequest: 0x0c,
  KeepAlive: 0x18,
  Fabrics: 0x7f,
} as const;

export const FabricsType = {
  PropertySet: 0x00,
  Connect: 0x01,
  PropertyGet: 0x04,
  AuthenticationSend: 0x05,
  AuthenticationReceive: 0x06,
  Disconnect: 0x08,
} as const;

export const FeatureId = { AsyncEventConfig: 0x0b, KeepAliveTimer: 0x0f } as const;
export const LogPageId = { Discovery: 0x70 } as const;
export const IdentifyCns = { Controller: 0x01 } as const;

/** Controller properties (the fabrics counterpart of the PCIe registers). */
export const Property = { CAP: 0x00, VS: 0x08, CC: 0x14, CSTS: 0x1c, NSSR: 0x20 } as const;

/** NVMe status: status code type, status code, do-not-retry. */
export interface NvmeStatus {
  readonly sct: number;
  readonly sc: number;
  readonly dnr: boolean;
}

const status = (sct: number, sc: number, dnr = true): NvmeStatus => ({ sct, sc, dnr });

export const Status = {
  Success: status(0, 0x00, false),
  InvalidOpcode: status(0, 0x01),
  InvalidField: status(0, 0x02),
  InternalError: status(0, 0x06, false),
  CommandSequenceError: status(0, 0x0c),
  DataSglLengthInvalid: status(0, 0x0f),
  SglDescriptorTypeInvalid: status(0, 0x11),
  AsyncEventLimitExceeded: status(1, 0x05),
  InvalidLogPage: status(1, 0x09),
  FeatureNotSaveable: status(1, 0x0d),
  ConnectIncompatibleFormat: status(1, 0x80),
  /** Not ready yet (the cluster's state is not loaded): the host may retry. */
  ConnectControllerBusy: status(1, 0x81, false),
  ConnectInvalidParameters: status(1, 0x82),
  ConnectInvalidHost: status(1, 0x84),
} as const;

/** The 16-bit status field of a completion (phase tag 0). */
export function statusField(s: NvmeStatus): number {
  return ((s.dnr ? 1 : 0) << 15) | ((s.sct & 0x7) << 9) | ((s.sc & 0xff) << 1);
}

export function statusOfField(field: number): NvmeStatus {
  return { sct: (field >> 9) & 0x7, sc: (field >> 1) & 0xff, dnr: (field & 0x8000) !== 0 };
}

export function isSuccess(s: NvmeStatus): boolean {
  return s.sct === 0 && s.sc === 0;
}

export interface Completion {
  /** Command specific dword 0 and dword 1 (a 64-bit property value spans both). */
  readonly dw0: number;
  readonly dw1: number;
  readonly sqhd: number;
  readonly sqid: number;
  readonly cid: number;
  readonly status: NvmeStatus;
}

export function encodeCqe(c: Completion): Buffer {
  const b = Buffer.alloc(16);
  b.writeUInt32LE(c.dw0 >>> 0, 0);
  b.writeUInt32LE(c.dw1 >>> 0, 4);
  b.writeUInt16LE(c.sqhd & 0xffff, 8);
  b.writeUInt16LE(c.sqid & 0xffff, 10);
  b.writeUInt16LE(c.cid & 0xffff, 12);
  b.writeUInt16LE(statusField(c.status), 14);
  return b;
}

export function decodeCqe(b: Buffer): Completion {
  return {
    dw0: b.readUInt32LE(0),
    dw1: b.readUInt32LE(4),
    sqhd: b.readUInt16LE(8),
    sqid: b.readUInt16LE(10),
    cid: b.readUInt16LE(12),
    status: statusOfField(b.readUInt16LE(14)),
  };
}

/** Read access to a 64-byte submission queue entry. */
export class Sqe {
  constructor(readonly bytes: Buffer) {}
  get opcode(): number {
    return this.bytes[0]!;
  }
  get cid(): number {
    return this.bytes.readUInt16LE(2);
  }
  get nsid(): number {
    return this.bytes.readUInt32LE(4);
  }
  /** Fabrics command type (byte 4 of a fabrics command). */
  get fctype(): number {
    return this.bytes[4]!;
  }
  /** Command dword N (10..15). */
  cdw(n: number): number {
    return this.bytes.readUInt32LE(n * 4);
  }
  /** The data pointer as an SGL descriptor. */
  get sgl(): SglDescriptor {
    return { address: this.bytes.readBigUInt64LE(24), length: this.bytes.readUInt32LE(32), id: this.bytes[39]! };
  }
}

export interface SglDescriptor {
  readonly address: bigint;
  readonly length: number;
  /** SGL identifier: descriptor type (bits 7:4) and subtype (bits 3:0). */
  readonly id: number;
}

/** Transport SGL data block: the controller sends the data in C2HData PDUs. */
export const SGL_TRANSPORT_DATA_BLOCK = 0x5a;
/** Data block with an offset into the in-capsule data. */
export const SGL_IN_CAPSULE_DATA = 0x01;

/** Builds a submission queue entry (the test client's side, and tests). */
export function encodeSqe(fields: {
  opcode: number;
  cid: number;
  nsid?: number;
  fctype?: number;
  sgl?: SglDescriptor;
  cdw?: Partial<Record<10 | 11 | 12 | 13 | 14 | 15, number>>;
  /** Raw bytes written over the entry at an offset (fabrics command fields). */
  raw?: { offset: number; bytes: Buffer }[];
}): Buffer {
  const b = Buffer.alloc(64);
  b[0] = fields.opcode;
  b[1] = 0x40; // PSDT: SGL for data, as fabrics requires
  b.writeUInt16LE(fields.cid, 2);
  if (fields.fctype !== undefined) b[4] = fields.fctype;
  else b.writeUInt32LE(fields.nsid ?? 0, 4);
  if (fields.sgl) {
    b.writeBigUInt64LE(fields.sgl.address, 24);
    b.writeUInt32LE(fields.sgl.length, 32);
    b[39] = fields.sgl.id;
  }
  for (const [n, v] of Object.entries(fields.cdw ?? {})) b.writeUInt32LE((v ?? 0) >>> 0, Number(n) * 4);
  for (const { offset, bytes } of fields.raw ?? []) bytes.copy(b, offset);
  return b;
}

// --- Connect -----------------------------------------------------------------------------------

export const CONNECT_DATA_BYTES = 1024;
/** Offsets in the Connect command and its data, for the IPO of Connect Invalid Parameters. */
export const ConnectOffset = { recfmt: 40, qid: 42, sqsize: 44, cattr: 46, kato: 48, hostid: 0, cntlid: 16, subnqn: 256, hostnqn: 512 } as const;
export const NQN_FIELD_BYTES = 256;
export const DISCOVERY_NQN = 'nqn.2014-08.org.nvmexpress.discovery';
export const CNTLID_DYNAMIC = 0xffff;

export interface ConnectCommand {
  readonly recfmt: number;
  readonly qid: number;
  readonly sqsize: number;
  readonly cattr: number;
  /** Keep-alive timeout in milliseconds (0: disabled). */
  readonly kato: number;
}

export function decodeConnect(sqe: Sqe): ConnectCommand {
  const b = sqe.bytes;
  return { recfmt: b.readUInt16LE(40), qid: b.readUInt16LE(42), sqsize: b.readUInt16LE(44), cattr: b[46]!, kato: b.readUInt32LE(48) };
}

export interface ConnectData {
  readonly hostid: Buffer;
  readonly cntlid: number;
  readonly subnqn: string;
  readonly hostnqn: string;
}

/** A NUL-terminated (or full-width) ASCII field; undefined when it is not printable ASCII. */
export function readCString(b: Buffer, offset: number, width: number): string | undefined {
  const field = b.subarray(offset, offset + width);
  const end = field.indexOf(0);
  const text = field.subarray(0, end === -1 ? field.length : end);
  for (const byte of text) if (byte < 0x20 || byte > 0x7e) return undefined;
  return text.toString('latin1');
}

export function decodeConnectData(data: Buffer): { hostid: Buffer; cntlid: number; subnqn: string | undefined; hostnqn: string | undefined } {
  return {
    hostid: Buffer.from(data.subarray(0, 16)),
    cntlid: data.readUInt16LE(16),
    subnqn: readCString(data, ConnectOffset.subnqn, NQN_FIELD_BYTES),
    hostnqn: readCString(data, ConnectOffset.hostnqn, NQN_FIELD_BYTES),
  };
}

export function encodeConnect(cid: number, c: ConnectCommand): Buffer {
  const raw = Buffer.alloc(12);
  raw.writeUInt16LE(c.recfmt, 0);
  raw.writeUInt16LE(c.qid, 2);
  raw.writeUInt16LE(c.sqsize, 4);
  raw[6] = c.cattr;
  raw.writeUInt32LE(c.kato, 8);
  return encodeSqe({
    opcode: AdminOpcode.Fabrics,
    cid,
    fctype: FabricsType.Connect,
    sgl: { address: 0n, length: CONNECT_DATA_BYTES, id: SGL_IN_CAPSULE_DATA },
    raw: [{ offset: 40, bytes: raw }],
  });
}

export function encodeConnectData(d: ConnectData): Buffer {
  const b = Buffer.alloc(CONNECT_DATA_BYTES);
  d.hostid.copy(b, 0, 0, 16);
  b.writeUInt16LE(d.cntlid, 16);
  b.write(d.subnqn, ConnectOffset.subnqn, NQN_FIELD_BYTES - 1, 'latin1');
  b.write(d.hostnqn, ConnectOffset.hostnqn, NQN_FIELD_BYTES - 1, 'latin1');
  return b;
}

/** Dword 0 of a Connect Invalid Parameters completion: where the bad parameter is. */
export function invalidParameter(inData: boolean, offset: number): number {
  return ((inData ? 1 : 0) << 16) | (offset & 0xffff);
}

/** A plausible NQN: "nqn." and printable ASCII within the length limit. */
export function isNqn(value: string | undefined): value is string {
  return value !== undefined && value.startsWith('nqn.') && Buffer.byteLength(value, 'latin1') <= NQN_MAX_BYTES;
}

// --- Controller registers and identity -----------------------------------------------------------

/** NVMe version 1.4 (the one that defines CNTRLTYPE for discovery controllers). */
export const NVME_VERSION = 0x00010400;
/** Admin queue entries the controller accepts (0-based, CAP.MQES). */
export const MAX_QUEUE_ENTRIES_0BASED = 127;
/** CC.EN and CSTS.RDY; CC.SHN and CSTS.SHST. */
export const CC_ENABLE = 0x1;
export const CC_SHUTDOWN_MASK = 0x3 << 14;
export const CSTS_READY = 0x1;
export const CSTS_SHUTDOWN_COMPLETE = 0x2 << 2;

/** CAP: MQES, CQR, TO = 7.5 s, CSS = NVM command set, MPSMIN = MPSMAX = 4 KiB. */
export function capabilities(): bigint {
  return BigInt(MAX_QUEUE_ENTRIES_0BASED) | (1n << 16n) | (15n << 24n) | (1n << 37n);
}

/** Async event: Notice, Discovery Log Page Change, log page 0x70 (the "NVME_AEN=0x70f002" of udev). */
export const AEN_DISCOVERY_LOG_CHANGE = 0x02 | (0xf0 << 8) | (LogPageId.Discovery << 16);
/** OAES / Async Event Configuration bit: Discovery Log Page Change Notices. */
export const AEC_DISCOVERY_LOG_CHANGE = 0x80000000;
/** Outstanding Asynchronous Event Requests allowed, 0-based (AERL). */
export const AER_LIMIT_0BASED = 3;
/** Maximum data transfer: 2^MDTS × 4 KiB = 1 MiB. */
export const MDTS = 8;
export const MAX_TRANSFER_BYTES = (1 << MDTS) * 4096;
/** Keep-alive granularity advertised (KAS, 100 ms units). */
export const KAS_100MS = 10;
export const IDENTIFY_BYTES = 4096;
export const CONTROLLER_TYPE_DISCOVERY = 2;

export interface ControllerIdentity {
  readonly serial: string;
  readonly model: string;
  readonly firmware: string;
  readonly cntlid: number;
  readonly subnqn: string;
}

function padded(value: string, width: number): Buffer {
  return Buffer.from(value.slice(0, width).padEnd(width, ' '), 'latin1');
}

export function encodeIdentifyController(id: ControllerIdentity): Buffer {
  const b = Buffer.alloc(IDENTIFY_BYTES);
  padded(id.serial, 20).copy(b, 4);
  padded(id.model, 40).copy(b, 24);
  padded(id.firmware, 8).copy(b, 64);
  b[77] = MDTS;
  b.writeUInt16LE(id.cntlid, 78);
  b.writeUInt32LE(NVME_VERSION, 80);
  b.writeUInt32LE(AEC_DISCOVERY_LOG_CHANGE, 92); // OAES
  b[111] = CONTROLLER_TYPE_DISCOVERY;
  b[259] = AER_LIMIT_0BASED; // AERL
  b[261] = 1 << 2; // LPA: extended data for Get Log Page (NUMDU, LPOU)
  b.writeUInt16LE(KAS_100MS, 320);
  b.writeUInt16LE(MAX_QUEUE_ENTRIES_0BASED + 1, 514); // MAXCMD
  b.writeUInt32LE((1 << 0) | (1 << 20), 536); // SGLS: SGLs supported; SGL offsets (in-capsule data)
  b.write(id.subnqn, 768, NQN_FIELD_BYTES - 1, 'latin1');
  return b;
}
