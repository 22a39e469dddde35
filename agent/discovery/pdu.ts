// NVMe/TCP PDUs (NVMe/TCP transport specification 1.0): the 8-byte common header, the PDU types
// a discovery controller meets, their encoders and decoders, and a stream framer with bounded
// PDU sizes. Pure code: no sockets. Digests are never negotiated (see docs/discovery.md), so no
// PDU here carries one and a PDU that claims one is a framing error.

export const PduType = {
  ICReq: 0x00,
  ICResp: 0x01,
  H2CTermReq: 0x02,
  C2HTermReq: 0x03,
  CapsuleCmd: 0x04,
  CapsuleResp: 0x05,
  H2CData: 0x06,
  C2HData: 0x07,
  R2T: 0x09,
} as const;
export type PduTypeNumber = (typeof PduType)[keyof typeof PduType];

export const PduFlag = { HeaderDigest: 0x01, DataDigest: 0x02, LastPdu: 0x04, Success: 0x08 } as const;

/** ICReq/ICResp DGST bits. */
export const DigestFlag = { Header: 0x01, Data: 0x02 } as const;

/** Fatal Error Status of a TermReq PDU. */
export const TermReqFes = {
  InvalidHeaderField: 0x01,
  PduSequenceError: 0x02,
  HeaderDigestError: 0x03,
  DataTransferOutOfRange: 0x04,
  DataTransferLimitExceeded: 0x05,
  UnsupportedParameter: 0x06,
} as const;

export const COMMON_HEADER_BYTES = 8;
export const SQE_BYTES = 64;
export const CQE_BYTES = 16;
/** The fixed header length (hlen) of each PDU type. */
export const HEADER_BYTES: Readonly<Record<number, number>> = {
  [PduType.ICReq]: 128,
  [PduType.ICResp]: 128,
  [PduType.H2CTermReq]: 24,
  [PduType.C2HTermReq]: 24,
  [PduType.CapsuleCmd]: COMMON_HEADER_BYTES + SQE_BYTES,
  [PduType.CapsuleResp]: COMMON_HEADER_BYTES + CQE_BYTES,
  [PduType.H2CData]: 24,
  [PduType.C2HData]: 24,
  [PduType.R2T]: 24,
};
/** A TermReq carries at most this many bytes of the offending PDU header. */
export const TERM_REQ_MAX_DATA = 128;
/** Offsets in the common header, for TermReq's FEI. */
export const HeaderField = { type: 0, flags: 1, hlen: 2, pdo: 3, plen: 4 } as const;

export interface PduHeader {
  readonly type: number;
  readonly flags: number;
  readonly hlen: number;
  readonly pdo: number;
  readonly plen: number;
}

/** One whole PDU as received: its header and all plen bytes. */
export interface Pdu {
  readonly header: PduHeader;
  readonly bytes: Buffer;
}

/** A fatal transport error: answered with a TermReq naming the field, then the connection closes. */
export class PduError extends Error {
  constructor(
    readonly fes: number,
    /** Byte offset of the field in error (FEI), for header field errors. */
    readonly fei: number,
    message: string,
    /** The offending PDU's header bytes, echoed in the TermReq. */
    readonly header: Buffer = Buffer.alloc(0),
  ) {
    super(message);
  }
}

export function decodeCommonHeader(bytes: Buffer): PduHeader {
  return { type: bytes[0]!, flags: bytes[1]!, hlen: bytes[2]!, pdo: bytes[3]!, plen: bytes.readUInt32LE(4) };
}

function header(type: number, flags: number, hlen: number, pdo: number, plen: number): Buffer {
  const bytes = Buffer.alloc(plen);
  bytes[0] = type;
  bytes[1] = flags;
  bytes[2] = hlen;
  bytes[3] = pdo;
  bytes.writeUInt32LE(plen, 4);
  return bytes;
}

/**
 * Splits a byte stream into PDUs. Checks only what framing needs (a known type with its fixed
 * hlen, hlen ≤ pdo ≤ plen, plen within the bound); the controller checks the rest against its
 * state. Throws PduError on the first bad header; the stream is then unusable.
 */
export class PduFramer {
  private chunks: Buffer[] = [];
  private buffered = 0;

  constructor(
    private readonly maxPduBytes: number,
    /** The PDU types the peer may send (HOST_PDU_TYPES on a controller). */
    private readonly accepted: ReadonlySet<number> = HOST_PDU_TYPES,
  ) {}

  /** Bytes received but not yet part of a whole PDU. */
  get pending(): number {
    return this.buffered;
  }

  push(chunk: Buffer): Pdu[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const pdus: Pdu[] = [];
    while (this.buffered >= COMMON_HEADER_BYTES) {
      const head = this.peek(COMMON_HEADER_BYTES);
      const h = decodeCommonHeader(head);
      checkFraming(h, head, this.maxPduBytes, this.accepted);
      if (this.buffered < h.plen) break;
      const bytes = this.take(h.plen);
      pdus.push({ header: h, bytes });
    }
    return pdus;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!.subarray(0, n);
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    // Copy: the PDU outlives the socket's chunk, and a tiny PDU must not pin a large chunk.
    const pdu = Buffer.from(all.subarray(0, n));
    const rest = all.subarray(n);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.buffered = rest.length;
    return pdu;
  }
}

/** The PDU types a host sends. */
export const HOST_PDU_TYPES: ReadonlySet<number> = new Set([PduType.ICReq, PduType.H2CTermReq, PduType.CapsuleCmd, PduType.H2CData]);
/** The PDU types a controller sends. */
export const CONTROLLER_PDU_TYPES: ReadonlySet<number> = new Set([PduType.ICResp, PduType.C2HTermReq, PduType.CapsuleResp, PduType.C2HData, PduType.R2T]);

function checkFraming(h: PduHeader, head: Buffer, maxPduBytes: number, accepted: ReadonlySet<number>): void {
  const expected = HEADER_BYTES[h.type];
  if (expected === undefined || !accepted.has(h.type)) {
    throw new PduError(TermReqFes.InvalidHeaderField, HeaderField.type, `PDU type 0x${h.type.toString(16)} is not expected from the peer`, head);
  }
  if (h.hlen !== expected) throw new PduError(TermReqFes.InvalidHeaderField, HeaderField.hlen, `hlen ${h.hlen} is not ${expected} for PDU type ${h.type}`, head);
  if (h.plen > maxPduBytes) throw new PduError(TermReqFes.DataTransferLimitExceeded, HeaderField.plen, `plen ${h.plen} exceeds the limit of ${maxPduBytes}`, head);
  if (h.plen < h.hlen) throw new PduError(TermReqFes.InvalidHeaderField, HeaderField.plen, `plen ${h.plen} is below hlen ${h.hlen}`, head);
  if (h.pdo !== 0 && (h.pdo < h.hlen || h.pdo > h.plen)) throw new PduError(TermReqFes.InvalidHeaderField, HeaderField.pdo, `pdo ${h.pdo} is outside hlen..plen`, head);
  if (h.pdo === 0 && h.plen !== h.hlen && h.type !== PduType.H2CTermReq && h.type !== PduType.C2HTermReq) {
    throw new PduError(TermReqFes.InvalidHeaderField, HeaderField.pdo, `pdo 0 with ${h.plen - h.hlen} bytes after the header`, head);
  }
  if (h.flags & (PduFlag.HeaderDigest | PduFlag.DataDigest)) {
    throw new PduError(TermReqFes.InvalidHeaderField, HeaderField.flags, 'a digest flag is set but no digest was negotiated', head);
  }
}

// --- Initialize Connection ---------------------------------------------------------------------

export interface ICReq {
  readonly pfv: number;
  /** Host PDU data alignment: C2H data starts at a multiple of (hpda + 1) × 4 bytes. */
  readonly hpda: number;
  readonly digest: number;
  readonly maxr2t: number;
}

/** ICReq and ICResp share one layout: PFV, an alignment byte, DGST, and one dword. */
function encodeInitialize(type: number, pfv: number, alignment: number, digest: number, dword: number): Buffer {
  const b = header(type, 0, 128, 0, 128);
  b.writeUInt16LE(pfv, 8);
  b[10] = alignment;
  b[11] = digest;
  b.writeUInt32LE(dword, 12);
  return b;
}

function decodeInitialize(pdu: Pdu): [pfv: number, alignment: number, digest: number, dword: number] {
  const b = pdu.bytes;
  return [b.readUInt16LE(8), b[10]!, b[11]!, b.readUInt32LE(12)];
}

export function decodeICReq(pdu: Pdu): ICReq {
  const [pfv, hpda, digest, maxr2t] = decodeInitialize(pdu);
  return { pfv, hpda, digest, maxr2t };
}

export function encodeICReq(req: ICReq): Buffer {
  return encodeInitialize(PduType.ICReq, req.pfv, req.hpda, req.digest, req.maxr2t);
}

export interface ICResp {
  readonly pfv: number;
  readonly cpda: number;
  readonly digest: number;
  readonly maxh2cdata: number;
}

export function encodeICResp(resp: ICResp): Buffer {
  return encodeInitialize(PduType.ICResp, resp.pfv, resp.cpda, resp.digest, resp.maxh2cdata);
}

export function decodeICResp(pdu: Pdu): ICResp {
  const [pfv, cpda, digest, maxh2cdata] = decodeInitialize(pdu);
  return { pfv, cpda, digest, maxh2cdata };
}

// --- Capsules --------------------------------------------------------------------------------

export interface CapsuleCmd {
  /** The 64-byte submission queue entry. */
  readonly sqe: Buffer;
  /** In-capsule data (empty when none). */
  readonly data: Buffer;
}

export function decodeCapsuleCmd(pdu: Pdu): CapsuleCmd {
  const { hlen, pdo } = pdu.header;
  return {
    sqe: pdu.bytes.subarray(COMMON_HEADER_BYTES, hlen),
    data: pdo === 0 ? Buffer.alloc(0) : pdu.bytes.subarray(pdo),
  };
}

export function encodeCapsuleCmd(sqe: Buffer, data: Buffer = Buffer.alloc(0)): Buffer {
  const hlen = COMMON_HEADER_BYTES + SQE_BYTES;
  const b = header(PduType.CapsuleCmd, 0, hlen, data.length > 0 ? hlen : 0, hlen + data.length);
  sqe.copy(b, COMMON_HEADER_BYTES, 0, SQE_BYTES);
  data.copy(b, hlen);
  return b;
}

export function encodeCapsuleResp(cqe: Buffer): Buffer {
  const b = header(PduType.CapsuleResp, 0, 24, 0, 24);
  cqe.copy(b, COMMON_HEADER_BYTES, 0, CQE_BYTES);
  return b;
}

export function decodeCapsuleResp(pdu: Pdu): Buffer {
  return pdu.bytes.subarray(COMMON_HEADER_BYTES, COMMON_HEADER_BYTES + CQE_BYTES);
}

// --- Data ------------------------------------------------------------------------------------

export interface C2HData {
  readonly cccid: number;
  /** Offset of this PDU's data within the command's data. */
  readonly datao: number;
  readonly data: Buffer;
  readonly last: boolean;
}

/** A C2HData PDU; its data starts at the first multiple of `alignment` bytes after the header. */
export function encodeC2HData(pdu: C2HData, alignment = 4): Buffer {
  const hlen = 24;
  const pdo = Math.ceil(hlen / alignment) * alignment;
  const b = header(PduType.C2HData, pdu.last ? PduFlag.LastPdu : 0, hlen, pdo, pdo + pdu.data.length);
  b.writeUInt16LE(pdu.cccid, 8);
  b.writeUInt32LE(pdu.datao, 12);
  b.writeUInt32LE(pdu.data.length, 16);
  pdu.data.copy(b, pdo);
  return b;
}

export function decodeC2HData(pdu: Pdu): C2HData {
  const b = pdu.bytes;
  const datal = b.readUInt32LE(16);
  return {
    cccid: b.readUInt16LE(8),
    datao: b.readUInt32LE(12),
    data: b.subarray(pdu.header.pdo, pdu.header.pdo + datal),
    last: (pdu.header.flags & PduFlag.LastPdu) !== 0,
  };
}

// --- Termination -----------------------------------------------------------------------------

export interface TermReq {
  readonly fes: number;
  readonly fei: number;
  readonly data: Buffer;
}

export function encodeTermReq(type: typeof PduType.C2HTermReq | typeof PduType.H2CTermReq, fes: number, fei: number, offending: Buffer = Buffer.alloc(0)): Buffer {
  const data = offending.subarray(0, TERM_REQ_MAX_DATA);
  const b = header(type, 0, 24, data.length > 0 ? 24 : 0, 24 + data.length);
  b.writeUInt16LE(fes, 8);
  b.writeUInt32LE(fei >>> 0, 10);
  data.copy(b, 24);
  return b;
}

export function decodeTermReq(pdu: Pdu): TermReq {
  const b = pdu.bytes;
  return { fes: b.readUInt16LE(8), fei: b.readUInt32LE(10), data: b.subarray(24) };
}
