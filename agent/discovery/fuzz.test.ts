// Fuzzing the discovery controller: several connections at a time send random bytes, truncated
// and mutated PDUs and random commands, while a well-behaved host keeps reading its log page.
// The controller must answer with errors or close those connections, keep serving the good host,
// log no internal error and hold no connection once the fuzzers are gone. Bounded in count and
// time; the seed is printed so a failure can be replayed (STRATA_FUZZ_SEED).
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { ClusterRecord, NodeRecord, ServerRecord } from '../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { WatchedStates } from '../../test/helpers/watched-state.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { testAssignment } from '../../test/kits/datapath/test-assignment.js';
import type { VolumeReportSnapshot, VolumeReportSource } from '../datapath/reconcile/volume-report.js';
import { ClusterPathsStore } from './cluster-paths-store.js';
import { openDiscoveryService, type DiscoveryService } from './discovery-service.js';
import { AdminOpcode, encodeConnect, encodeConnectData, encodeSqe, FabricsType, Property } from './nvme.js';
import { encodeCapsuleCmd, encodeICReq, encodeTermReq, PduType } from './pdu.js';
import { assertOk, NvmeTcpTestClient } from '../../test/kits/discovery/nvme-tcp-client.js';

const SEED = Number(process.env['STRATA_FUZZ_SEED'] ?? Math.floor(Math.random() * 2 ** 31));
const CONNECTIONS = 240;
const PARALLEL = 6;
const CLUSTER: ClusterRecord = { UUID: 'c0ffee00-0000-4000-8000-0000000000f2', clusterName: 'fuzz', subsystemNQN: 'nqn.2016-01.io.strata:cluster:f2', supportedMaxReplicas: 3, createdAt: '', bootstrappedBy: 'test' };
const HOST = 'nqn.2014-08.org.nvmexpress:uuid:f2000000-0000-4000-8000-000000000001';
const SERVER = 'f0000000-0000-4000-8000-000000000001';
const NODE = 'f1000000-0000-4000-8000-000000000001';
const VOLUME = 'ffffffff-ffff-4fff-8fff-ffffffffffff';

/** mulberry32: small, seedable, good enough to pick bytes. */
function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    int: (n: number) => Math.floor(next() * n),
    bytes: (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(next() * 256))),
    pick: <T>(items: readonly T[]) => items[Math.floor(next() * items.length)]!,
  };
}

const served: VolumeReportSource = {
  current: (): VolumeReportSnapshot => ({
    sequence: 1,
    complete: true,
    takenAt: '',
    volumes: [{ volumeUUID: VOLUME, nodeUUID: NODE, generation: 1, state: 'Served', error: '', snapshots: [], connectedHosts: [], logicalUsedBytes: '0', physicalUsedBytes: '0' }],
  }),
  onChange: () => () => undefined,
  acknowledged: () => undefined,
};

describe(`discovery controller under fuzzing (seed ${SEED})`, () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  const states = new WatchedStates();
  let service: DiscoveryService;
  const errors: string[] = [];

  before(async () => {
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    const put = (key: string, value: unknown) => client.put(key).value(JSON.stringify(value));
    await put(keys.cluster(), CLUSTER);
    await put(keys.server(SERVER), { UUID: SERVER, name: 's', hostname: 's', nodeUUIDs: [NODE], endpoints: ['127.0.0.1'], createdAt: '' } satisfies ServerRecord);
    await put(keys.node(NODE), { UUID: NODE, serverUUID: SERVER, name: 'n', hostname: 'n', nvmeEndpoint: '', discoveryEndpoint: '', failureDomains: [], maxNvmeDevices: 1, managedDeviceSerials: [], journalDeviceSerial: '', ec: false, createdAt: '' } satisfies NodeRecord);
    await put(keys.assignment(NODE, VOLUME), testAssignment({ volumeUUID: VOLUME, nodeUUID: NODE, subsystemNQN: `${CLUSTER.subsystemNQN}:vol:${VOLUME}`, nsid: 1, port: 20001, acl: [HOST] }));
    // Error-level logs (an exception inside the controller) fail the test.
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) if ((JSON.parse(line) as { level: number }).level >= 50) errors.push(line);
        done();
      },
    });
    service = await openDiscoveryService(
      { discoveryListenAddress: '127.0.0.1', discoveryPort: 0, discoveryMaxConnections: 64 },
      { store: new ClusterPathsStore(states.of(client, SERVER)), serverUUID: SERVER, nodeUUIDs: [NODE], firmware: 'fuzz', logger: pino({ level: 'error' }, sink), limits: { setupTimeoutMs: 1000 } },
    );
    service.start(served);
    await waitUntil(() => service.paths.view()?.openPaths !== undefined && service.paths.view()!.pathsByHost.size > 0, 'the view');
  });

  after(async () => {
    await service?.stop();
    await states.stop();
    client?.close();
    await etcd?.stop();
  });

  it('keeps serving a good host while others send garbage', { timeout: 300_000 }, async () => {
    const rnd = prng(SEED);
    const port = service.port!;
    const good = await NvmeTcpTestClient.open('127.0.0.1', port);
    await good.attach(HOST, { katoMs: 10_000 });
    let goodReads = 0;
    let fuzzing = true;
    const goodLoop = (async () => {
      while (fuzzing) {
        const log = await good.readDiscoveryLog();
        assert.equal(log.entries.length, 1);
        assert.equal(log.entries[0]!.trsvcid, '20001');
        assertOk(await good.keepAlive(), 'keep alive');
        goodReads += 1;
        await sleep(20);
      }
    })();

    const setup = () => [
      encodeICReq({ pfv: 0, hpda: 0, digest: 0, maxr2t: 0 }),
      encodeCapsuleCmd(
        encodeConnect(1, { recfmt: 0, qid: 0, sqsize: 31, cattr: 0, kato: 0 }),
        encodeConnectData({ hostid: Buffer.alloc(16), cntlid: 0xffff, subnqn: 'nqn.2014-08.org.nvmexpress.discovery', hostnqn: HOST }),
      ),
      encodeCapsuleCmd(encodeSqe({ opcode: AdminOpcode.Fabrics, cid: 2, fctype: FabricsType.PropertySet, raw: [{ offset: 44, bytes: Buffer.from([Property.CC, 0, 0, 0, 1, 0, 0, 0]) }] })),
    ];
    const randomCommand = () => {
      const sqe = rnd.bytes(64);
      sqe[0] = rnd.pick([AdminOpcode.GetLogPage, AdminOpcode.Identify, AdminOpcode.SetFeatures, AdminOpcode.GetFeatures, AdminOpcode.AsyncEventRequest, AdminOpcode.KeepAlive, AdminOpcode.Fabrics, rnd.int(256)]);
      if (sqe[0] === AdminOpcode.Fabrics) sqe[4] = rnd.pick([FabricsType.Connect, FabricsType.PropertyGet, FabricsType.PropertySet, rnd.int(256)]);
      if (rnd.int(3) === 0) sqe.writeUInt32LE(0, 44); // small NUMDU / values
      return encodeCapsuleCmd(sqe, rnd.int(4) === 0 ? rnd.bytes(rnd.int(2048)) : undefined);
    };
    const mutate = (pdu: Buffer) => {
      const copy = Buffer.from(pdu);
      for (let i = 0, n = 1 + rnd.int(3); i < n; i++) copy[rnd.int(Math.min(copy.length, 80))] = rnd.int(256);
      return copy;
    };
    const scenarios: (() => Buffer[])[] = [
      () => [rnd.bytes(1 + rnd.int(600))],
      () => [encodeICReq({ pfv: 0, hpda: 0, digest: 0, maxr2t: 0 }).subarray(0, rnd.int(128))],
      () => [mutate(encodeICReq({ pfv: 0, hpda: 0, digest: 0, maxr2t: 0 }))],
      () => setup().map((p, i, all) => (i === all.length - 1 ? p.subarray(0, rnd.int(p.length)) : p)),
      () => setup().map((p) => (rnd.int(3) === 0 ? mutate(p) : p)),
      () => [...setup(), ...Array.from({ length: 1 + rnd.int(12) }, randomCommand)],
      () => [...setup(), ...Array.from({ length: 1 + rnd.int(6) }, () => mutate(randomCommand()))],
      () => [...setup(), encodeTermReq(PduType.H2CTermReq, 1, 0, rnd.bytes(rnd.int(200)))],
      () => [...setup(), randomCommand().subarray(0, 1 + rnd.int(70))],
    ];

    let next = 0;
    const worker = async () => {
      while (next < CONNECTIONS) {
        next += 1;
        const scenario = rnd.int(scenarios.length);
        const pdus = scenarios[scenario]!();
        const fuzzer = await NvmeTcpTestClient.open('127.0.0.1', port);
        // Sometimes all at once, sometimes in random slices.
        const stream = Buffer.concat(pdus);
        for (let offset = 0; offset < stream.length; ) {
          const n = rnd.int(3) === 0 ? stream.length : 1 + rnd.int(200);
          fuzzer.sendRaw(stream.subarray(offset, offset + n));
          offset += n;
        }
        // Leave at once, or wait for the controller to end it (setup timeout, TermReq).
        if (rnd.int(2) === 0) await Promise.race([fuzzer.closed, sleep(50 + rnd.int(200))]);
        fuzzer.close();
        await fuzzer.closed;
      }
    };
    await Promise.all(Array.from({ length: PARALLEL }, worker));
    fuzzing = false;
    await goodLoop;
    assert.ok(goodReads > 0, 'the good host read its log while the fuzzers ran');
    assert.deepEqual(errors, [], 'no internal error');
    await waitUntil(() => service.server?.connectionCount === 1, 'every fuzz connection to be gone (only the good host left)', 15_000);
    assert.equal(good.socket.destroyed, false);
    good.close();
    await waitUntil(() => service.server?.connectionCount === 0, 'the good host to be gone');
  });
});
