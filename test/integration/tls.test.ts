// Issue 12 items 2 and 3, against the real daemons: the REST API answers only HTTPS by default,
// with a certificate from the cluster CA that every control plane shares (or the operator's own);
// the CLI verifies it against the CA and refuses an unverified server unless --insecure; a
// control plane refuses a plaintext agent; an agent refuses a control plane whose certificate the
// cluster CA did not sign; both daemons work with an etcd that requires client certificates.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import type { Etcd3 } from 'etcd3';
import { controlPlaneChannelOptions } from '../../agent/control-plane-session/cluster-ca-credentials.js';
import { send } from '../../lib/http-transport.js';
import { createEtcdClient, etcdTlsOf } from '../../lib/etcd/client.js';
import { loadStrataProto } from '../../lib/grpc/proto.js';
import { packageRoot } from '../../lib/paths.js';
import { CONTROL_PLANE_TLS_NAME, createCertificateAuthority, issueServerCertificate } from '../../lib/tls/certificates.js';
import { ClusterCaStore } from '../../lib/etcd/cluster-ca-store.js';
import type { AgentReportingHandlers } from '../../proto/gen/strata/v1/AgentReporting.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { removeDir, spawnDaemon, startControlPlaneProcess, type ControlPlaneProcess, type DaemonProcess } from '../helpers/processes.js';
import { createFakeSysfs, type FakeSysfs } from '../helpers/sysfs-fixture.js';
import { assertJsonError, rawHttp } from '../helpers/raw-http.js';
import { waitUntil } from '../helpers/wait.js';

const GiB = 1024n ** 3n;
const cleanups: (() => Promise<void> | void)[] = [];

async function get(url: string, token: string, trust: { ca?: string; insecure?: boolean } = {}): Promise<{ status: number; body: any }> {
  const res = await send(url, { method: 'GET', headers: { Authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(10_000) }, trust);
  return { status: res.status, body: await res.json() };
}

/** The certificate the server at 127.0.0.1:`port` presents. */
function peerCertificate(port: number): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      const raw = socket.getPeerX509Certificate();
      socket.destroy();
      if (raw) resolve(raw);
      else reject(new Error('no peer certificate'));
    });
    socket.once('error', reject);
  });
}

const portOf = (url: string) => Number(new URL(url).port);

/** An agent on a fixture sysfs (one data device), reporting to `controlPlanes` in that order. */
function startAgent(etcd: TestEtcd, controlPlanes: string[], extraArgs: string[] = []): DaemonProcess {
  const sysfs: FakeSysfs = createFakeSysfs();
  sysfs.addController({ name: 'nvme0', serial: `TLS-${controlPlanes.length}-${extraArgs.length}`, model: 'Strata Test SSD', pciAddress: '0000:01:00.0', namespaces: [{ name: 'nvme0n1', sectors: (10n * GiB) / 512n }] });
  const stateDir = mkdtempSync(join(tmpdir(), 'strata-agent-tls-'));
  const agent = spawnDaemon('agent/main.js', [
    '--etcd-endpoints', etcd.endpoint,
    '--control-plane-endpoints', controlPlanes.join(','),
    '--state-dir', stateDir,
    '--sysfs-root', sysfs.root,
    '--mounts-path', sysfs.mountsPath,
    '--swaps-path', sysfs.swapsPath,
    '--hostname', `tls-${Math.random().toString(36).slice(2, 8)}`,
    '--discovery-listen-address', '127.0.0.1',
    '--discovery-port', '0',
    '--metrics-port', '0',
    '--lease-ttl-seconds', '2',
    '--log-level', 'debug',
    ...extraArgs,
  ]);
  cleanups.push(async () => {
    await agent.stop();
    sysfs.cleanup();
    removeDir(stateDir);
  });
  return agent;
}

describe('HTTPS by default and TLS on the agents\' channel', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  let client: Etcd3;
  let ca: string;

  before(async () => {
    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, https: true });
    client = createEtcdClient([etcd.endpoint]);
    ca = readFileSync(plane.caPath, 'utf8');
  });
  after(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    client?.close();
    await plane?.stop();
    if (plane) removeDir(plane.stateDir);
    await etcd?.stop();
  });

  it('the REST API answers only HTTPS by default, with a certificate the cluster CA signed for 127.0.0.1', async () => {
    assert.match(plane.apiUrl, /^https:/);
    const stored = await new ClusterCaStore(client).read();
    assert.ok(stored, 'the cluster CA is in etcd');
    assert.equal(ca, stored.certificate, 'ca.pem in the state directory is the cluster CA');
    assert.ok(new X509Certificate(ca).ca);

    const ok = await get(`${plane.apiUrl}/api/v2/version`, plane.adminToken(), { ca });
    assert.deepEqual(ok, { status: 200, body: { apiVersion: 'v2.0' } });

    await assert.rejects(fetch(`http://127.0.0.1:${portOf(plane.apiUrl)}/api/v2/version`, { signal: AbortSignal.timeout(10_000) }), 'plain HTTP gets no answer');

    const served = await peerCertificate(portOf(plane.apiUrl));
    assert.ok(served.verify(new X509Certificate(ca).publicKey), 'signed by the cluster CA');
    assert.equal(served.checkIP('127.0.0.1'), '127.0.0.1');
    assert.equal(served.checkHost(CONTROL_PLANE_TLS_NAME), CONTROL_PLANE_TLS_NAME);

    // Without the CA the certificate is not trusted; LightOS clients that skip verification still work.
    await assert.rejects(get(`${plane.apiUrl}/api/v2/version`, plane.adminToken()), (err: Error) => /certificate/i.test(String((err.cause as Error)?.message ?? err.message)));
    assert.equal((await get(`${plane.apiUrl}/api/v2/version`, plane.adminToken(), { insecure: true })).status, 200);
  });

  it('over HTTPS as over HTTP (issue 13 items 1 and 11): an empty Expect and a missing Host are answered as usual; Node\'s own 431 carries the JSON error body', async () => {
    const raw = (text: string) => rawHttp(portOf(plane.apiUrl), text, { tls: { ca, servername: CONTROL_PLANE_TLS_NAME } });
    const auth = `Authorization: Bearer ${plane.adminToken()}\r\n`;
    for (const head of [`Host: x\r\nExpect:\r\n${auth}`, auth]) {
      const reply = await raw(`GET /api/v2/version HTTP/1.1\r\n${head}Connection: close\r\n\r\n`);
      assert.equal(reply.status, 200, reply.headers);
      assert.deepEqual(JSON.parse(reply.body), { apiVersion: 'v2.0' });
    }
    const big = await raw(`GET /api/v2/version HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    assertJsonError(big, 431, 3);
  });

  it('a second control plane serves a certificate from the same CA; an operator\'s own certificate replaces it on the REST API', async () => {
    const second = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, https: true });
    cleanups.push(async () => {
      await second.stop();
      removeDir(second.stateDir);
    });
    assert.equal(readFileSync(second.caPath, 'utf8'), ca);
    assert.equal((await get(`${second.apiUrl}/api/v2/version`, plane.adminToken(), { ca })).status, 200);

    const operatorCa = await createCertificateAuthority('operator');
    const own = await issueServerCertificate(operatorCa, 'api.example', ['127.0.0.1', 'api.example']);
    const dir = mkdtempSync(join(tmpdir(), 'strata-own-cert-'));
    writeFileSync(join(dir, 'cert.pem'), own.certificate);
    writeFileSync(join(dir, 'key.pem'), own.privateKey, { mode: 0o600 });
    const third = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, https: true, extraArgs: ['--tls-cert', join(dir, 'cert.pem'), '--tls-key', join(dir, 'key.pem')] });
    cleanups.push(async () => {
      await third.stop();
      removeDir(third.stateDir);
      rmSync(dir, { recursive: true, force: true });
    });
    assert.equal((await get(`${third.apiUrl}/api/v2/version`, plane.adminToken(), { ca: operatorCa.certificate })).status, 200);
    await assert.rejects(get(`${third.apiUrl}/api/v2/version`, plane.adminToken(), { ca }), 'the cluster CA does not verify the operator\'s certificate');
    assert.equal((await peerCertificate(portOf(third.apiUrl))).fingerprint256, new X509Certificate(own.certificate).fingerprint256);
  });

  it('the CLI verifies the API against the CA (--ca-file, STRATA_CA_FILE, ~/.config/strata/ca.pem) and refuses an unverified server unless --insecure', async () => {
    const home = mkdtempSync(join(tmpdir(), 'strata-cli-tls-'));
    cleanups.push(() => rmSync(home, { recursive: true, force: true }));
    const strata = (args: string[], env: Record<string, string> = {}) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(process.execPath, [join(packageRoot, 'dist/cli/main.js'), ...args], {
          env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: home, STRATA_ENDPOINT: plane.apiUrl, STRATA_TOKEN: plane.adminToken(), ...env },
        }, (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }));
      });
    const refused = await strata(['cluster', 'info']);
    assert.equal(refused.code, 3, refused.stderr);
    assert.match(refused.stderr, /--ca-file/);
    assert.match(refused.stderr, /--insecure/);

    const info = await strata(['cluster', 'info', '--ca-file', plane.caPath]);
    assert.equal(info.code, 0, info.stderr);
    assert.match(info.stdout, /^UUID:/m);
    assert.equal((await strata(['cluster', 'info'], { STRATA_CA_FILE: plane.caPath })).code, 0);
    assert.equal((await strata(['cluster', 'info', '--insecure'])).code, 0);

    const otherCa = join(home, 'other-ca.pem');
    writeFileSync(otherCa, (await createCertificateAuthority('other')).certificate);
    assert.equal((await strata(['cluster', 'info', '--ca-file', otherCa])).code, 3, 'a CA that did not sign the certificate verifies nothing');

    mkdirSync(join(home, '.config', 'strata'), { recursive: true });
    writeFileSync(join(home, '.config', 'strata', 'ca.pem'), ca);
    assert.equal((await strata(['cluster', 'info'])).code, 0, 'the default CA file');
  });

  it('a control plane refuses a plaintext agent', async () => {
    const proto = loadStrataProto();
    const sessionError = (credentials: grpc.ChannelCredentials, options: grpc.ChannelOptions = {}) =>
      new Promise<grpc.ServiceError>((resolve) => {
        const stub = new proto.strata.v1.AgentReporting(plane.grpcEndpoint, credentials, options);
        const call = stub.Session(new grpc.Metadata(), { deadline: Date.now() + 10_000 });
        call.on('error', (err: grpc.ServiceError) => {
          stub.close();
          resolve(err);
        });
        call.on('data', () => undefined);
        call.write({ hello: {} });
      });
    const plain = await sessionError(grpc.credentials.createInsecure());
    assert.equal(plain.code, grpc.status.UNAVAILABLE, `plain text is refused before any RPC: ${plain.message}`);
    // The same call over TLS verified by the cluster CA reaches the service, which wants a token.
    const overTls = await sessionError(grpc.credentials.createSsl(Buffer.from(ca)), controlPlaneChannelOptions);
    assert.equal(overTls.code, grpc.status.UNAUTHENTICATED, overTls.message);
  });

  it('an agent refuses a control plane whose certificate the cluster CA did not sign, and reports to one it did', async () => {
    // A rogue control plane: a certificate for the right name from another CA.
    const rogueCa = await createCertificateAuthority('rogue');
    const rogueCert = await issueServerCertificate(rogueCa, 'rogue', [CONTROL_PLANE_TLS_NAME, '127.0.0.1']);
    const rogue = new grpc.Server();
    let rogueSessions = 0;
    const handlers: AgentReportingHandlers = {
      Session: (call) => {
        rogueSessions++;
        call.on('error', () => undefined);
      },
    };
    rogue.addService(loadStrataProto().strata.v1.AgentReporting.service, handlers);
    const roguePort = await new Promise<number>((resolve, reject) =>
      rogue.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createSsl(null, [{ cert_chain: Buffer.from(rogueCert.certificate), private_key: Buffer.from(rogueCert.privateKey) }], false), (err, port) => (err ? reject(err) : resolve(port))),
    );
    cleanups.push(() => rogue.forceShutdown());

    const agent = startAgent(etcd, [`127.0.0.1:${roguePort}`, plane.grpcEndpoint]);
    const failed = await agent.waitForLog((r) => /control-plane dial failed|no control-plane session yet/.test(String(r['msg'])) && r['endpoint'] === `127.0.0.1:${roguePort}`, 30_000);
    assert.ok(failed, 'the rogue endpoint was given up');
    await agent.waitForLog((r) => r['msg'] === 'session connected' && r['endpoint'] === plane.grpcEndpoint, 30_000);
    assert.equal(rogueSessions, 0, 'no session reached the rogue control plane');
  });
});

describe('etcd client TLS: both daemons against an etcd that requires client certificates', () => {
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;

  before(async () => {
    etcd = await startEtcd({ clientCertAuth: true });
  });
  after(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    await plane?.stop();
    if (plane) removeDir(plane.stateDir);
    await etcd?.stop();
  });

  it('a client without a certificate is refused; a control plane and an agent with etcdCaFile, etcdCertFile and etcdKeyFile run the cluster', async () => {
    const files = etcd.clientTls!;
    const anonymous = createEtcdClient([etcd.endpoint], 1000, etcdTlsOf({ etcdCaFile: files.caFile }));
    await assert.rejects(anonymous.get('/strata/cluster').string(), 'no client certificate, no answer');
    anonymous.close();

    const tlsArgs = ['--etcd-ca-file', files.caFile, '--etcd-cert-file', files.certFile, '--etcd-key-file', files.keyFile];
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, extraArgs: tlsArgs });
    startAgent(etcd, [plane.grpcEndpoint], tlsArgs);
    const nodes = await waitUntil(async () => {
      const res = await fetch(`${plane.apiUrl}/api/v2/nodes`, { headers: { Authorization: `Bearer ${plane.adminToken()}` } });
      const list = ((await res.json()) as { nodes: { state: string }[] }).nodes;
      return list.length === 1 && list[0]!.state === 'Active' ? list : undefined;
    }, 'the agent\'s node Active through the TLS etcd', 30_000);
    assert.equal(nodes.length, 1);
    const withCert = createEtcdClient([etcd.endpoint], 3000, etcdTlsOf({ etcdCaFile: files.caFile, etcdCertFile: files.certFile, etcdKeyFile: files.keyFile }));
    assert.ok(await new ClusterCaStore(withCert).read(), 'bootstrapped through TLS');
    withCert.close();
  });
});
