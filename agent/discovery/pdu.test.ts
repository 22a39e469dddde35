import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  AEN_DISCOVERY_LOG_CHANGE,
  capabilities,
  decodeConnect,
  decodeConnectData,
  decodeCqe,
  encodeConnect,
  encodeConnectData,
  encodeCqe,
  encodeIdentifyController,
  readCString,
  Sqe,
  Status,
  statusField,
} from './nvme.js';
import {
  CONTROLLER_PDU_TYPES,
  decodeC2HData,
  decodeCapsuleCmd,
  decodeCapsuleResp,
  decodeICReq,
  decodeICResp,
  decodeTermReq,
  encodeC2HData,
  encodeCapsuleCmd,
  encodeCapsuleResp,
  encodeICReq,
  encodeICResp,
  encodeTermReq,
  PduError,
  PduFramer,
  PduType,
  TermReqFes,
} from './pdu.js';

const frameOne = (bytes: Buffer, types?: ReadonlySet<number>) => {
  const pdus = new PduFramer(1 << 20, types).push(bytes);
  assert.equal(pdus.length, 1);
  return pdus[0]!;
};

describe('NVMe/TCP PDUs', () => {
  it('encodes ICReq and ICResp with the layout Linux reads', () => {
    const icreq = encodeICReq({ pfv: 0, hpda: 3, digest: 0, maxr2t: 7 });
    assert.equal(icreq.length, 128);
    assert.deepEqual([...icreq.subarray(0, 8)], [0x00, 0, 128, 0, 128, 0, 0, 0]);
    assert.deepEqual(decodeICReq(frameOne(icreq)), { pfv: 0, hpda: 3, digest: 0, maxr2t: 7 });

    const icresp = encodeICResp({ pfv: 0, cpda: 0, digest: 0, maxh2cdata: 4096 });
    assert.deepEqual([...icresp.subarray(0, 8)], [0x01, 0, 128, 0, 128, 0, 0, 0]);
    assert.equal(icresp.readUInt32LE(12), 4096);
    assert.deepEqual(decodeICResp(frameOne(icresp, CONTROLLER_PDU_TYPES)), { pfv: 0, cpda: 0, digest: 0, maxh2cdata: 4096 });
  });

  it('encodes command capsules with and without in-capsule data', () => {
    const sqe = encodeConnect(9, { recfmt: 0, qid: 0, sqsize: 31, cattr: 0, kato: 30_000 });
    const data = encodeConnectData({ hostid: Buffer.alloc(16, 1), cntlid: 0xffff, subnqn: 'nqn.2014-08.org.nvmexpress.discovery', hostnqn: 'nqn.2014-08.org.nvmexpress:uuid:h1' });
    const withData = encodeCapsuleCmd(sqe, data);
    assert.deepEqual([withData[0], withData[2], withData[3], withData.readUInt32LE(4)], [PduType.CapsuleCmd, 72, 72, 72 + 1024]);
    const cmd = decodeCapsuleCmd(frameOne(withData));
    assert.deepEqual(decodeConnect(new Sqe(cmd.sqe)), { recfmt: 0, qid: 0, sqsize: 31, cattr: 0, kato: 30_000 });
    const fields = decodeConnectData(cmd.data);
    assert.deepEqual([fields.cntlid, fields.subnqn, fields.hostnqn], [0xffff, 'nqn.2014-08.org.nvmexpress.discovery', 'nqn.2014-08.org.nvmexpress:uuid:h1']);
    assert.equal(new Sqe(cmd.sqe).cid, 9);

    const bare = encodeCapsuleCmd(Buffer.alloc(64));
    assert.deepEqual([bare[3], bare.readUInt32LE(4)], [0, 72], 'no data: pdo 0 and plen = hlen (as Linux sends)');
    assert.equal(decodeCapsuleCmd(frameOne(bare)).data.length, 0);
  });

  it('encodes completions: status field, dwords, command id', () => {
    const cqe = encodeCqe({ dw0: 0xdeadbeef, dw1: 1, sqhd: 5, sqid: 0, cid: 0x1234, status: Status.ConnectInvalidParameters });
    const resp = encodeCapsuleResp(cqe);
    assert.deepEqual([...resp.subarray(0, 8)], [0x05, 0, 24, 0, 24, 0, 0, 0]);
    const back = decodeCqe(decodeCapsuleResp(frameOne(resp, CONTROLLER_PDU_TYPES)));
    assert.deepEqual(back, { dw0: 0xdeadbeef, dw1: 1, sqhd: 5, sqid: 0, cid: 0x1234, status: Status.ConnectInvalidParameters });
    // Linux reads status >> 1: SCT 1, SC 0x82, DNR (0x4000 in its shifted form).
    assert.equal(statusField(Status.ConnectInvalidParameters) >> 1, 0x4000 | 0x182);
    assert.equal(statusField(Status.Success), 0);
    assert.equal(AEN_DISCOVERY_LOG_CHANGE, 0x70f002, 'what udev sees as NVME_AEN=0x70f002');
  });

  it('encodes C2HData honouring the host’s data alignment', () => {
    const data = Buffer.from('0123456789abcdef');
    const plain = encodeC2HData({ cccid: 3, datao: 4096, data, last: true });
    assert.deepEqual([plain[0], plain[1], plain[2], plain[3], plain.readUInt32LE(4)], [0x07, 0x04, 24, 24, 24 + 16]);
    assert.deepEqual(decodeC2HData(frameOne(plain, CONTROLLER_PDU_TYPES)), { cccid: 3, datao: 4096, data, last: true });
    const aligned = encodeC2HData({ cccid: 3, datao: 0, data, last: false }, 32);
    assert.equal(aligned[3], 32, 'pdo rounded up to HPDA');
    assert.deepEqual(decodeC2HData(frameOne(aligned, CONTROLLER_PDU_TYPES)).data, data);
  });

  it('encodes TermReqs with the offending header, at most 128 bytes of it', () => {
    const term = encodeTermReq(PduType.C2HTermReq, TermReqFes.InvalidHeaderField, 2, Buffer.alloc(200, 7));
    assert.deepEqual([term[0], term[2], term.readUInt32LE(4)], [0x03, 24, 24 + 128]);
    const back = decodeTermReq(frameOne(term, CONTROLLER_PDU_TYPES));
    assert.deepEqual([back.fes, back.fei, back.data.length], [1, 2, 128]);
  });

  it('frames a byte stream split anywhere, and several PDUs in one chunk', () => {
    const stream = Buffer.concat([encodeICReq({ pfv: 0, hpda: 0, digest: 0, maxr2t: 0 }), encodeCapsuleCmd(Buffer.alloc(64), Buffer.alloc(100, 9)), encodeCapsuleCmd(Buffer.alloc(64))]);
    const framer = new PduFramer(4096);
    const byByte = [...stream].flatMap((byte) => framer.push(Buffer.from([byte])));
    assert.deepEqual(byByte.map((p) => [p.header.type, p.header.plen]), [[0, 128], [4, 172], [4, 72]]);
    assert.equal(framer.pending, 0);
    assert.equal(new PduFramer(4096).push(stream).length, 3);
  });

  it('refuses bad headers with the field in error', () => {
    const fails = (bytes: Buffer, fes: number, fei: number, max = 4096) =>
      assert.throws(() => new PduFramer(max).push(bytes), (err: unknown) => err instanceof PduError && err.fes === fes && err.fei === fei);
    const cmd = () => encodeCapsuleCmd(Buffer.alloc(64));
    const set = (b: Buffer, offset: number, value: number, width = 1) => {
      if (width === 1) b[offset] = value;
      else b.writeUInt32LE(value, offset);
      return b;
    };
    fails(set(cmd(), 0, 0x05), TermReqFes.InvalidHeaderField, 0); // a controller's PDU type
    fails(set(cmd(), 0, 0x42), TermReqFes.InvalidHeaderField, 0); // unknown type
    fails(set(cmd(), 2, 71), TermReqFes.InvalidHeaderField, 2); // hlen
    fails(set(cmd(), 4, 10_000, 4), TermReqFes.DataTransferLimitExceeded, 4); // plen over the bound
    fails(set(cmd(), 4, 30, 4), TermReqFes.InvalidHeaderField, 4); // plen below hlen
    fails(set(set(cmd(), 4, 100, 4), 3, 0), TermReqFes.InvalidHeaderField, 3); // data but pdo 0
    fails(set(set(cmd(), 4, 100, 4), 3, 101), TermReqFes.InvalidHeaderField, 3); // pdo past plen
    fails(set(cmd(), 1, 0x01), TermReqFes.InvalidHeaderField, 1); // header digest not negotiated
  });

  it('builds Identify Controller for a discovery controller', () => {
    const id = encodeIdentifyController({ serial: 'S1', model: 'M', firmware: '0.1.0', cntlid: 77, subnqn: 'nqn.2014-08.org.nvmexpress.discovery' });
    assert.equal(id.length, 4096);
    assert.equal(id.subarray(4, 24).toString(), 'S1'.padEnd(20));
    assert.equal(id.readUInt16LE(78), 77);
    assert.equal(id[111], 2, 'CNTRLTYPE discovery');
    assert.equal(id.readUInt32LE(92), 0x80000000, 'OAES: discovery log change notices');
    assert.ok((id.readUInt32LE(536) & 3) !== 0, 'SGLs supported (Linux requires it)');
    assert.equal(id.readUInt16LE(1800), 0, 'ICDOFF 0 (Linux refuses others)');
    assert.equal(readCString(id, 768, 256), 'nqn.2014-08.org.nvmexpress.discovery');
    assert.equal(Number(capabilities() & 0xffffn), 127);
    assert.equal(Number((capabilities() >> 48n) & 0xfn), 0, 'MPSMIN 4 KiB');
  });
});
