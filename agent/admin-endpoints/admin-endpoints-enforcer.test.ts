// Admin endpoints enforced (issue 12 item 6), against the real control plane and the real nft in
// a private network namespace: an endpoint created through the API becomes nftables entries
// within seconds, so its port is reachable from an allowed source address and reset from
// another; an update applies; a deletion opens the port again; a refused request changes
// nothing; volume ports' IP ACLs in the same table are left alone.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { IpAclEnforcer } from '../datapath/kernel/ip-acl-enforcer.js';
import { ipAclOf, type IpAcl } from '../datapath/kernel/ip-acl.js';
import { NftablesDriver } from '../datapath/kernel/nftables.js';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { AdminEndpointRecordsStore } from './admin-endpoints-store.js';
import { packageRoot } from '../../lib/paths.js';
import { adminApi, type AdminApi } from '../../test/helpers/admin-api.js';
import { startEtcd, type TestEtcd } from '../../test/helpers/etcd.js';
import { WatchedStates } from '../../test/helpers/watched-state.js';
import { createNetns, type TestNetns } from '../../test/helpers/netns.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../../test/helpers/processes.js';
import { silentLogger } from '../../test/helpers/silent-logger.js';
import { waitUntil } from '../../test/helpers/wait.js';
import { AdminEndpointsEnforcer } from './admin-endpoints-enforcer.js';

const PORT = 2222;
const ALLOWED = '10.77.0.1';
const OTHER = '10.77.0.2';
const VOLUME_PORT = 20001;

/** The same TCP service and client as the lab's admin-endpoint scenario. */
const PROBE = join(packageRoot, 'test', 'e2e', 'scripts', 'tcp-probe.py');

const netns = await createNetns();

describe('admin endpoints on a server (real control plane, real nft in a network namespace)', { skip: typeof netns === 'string' ? netns : false }, () => {
  const ns = netns as TestNetns;
  const driver = new NftablesDriver({ command: ns.nft });
  let etcd: TestEtcd;
  let plane: ControlPlaneProcess;
  let api: AdminApi;
  let listener: ChildProcess;
  let ipAcls: IpAclEnforcer;
  let enforcer: AdminEndpointsEnforcer;
  let client: ReturnType<typeof createEtcdClient>;
  const states = new WatchedStates();

  /** Connects to PORT from `source` inside the namespace: 'open' or 'refused'. */
  const reach = async (source: string) => (await ns.run('python3', [PROBE, 'connect', source, '127.0.0.1', String(PORT)])).stdout.trim();

  before(async () => {
    await ns.run('ip', ['addr', 'add', `${ALLOWED}/32`, 'dev', 'lo']);
    await ns.run('ip', ['addr', 'add', `${OTHER}/32`, 'dev', 'lo']);
    // An administrative service on PORT that answers "ok" to every connection.
    listener = spawn('nsenter', [`--net=/run/netns/${ns.name}`, 'python3', PROBE, 'serve', String(PORT)], { stdio: 'ignore' });
    await waitUntil(async () => ((await reach(OTHER)) === 'open' ? true : undefined), 'the test service listens', 10_000);

    etcd = await startEtcd();
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint });
    api = adminApi(() => plane);
    client = createEtcdClient([etcd.endpoint]);
    ipAcls = new IpAclEnforcer(driver, silentLogger(), { min: 20000, max: 31999 });
    // A volume port with its IP ACL in the same table: admin endpoints must leave it alone.
    await ipAcls.enforce(new Map([[VOLUME_PORT, { volumeUUID: '11111111-1111-4111-8111-111111111111', acl: ipAclOf(['10.9.9.9']) as IpAcl }]]));
    enforcer = new AdminEndpointsEnforcer({ store: new AdminEndpointRecordsStore(client, states.of(client)), target: ipAcls, resyncIntervalMs: 60_000, logger: silentLogger() });
    await enforcer.start();
  });
  after(async () => {
    await enforcer?.stop();
    listener?.kill('SIGKILL');
    await states.stop();
    client?.close();
    await plane?.stop();
    if (plane) removeDir(plane.stateDir);
    await etcd?.stop();
    await ns.remove();
  });

  const tableOf = async () => (await driver.read()).ports;

  it('an endpoint created through the API admits only its addresses within seconds', async () => {
    assert.equal(await reach(ALLOWED), 'open');
    await api.api('POST', '/adminEndpoints', { port: PORT, ips: [ALLOWED, '2001:db8::7'] });
    await waitUntil(async () => ((await tableOf()).get(PORT)?.restricted ? true : undefined), 'the endpoint in nftables', 5000, 50);
    assert.deepEqual((await tableOf()).get(PORT), { restricted: true, v4: [ALLOWED], v6: ['2001:db8::7'] });
    assert.equal(await reach(ALLOWED), 'open', 'the allowed address reaches the port');
    assert.equal(await reach(OTHER), 'refused', 'another address is reset');
    assert.deepEqual((await tableOf()).get(VOLUME_PORT), { restricted: true, v4: ['10.9.9.9'], v6: [] }, 'the volume port is untouched');
  });

  it('an update applies within seconds; a refused update changes nothing', async () => {
    await api.api('PUT', `/adminEndpoints/${PORT}`, { ips: [OTHER] });
    await waitUntil(async () => ((await tableOf()).get(PORT)?.v4.includes(OTHER) ? true : undefined), 'the new address in nftables', 5000, 50);
    assert.equal(await reach(OTHER), 'open');
    assert.equal(await reach(ALLOWED), 'refused');

    for (const body of [{ ips: ['10.0.0.0/8'] }, { ips: [] }, { ips: ['not-an-address'] }]) {
      assert.equal((await api.request('PUT', `/adminEndpoints/${PORT}`, body)).status, 400);
    }
    for (const body of [{ port: 70000, ips: [ALLOWED] }, { port: 'x', ips: [ALLOWED] }, { port: 2223, ips: ['300.1.1.1'] }]) {
      assert.equal((await api.request('POST', '/adminEndpoints', body)).status, 400);
    }
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual((await tableOf()).get(PORT), { restricted: true, v4: [OTHER], v6: [] }, 'refused requests changed nothing');
    assert.equal((await tableOf()).has(2223), false);
  });

  it('the REST API\'s own port may be an admin endpoint (protected the same way); the gRPC port may not', async () => {
    const apiPort = Number(new URL(plane.apiUrl).port);
    await api.api('POST', '/adminEndpoints', { port: apiPort, ips: ['127.0.0.1'] });
    await waitUntil(async () => ((await tableOf()).get(apiPort)?.restricted ? true : undefined), 'the API port in nftables', 5000, 50);
    await api.api('DELETE', `/adminEndpoints/${apiPort}`);
    await waitUntil(async () => (!(await tableOf()).has(apiPort) ? true : undefined), 'the API port released', 5000, 50);
    const grpcPort = Number(plane.grpcEndpoint.split(':')[1]);
    const refused = await api.request('POST', '/adminEndpoints', { port: grpcPort, ips: ['127.0.0.1'] });
    assert.equal(refused.status, 409, refused.text);
    assert.match(refused.text, /agents gRPC service/);
  });

  it('deleting the endpoint removes its entries; entries left by a deleted endpoint while the agent was away go at its start', async () => {
    await api.api('DELETE', `/adminEndpoints/${PORT}`);
    await waitUntil(async () => (!(await tableOf()).has(PORT) ? true : undefined), 'the endpoint gone from nftables', 5000, 50);
    assert.equal(await reach(ALLOWED), 'open');
    assert.equal(await reach(OTHER), 'open');
    assert.ok((await tableOf()).has(VOLUME_PORT), 'the volume port is untouched');

    // An endpoint removed while no agent ran: its entries are still in the table when a new one starts.
    await enforcer.stop();
    await api.api('POST', '/adminEndpoints', { port: PORT, ips: [ALLOWED] });
    await ipAcls.enforceAdminEndpoints(new Map([[PORT, ipAclOf([ALLOWED]) as IpAcl]]));
    await api.api('DELETE', `/adminEndpoints/${PORT}`);
    const fresh = new IpAclEnforcer(driver, silentLogger(), { min: 20000, max: 31999 });
    enforcer = new AdminEndpointsEnforcer({ store: new AdminEndpointRecordsStore(client, states.of(client)), target: fresh, resyncIntervalMs: 60_000, logger: silentLogger() });
    await enforcer.start();
    await waitUntil(async () => (!(await tableOf()).has(PORT) ? true : undefined), 'the stale entries removed', 5000, 50);
    assert.ok((await tableOf()).has(VOLUME_PORT), 'the volume port is untouched');
  });
});
